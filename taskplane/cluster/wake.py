"""The cluster wake actor: claims wakes from the shared queue, runs their turns under
a lease, and gives each back as its outcome says.

Design rules "Wake admission is bounded", "Wake authority begins at delivery", "Wake
recovery follows durable Task state" and "Turn authority is a lease", on a store
shared by several nodes (PostgreSQL: always, one node being a cluster of one). The
queue is rows (:class:`~taskplane.store.wake_rows.WakeRows`; PostgreSQL's:
:mod:`taskplane.store.postgres.wakes`); this actor is each node's
claimer, with the one-process wake actor's outward shape (``offer``, ``holds``,
``statistics``, ``replay``, ``run``, ``admission``), so the plane, intake, metrics
and readiness use it unchanged.

* **Claiming.** Only while this node has a free turn slot (``A2A_AGENT_CONCURRENCY``
  of its own): at once when poked (:meth:`ClusterWakeActor.poke`: intake's
  after-commit offer), at each turn's end while a wake waits as far as this node
  knows, and every ``POLL_S`` whatever it knows (the poll). A wake
  another node accepted is left to that node for the rows' ``affinity_s`` (design
  rule "A wake waits for its node"), so the doorbell of such a wake
  (:meth:`ClusterWakeActor.heard_wake`) claims here once that grace is over.
  Once every ``POLL_S`` a claim also reads the queue's figures (admission's view of
  the bound, the paused wakes); between two such reads admission's view counts the
  slots this node's claims freed, so it may lag other nodes by one poll (the
  database still refuses an acceptance over the bound). A claim takes the next wake
  by the shared order, or one whose lease expired (reclaim), with the epoch bumped.
* **Claimed at acceptance.** A node with a free turn slot and no wake waiting that
  it knows of lets the acceptance it is about to commit claim the new wake itself
  (:meth:`ClusterWakeActor.claim_at_acceptance`, a
  :class:`~taskplane.store.records.TurnClaim`): the row is born running under this
  node's lease, and the offer after the commit holds it like any claim, with the
  lease counted from before the acceptance began. An acceptance that did not claim
  frees the slot (:meth:`ClusterWakeActor.unclaimed`); a lease offered with no slot
  left (its acceptance outlived its caller) is given back to the queue at once.
* **Turns.** Each claimed wake runs :meth:`~taskplane.actors.wake_turns.TurnRunner.deliver`
  with ``Wake.fence`` = its lease, so every write of the turn is fenced: ``Done`` ->
  the row is done (fenced); ``Again`` -> delivered again, keeping the lease; ``Later``
  -> the row is paused until ``now() + delay`` on the database (another node may take
  it then). The delivery cap (``MAX_WAKE_DELIVERIES``) counts ``WAKE_DELIVERED`` in
  the journal, so it holds across nodes and reclaims.
* **Leases.** Every held lease is renewed every ``ttl / 3`` (one statement). A lease
  the renewal did not find is lost: its turn is cancelled. A lease not renewed for
  ``ttl - margin`` (``margin`` = ``SELF_FENCE_MARGIN`` of ``ttl``) since the call
  that last set it began, on the monotonic clock, is given up the same way
  (self-fencing): the turn stops before any other node may take the wake. A turn
  whose lease was lost records nothing more: its writes raise ``Fenced``.
* **Restarts.** A restarted actor (or node with the same id) first ends its own
  leases, so its wakes are claimable again at once.

Log events: ``a2a_wake_claim_failed``, ``a2a_wake_lease_lost``,
``a2a_wake_self_fenced``, ``a2a_wake_release_failed``, ``wakes_restored``, and those
of :mod:`taskplane.actors.wake` and :mod:`taskplane.actors.wake_turns`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from functools import partial
from typing import assert_never

import attrs
import trio

from taskplane.actors.channels import Channels
from taskplane.actors.owner_client import OwnerClient
from taskplane.actors.turns import RunningTurns
from taskplane.actors.wake import WakeActor, WakeStatistics
from taskplane.actors.wake_queue import Reservation, Wake
from taskplane.actors.wake_turns import Again, Done, Later, TurnSettings
from taskplane.backoff import backoff
from taskplane.bridge.manifest import WorkflowOutputs
from taskplane.bridge.runtime import AgentRuntime
from taskplane.cluster.admission import ClusterAdmission, SharedBound
from taskplane.cluster.counters import ClusterCounters
from taskplane.cluster.identity import NodeIdentity
from taskplane.errors import Fenced, Transient
from taskplane.mailbox import CrashHook, no_crash
from taskplane.store.contract import TaskStore
from taskplane.store.records import Fence, TurnClaim
from taskplane.store.wake_rows import Claimed, WakeRows, lane_of

log = logging.getLogger("taskplane.actors.wake")

POLL_S = 0.25
"""Seconds between two claim polls while nothing pokes this actor."""
SELF_FENCE_MARGIN = 0.2
"""Share of the lease length a node gives up its turns before the lease can expire
(covers clock-rate drift between node and database, and the time a cancel takes)."""
BUSY_RETRY_S = 0.05
"""Seconds before a renewal tries again the leases whose rows a write held."""
BUSY_RETRIES = 5
"""Tries again per round (a write holds a row for one batch: milliseconds)."""
RELEASE_ATTEMPTS = 5
"""Tries to record a turn's end (done or paused) before leaving it to the lease."""


