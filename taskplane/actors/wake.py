"""The wake actor: offers accepted activations to the agent, up to N turns at once.

Design rules "Wake authority begins at delivery", "Wake recovery follows durable
Task state", "Wake admission is bounded", "Failure is visible"; constants from
docs/scripted-agent.md.

``A2A_AGENT_CONCURRENCY`` (default 1: a single resident turn) Tasks may hold turn
authority at once, each Task at most one turn, each turn's tools bound to its own
Task; turns of one context stay in order (see :class:`WakeQueue`). Each offered wake
runs in a task of this actor's nursery (:mod:`taskplane.actors.wake_turns` says what
happens to it). Store failures while delivering retry with capped exponential
backoff, the wake keeping its offer slot. A crashed actor re-offers its offered
wakes (and admits its paused ones at once) when restarted.

Admission (the bound, reservations, senders waiting for a slot, overflows) is
:class:`~taskplane.actors.admission.Admission`, built here over this actor's queue.

Log events: ``a2a_wake_failed``, ``a2a_wake_pump_failed``, and those of
:mod:`taskplane.actors.admission` and :mod:`taskplane.actors.wake_turns`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import assert_never

import attrs
import trio

from taskplane.actors.admission import Admission
from taskplane.actors.channels import Channels
from taskplane.actors.owner_client import OwnerClient
from taskplane.actors.turns import RunningTurns
from taskplane.actors.wake_queue import Reservation, Wake, WakeQueue
from taskplane.actors.wake_turns import (
    MAX_TURN_ATTEMPTS,
    MAX_WAKE_DELIVERIES,
    PUMP_RETRY_CAP_MS,
    WAKE_RETRY_BASE_MS,
    Again,
    Done,
    Later,
    Outcome,
    TurnRunner,
    TurnSettings,
)
from taskplane.bridge.manifest import WorkflowOutputs
from taskplane.bridge.runtime import AgentRuntime
from taskplane.errors import Fenced, TaskplaneError, Transient
from taskplane.mailbox import CrashHook, no_crash
from taskplane.store.contract import TaskStore
from taskplane.store.records import TurnClaim

log = logging.getLogger("taskplane.actors.wake")

__all__ = ["MAX_TURN_ATTEMPTS", "MAX_WAKE_DELIVERIES", "PUMP_RETRY_CAP_MS", "WAKE_RETRY_BASE_MS"]
__all__ += ["WakeActor", "WakeStatistics"]


@attrs.frozen
class WakeStatistics:
    """A snapshot of the wake actor (read by metrics and tests).

    Attributes:
        waiting: wakes waiting behind the offered ones, reserved slots included
            (at most ``WAKE_QUEUE_SIZE`` admitted through intake: "Wake admission is bounded").
        reserved: slots held by acceptances still committing.
        offered: wakes offered now (at most ``concurrency``).
        authority: the Task ID of the only running turn (``None``: none or several).
        authorities: Task IDs holding turn authority now, sorted.
        running_turns: turns running now.
        concurrency: turns that may run at once (``A2A_AGENT_CONCURRENCY``).
        paused: wakes waiting out a recovery pause (not counted in ``waiting``).
        provider_unavailable: wakes waiting because their agent's provider is
            unavailable (design rule "Provider failures are not Task failures").
        turns_started, turn_failures, timeouts, overflows, abandoned: counts since start.
    """

    waiting: int
    reserved: int
    offered: int
    authority: str | None
    authorities: tuple[str, ...]
    running_turns: int
    concurrency: int
    paused: int
    provider_unavailable: int
    turns_started: int
    turn_failures: int
    timeouts: int
    overflows: int
    abandoned: int


class WakeActor:
    """The wake queue's actor. ``offer`` is called by intake after each commit.

    Args:
        store, owners: the task store and the typed client of the per-task owners.
        runtime: the agent; this actor is its only caller.
        outputs: declared workflow outputs, handed to each turn's toolbox.
        now_ms: wall clock in ms (a parameter for tests).
        turns: the running turns (shared with the owners, so a cancel stops a turn).
        settings: concurrency and turn deadline.
        anchor_sources: native sources with reply-anchor support (their Tasks may ask
            for input: a direct reply continues them); A2A always may.
        channels: the native sources' channels (a native Task's turn gets its
            source's channel tools); ``None``: no channel tools.
    """

    def __init__(
        self,
        store: TaskStore,
        owners: OwnerClient,
        runtime: AgentRuntime,
        outputs: WorkflowOutputs,
        now_ms: Callable[[], int],
        turns: RunningTurns,
        crash_hook: CrashHook = no_crash,
        anchor_sources: frozenset[str] = frozenset(),
        settings: TurnSettings | None = None,
        channels: Channels | None = None,
    ) -> None:
        settings = settings or TurnSettings()
        self.crash_hook, self.store, self.owners, self.runtime = crash_hook, store, owners, runtime
        self.queue = WakeQueue(concurrency=settings.concurrency)
        self.turns = turns
        self.runner = TurnRunner(
            store,
            owners,
            runtime,
            outputs,
            now_ms,
            turns,
            self.queue,
            settings,
            anchor_sources,
            channels,
        )
        self.admission = Admission(self.queue, owners, runtime)
        """Admission to this actor's queue (shared with intake and the HTTP edge)."""
        self._ready = trio.Event()
        self._paused: dict[str, Wake] = {}

    @property
    def authority(self) -> str | None:
        """The Task ID of the only running turn (``None``: none, or several)."""
        return self.queue.authority

    def offer(self, wake: Wake, reservation: Reservation | None = None) -> bool:
        """Admit ``wake`` (never waits), using ``reservation`` if given.

        ``False``: the queue is full (overflow): logged now, recorded durably as
        ``WAKE_FAILED`` by this actor, and the Task failed with a message saying why.
        """
        admission = self.queue.admit(wake, reserved=reservation is not None and reservation.use())
        if admission == "queued":
            self._ready.set()
        if admission == "overflow":
            self.admission.overflowed(wake)
        return admission != "overflow"

    def claim_at_acceptance(self, activation_id: str) -> TurnClaim | None:
        """A turn slot held for ``activation_id``'s wake, for its acceptance to claim
        at once (design rule "A wake waits for its node"), or ``None``: queue it.
        One process queues every wake in memory: always ``None``."""
        return None

    def unclaimed(self, activation_id: str) -> None:
        """The acceptance of ``activation_id`` is over: free the turn slot
        :meth:`claim_at_acceptance` held unless its wake was offered with a lease."""

    def holds(self, task_id: str) -> bool:
        """Whether ``task_id``'s turn is running now (the tools' turn authority)."""
        return self.queue.holds(task_id)

    def statistics(self) -> WakeStatistics:
        """Queue depth, the running turns and lifetime counters (synchronous)."""
        runner, queue = self.runner, self.queue
        return WakeStatistics(
            waiting=queue.waiting,
            reserved=queue.reserved,
            offered=len(queue.offered),
            authority=queue.authority,
            authorities=tuple(sorted(queue.authorities)),
            running_turns=len(self.turns),
            concurrency=queue.concurrency,
            paused=len(self._paused),
            provider_unavailable=runner.provider_waiting,
            turns_started=runner.turns_started,
            turn_failures=runner.turn_failures,
            timeouts=runner.timeouts,
            overflows=self.admission.overflows,
            abandoned=runner.abandoned,
        )

    async def replay(self) -> int:
        """Admit the activations eligible at startup; return how many were queued."""
        eligible = await self.store.pending_activations()
        queued = 0
        for pending in eligible:
            # Replayed wakes are work already accepted: they are restored whatever the
            # bound (which limits new intake: intake refuses new work while over it).
            wake = Wake(pending.activation_id, pending.task_id, pending.context_id)
            self._paused.pop(wake.activation_id, None)
            queued += self.queue.admit(wake, force=True) == "queued"
        if queued:
            self._ready.set()
        return queued

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Pump the queue forever, up to ``concurrency`` turns at once.

        Cancellation (or a crash): every running turn is cancelled; its wake stays
        offered and is re-offered when this actor runs again.
        """
        self.queue.reoffer_all()  # a crash interrupted them: offer them again
        for paused in list(self._paused.values()):  # their timers died with the crash
            self._readmit(paused)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.admission.record_overflows)
            task_status.started()
            while True:
                wake = self.queue.offer()
                self.admission.signal_room()  # a finished turn freed a slot
                if wake is None:
                    await self._ready.wait()
                    self._ready = trio.Event()
                    continue
                nursery.start_soon(self._serve, wake, nursery)

    async def _serve(self, wake: Wake, nursery: trio.Nursery) -> None:
        self.crash_hook("wake")
        outcome = await self._attempt(wake)
        await self._settle(wake, outcome, nursery)

    async def _attempt(self, wake: Wake) -> Outcome:
        """Deliver ``wake`` once and say what becomes of it: the turn's outcome,
        ``Again`` (after the next pump delay) when the plane failed transiently, or
        ``Done`` when a definite refusal means the wake cannot proceed.

        Raises:
            Fenced: the wake's lease is no longer this node's (a shared store only:
                the caller drops the wake without recording anything).
        """
        try:
            outcome = await self.runner.deliver(wake)
            self.runner.got_through(wake)
            return outcome
        except Fenced:
            raise
        except Transient as exc:
            delay_s = next(self.runner.retries(wake).pump)
            log.warning(
                "wake pump failed (%s); retrying in %d ms",
                exc,
                round(delay_s * 1000),
                extra={"event": "a2a_wake_pump_failed", "taskId": wake.task_id},
            )
            return Again(delay_s)
        except TaskplaneError as exc:
            # A definite refusal (e.g. the Task vanished): this wake cannot proceed.
            log.error(
                "wake for task %s dropped: %s",
                wake.task_id,
                exc,
                extra={"event": "a2a_wake_failed", "taskId": wake.task_id},
            )
            return Done()

    async def _settle(self, wake: Wake, outcome: Outcome, nursery: trio.Nursery) -> None:
        match outcome:
            case Again(delay_s=delay_s):
                await trio.sleep(delay_s)  # keeps its slot: FIFO and context order hold
                self.queue.reoffer(wake)
            case Later(delay_s=delay_s):
                self.queue.retire(wake)
                self._paused[wake.activation_id] = wake
                nursery.start_soon(self._readmit_after, wake, delay_s)
            case Done():
                self.runner.forget(wake)
                self.queue.retire(wake)
            case _:
                assert_never(outcome)
        self._ready.set()

    async def _readmit_after(self, wake: Wake, delay_s: float) -> None:
        await trio.sleep(delay_s)
        self._readmit(wake)

    def _readmit(self, wake: Wake) -> None:
        # Accepted work coming back from a pause: admitted whatever the bound.
        if self._paused.pop(wake.activation_id, None) is not None:
            self.queue.admit(wake, force=True)
            self._ready.set()