@attrs.define(eq=False)
class _Held:
    """A wake this node holds a lease on, its turn's scope, and since when (trio time
    at the start of the call that last set the lease)."""

    wake: Wake
    fence: Fence
    scope: trio.CancelScope
    lease_from: float


class ClusterWakeActor(WakeActor):
    """The wake actor of a node sharing its store (see the module docstring).

    Args: those of :class:`~taskplane.actors.wake.WakeActor`, and
        rows: the wake rows of the shared store, for this node.
        node: this node's id and lease length.
        poll_s: seconds between claim polls (``POLL_S``).
    """

    def __init__(
        self,
        store: TaskStore,
        owners: OwnerClient,
        runtime: AgentRuntime,
        outputs: WorkflowOutputs,
        now_ms: Callable[[], int],
        turns: RunningTurns,
        *,
        rows: WakeRows,
        node: NodeIdentity,
        crash_hook: CrashHook = no_crash,
        anchor_sources: frozenset[str] = frozenset(),
        settings: TurnSettings | None = None,
        channels: Channels | None = None,
        poll_s: float = POLL_S,
        counters: ClusterCounters | None = None,
    ) -> None:
        super().__init__(
            store,
            owners,
            runtime,
            outputs,
            now_ms,
            turns,
            crash_hook=crash_hook,
            anchor_sources=anchor_sources,
            settings=settings,
            channels=channels,
        )
        self.rows, self.node, self.poll_s = rows, node, poll_s
        self.bound = SharedBound()
        self.admission: ClusterAdmission = ClusterAdmission(self.bound, owners, runtime)
        """Admission to the shared bound (shared with intake and the HTTP edge)."""
        self._held: dict[str, _Held] = {}
        """Activation ID -> the wake this node holds a lease on now."""
        self._ahead: dict[str, float] = {}
        """Activation ID -> trio time its acceptance was let claim its turn (a turn
        slot held for it until its wake is offered or the acceptance is over)."""
        self._nursery: trio.Nursery | None = None
        """Where held turns run, while :meth:`run` runs."""
        self._claiming = 0
        """Turn slots the claim in flight may fill (its wakes are held when it ends)."""
        self._poked = trio.Event()
        self._waiting: trio.CancelScope | None = None
        """The scope of the wait between two claims, while it waits."""
        self._figures_due = float("-inf")
        """Trio time of the next poll: a claim whatever this node knows, which also
        reads the queue's figures (sooner when a doorbell asks, :meth:`heard_wake`)."""
        self._paused_seen = 0
        self.lost_leases = 0
        """Turns stopped because their lease was lost or given up, since start."""
        self.counters = counters if counters is not None else ClusterCounters()
        """Lease losses, self-fencing, fenced writes and reclaims, for ``/metrics``."""

    # -- the wake actor's shape -------------------------------------------------------

    def poke(self) -> None:
        """Claim now if a turn slot is free (synchronous; never waits)."""
        self._poked.set()

    def heard_wake(self) -> None:
        """A doorbell says a wake was queued (perhaps by another node, which alone
        claims it for the rows' ``affinity_s``): claim once that grace is over, unless
        a claim is due sooner (synchronous; never waits)."""
        due = trio.current_time() + self.rows.affinity_s
        if due < self._figures_due:
            self._figures_due = due
            if self._waiting is not None:
                self._waiting.deadline = min(self._waiting.deadline, due)

    def offer(self, wake: Wake, reservation: Reservation | None = None) -> bool:
        """A wake was just committed (its row written by the acceptance): use
        ``reservation``'s slot in the local view of the bound, and :meth:`poke`; or,
        with ``wake.fence`` (its acceptance claimed the turn), hold it and run its turn
        now. Always ``True``: the database refused the acceptance if the bound was
        full."""
        if wake.fence is not None:
            self._hold_claimed_at_acceptance(wake, wake.fence)
            return True
        if reservation is not None and reservation.use():
            self.bound.used()
        self.poke()
        return True

    def claim_at_acceptance(self, activation_id: str) -> TurnClaim | None:
        """Hold a turn slot for ``activation_id``'s acceptance to claim its wake with
        (design rule "A wake waits for its node"): only while this actor runs, a slot
        is free, and no slot of the bound was taken as last seen (wakes waiting in the
        queue go first; acceptances committing now do not count); else ``None``."""
        if self._nursery is None or self._free() <= 0 or self.bound.taken > 0:
            return None
        self._ahead[activation_id] = trio.current_time()
        return TurnClaim(self.node.node_id, self.ttl_s)

    def unclaimed(self, activation_id: str) -> None:
        """Free the slot held for ``activation_id`` unless its wake is held now."""
        if self._ahead.pop(activation_id, None) is not None:
            self.poke()  # a turn slot is free

    def _hold_claimed_at_acceptance(self, wake: Wake, fence: Fence) -> None:
        lease_from = self._ahead.pop(wake.activation_id, None)
        nursery = self._nursery
        if lease_from is None:
            # The acceptance ended before its commit was offered: its slot went back.
            # The commit just happened, so its lease began a moment ago at most.
            lease_from = trio.current_time()
            if self._free() <= 0 and nursery is not None:
                nursery.start_soon(self._give_back, wake, fence)
                return
        if nursery is None:
            return  # not running: the lease lapses and any node reclaims the wake
        claim = Claimed(fence, wake.task_id, wake.context_id, False, wake.accepted_source)
        self.counters.wakes_claimed_at_acceptance += 1
        self._hold(claim, lease_from, nursery)

    def _free(self) -> int:
        """Turn slots free: neither held, nor held for an acceptance, nor for the claim
        in flight."""
        return self.queue.concurrency - len(self._held) - len(self._ahead) - self._claiming

    async def _give_back(self, wake: Wake, fence: Fence) -> None:
        """Put a wake claimed at acceptance back in the queue (no turn slot is free
        for it), for any node to claim now."""
        log.info(
            "turn of task %s claimed at acceptance given back: no turn slot free",
            wake.task_id,
            extra={"event": "a2a_wake_given_back", "taskId": wake.task_id},
        )
        await self._retrying(lambda: self.rows.pause(fence, 0.0))

    def statistics(self) -> WakeStatistics:
        """Queue depth (the shared bound as last read), this node's turns and counters."""
        runner, queue = self.runner, self.queue
        return WakeStatistics(
            waiting=self.bound.waiting,
            reserved=self.bound.reserved,
            offered=len(self._held),
            authority=queue.authority,
            authorities=tuple(sorted(queue.authorities)),
            running_turns=len(self.turns),
            concurrency=queue.concurrency,
            paused=self._paused_seen,
            provider_unavailable=runner.provider_waiting,
            turns_started=runner.turns_started,
            turn_failures=runner.turn_failures,
            timeouts=runner.timeouts,
            overflows=0,
            abandoned=runner.abandoned,
        )

    async def replay(self) -> int:
        """Give every accepted activation that should have a wake and has no row one
        (a database from before the wake rows; idempotent, harmless on every node),
        then poke; how many rows were added."""
        restored = await self.rows.restore(await self.store.pending_activations())
        if restored:
            log.info(
                "%d wakes restored as rows",
                restored,
                extra={"event": "wakes_restored", "count": restored},
            )
        self.poke()
        return restored

    # -- the loops --------------------------------------------------------------------

    @property
    def ttl_s(self) -> float:
        """The lease length in seconds."""
        return self.node.lease_ttl_s

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Claim and run wakes forever (see the module docstring).

        Cancellation (or a crash): every running turn is cancelled; its lease lapses
        (or is ended at once by the next start of this actor) and its wake is claimed
        again.
        """
        self._held.clear()
        self._ahead.clear()
        self._claiming = 0
        self._figures_due = float("-inf")
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started()
                await self._retrying(self.rows.expire_own)
                nursery.start_soon(self._renew_leases)
                nursery.start_soon(self._self_fence)
                while True:
                    await self._claim(nursery)
                    with trio.move_on_at(self._figures_due) as self._waiting:
                        await self._poked.wait()
                    self._waiting = None
                    self._poked = trio.Event()
        finally:
            self._nursery = None
            self.rows.close()  # reopened by the next run (a restart)

    async def _retrying(self, call: Callable[[], Awaitable[object]]) -> None:
        delays = backoff(0.01, 1.0)
        while True:
            try:
                await call()
                return
            except Transient as exc:
                log.warning(
                    "wake queue unavailable (%s)", exc, extra={"event": "a2a_wake_claim_failed"}
                )
                await trio.sleep(next(delays))

    async def _claim(self, nursery: trio.Nursery) -> None:
        """One claim: at each poll whatever this node knows (reclaims, pauses come
        due, other nodes' wakes past their grace are found there, and the figures
        read), else only if a turn slot is free and a wake waits as far as this node
        knows (its own queued wakes; most are claimed by their acceptance)."""
        free = self._free()
        started = trio.current_time()
        polling = started >= self._figures_due
        if not polling and (not free or self.bound.taken == 0):
            return
        if polling:
            self._figures_due = started + self.poll_s  # also when this claim fails
        lanes = {lane_of(h.wake.task_id, h.wake.context_id) for h in self._held.values()}
        self._claiming = free  # acceptances meanwhile may not count these slots free
        try:
            claimed, figures = await self.rows.claim(free, lanes, figures=polling)
        except Transient as exc:
            log.warning("wake claim failed (%s)", exc, extra={"event": "a2a_wake_claim_failed"})
            return
        finally:
            self._claiming = 0
        if figures is None:
            self.admission.freed(sum(c.freed_slot for c in claimed))
        else:
            self._paused_seen = figures.paused
            self.admission.seen(figures.waiting)
        for claim in claimed:
            self._hold(claim, started, nursery)

    def _hold(self, claim: Claimed, started: float, nursery: trio.Nursery) -> None:
        if claim.fence.epoch > 1:
            self.counters.wakes_reclaimed += 1
        wake = Wake(
            claim.fence.activation_id,
            claim.task_id,
            claim.context_id,
            claim.accepted_source,
            fence=claim.fence,
        )
        self.queue.admit(wake, force=True)
        offered = self.queue.offer()
        assert offered == wake, "a claimed wake's Task or context already runs here"
        held = self._held[wake.activation_id] = _Held(
            wake, claim.fence, trio.CancelScope(), started
        )
        nursery.start_soon(self._serve_held, held)

    async def _serve_held(self, held: _Held) -> None:
        wake = held.wake
        try:
            with held.scope:
                self.crash_hook("wake")
                await self._turns(held)
            if held.scope.cancelled_caught:
                self.lost_leases += 1
        finally:
            self.queue.retire(wake)
            self._held.pop(wake.activation_id, None)
            self.poke()  # a turn slot is free

    async def _turns(self, held: _Held) -> None:
        """Deliver ``held``'s wake until its outcome is ``Done`` or ``Later``; record
        that outcome under the lease (nothing once the lease is lost)."""
        wake = held.wake
        while True:
            try:
                outcome = await self._attempt(wake)
            except Fenced as exc:
                log.warning(
                    "turn lease of task %s lost: %s",
                    wake.task_id,
                    exc,
                    extra={"event": "a2a_wake_lease_lost", "taskId": wake.task_id},
                )
                self.lost_leases += 1
                self.counters.fenced_writes += 1
                self.counters.turn_leases_lost += 1
                return
            match outcome:
                case Again(delay_s=delay_s):
                    await trio.sleep(delay_s)  # the lease is kept (and renewed)
                case Later(delay_s=delay_s):
                    await self._release(held, partial(self.rows.pause, held.fence, delay_s))
                    return
                case Done():
                    self.runner.forget(wake)
                    await self._release(held, partial(self.rows.complete, held.fence))
                    return
                case _:
                    assert_never(outcome)

    async def _release(self, held: _Held, record: Callable[[], Awaitable[bool]]) -> None:
        """Record the end of ``held``'s turn (a few tries; if none commits the lease
        lapses and the wake is claimed again, which follows durable Task state)."""
        delays = backoff(0.05, 1.0)
        for _ in range(RELEASE_ATTEMPTS):
            try:
                if not await record():
                    self.counters.turn_leases_lost += 1
                    log.warning(
                        "turn lease of task %s lost before its end was recorded",
                        held.wake.task_id,
                        extra={"event": "a2a_wake_lease_lost", "taskId": held.wake.task_id},
                    )
                return
            except Transient as exc:
                log.warning(
                    "turn end of task %s not recorded (%s)",
                    held.wake.task_id,
                    exc,
                    extra={"event": "a2a_wake_release_failed", "taskId": held.wake.task_id},
                )
                await trio.sleep(next(delays))

    async def _renew_leases(self) -> None:
        """Every ``ttl / 3``: renew every held lease in one statement; cancel the turns
        whose lease the renewal did not find. A lease whose row a write held (busy)
        is tried again after ``BUSY_RETRY_S``, a few times, within the round."""
        while True:
            await trio.sleep(self.ttl_s / 3)
            held = list(self._held.values())
            for _ in range(BUSY_RETRIES + 1):
                if not held:
                    break
                held = await self._renew(held)
                if held:
                    await trio.sleep(BUSY_RETRY_S)

    async def _renew(self, held: list[_Held]) -> list[_Held]:
        """Renew ``held``'s leases once; those found busy (to try again)."""
        started = trio.current_time()
        try:
            renewal = await self.rows.renew([h.fence for h in held])
        except Transient as exc:
            log.warning(
                "wake lease renewal failed (%s)", exc, extra={"event": "a2a_wake_claim_failed"}
            )
            return []
        busy: list[_Held] = []
        for h in held:
            if h.wake.activation_id in renewal.renewed:
                h.lease_from = max(h.lease_from, started)
            elif h.wake.activation_id in renewal.busy:
                busy.append(h)
            elif self._held.get(h.wake.activation_id) is h:
                self.counters.turn_leases_lost += 1
                log.warning(
                    "turn lease of task %s lost; stopping its turn",
                    h.wake.task_id,
                    extra={"event": "a2a_wake_lease_lost", "taskId": h.wake.task_id},
                )
                h.scope.cancel()
        return [h for h in busy if self._held.get(h.wake.activation_id) is h]

    async def _self_fence(self) -> None:
        """Cancel each turn whose lease went ``ttl - margin`` without a renewal."""
        keep_s = self.ttl_s * (1 - SELF_FENCE_MARGIN)
        while True:
            now = trio.current_time()
            for h in list(self._held.values()):
                if now >= h.lease_from + keep_s and not h.scope.cancel_called:
                    self.counters.turns_self_fenced += 1
                    log.error(
                        "turn lease of task %s not renewed for %.3g s; stopping its turn",
                        h.wake.task_id,
                        now - h.lease_from,
                        extra={"event": "a2a_wake_self_fenced", "taskId": h.wake.task_id},
                    )
                    h.scope.cancel()
            # A lease claimed meanwhile is due no sooner than keep_s from now: looking
            # again every half margin finds it at most that late.
            due = [h.lease_from + keep_s for h in self._held.values() if not h.scope.cancel_called]
            await trio.sleep_until(min([*due, now + self.ttl_s * SELF_FENCE_MARGIN / 2]))
