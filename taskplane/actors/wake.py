"""The wake actor: offers accepted activations to the agent, one turn at a time.

Design rules "Wake authority begins at delivery", "Wake recovery follows durable
Task state", "Wake admission is bounded"; constants from docs/scripted-agent.md.

Per offered wake: a missing or terminal Task is retired (``WOKEN``); a wake delivered
``MAX_WAKE_DELIVERIES`` times without settling is abandoned (``WAKE_FAILED`` plus
unhealthy evidence); otherwise the queue grants authority, moves the Task to
``WORKING`` and records ``WOKEN`` and ``WAKE_DELIVERED`` in one commit through
owner(T), then runs the turn. Afterwards the authority is cleared; a terminal Task's
session is released; an interrupted Task waits for a new continuation; an unsettled
one is re-offered. A failed turn is retried ``MAX_TURN_ATTEMPTS`` times with backoff,
then the session is released, unhealthy evidence recorded, and the activation left
replayable. Store failures while pumping retry with capped exponential backoff.

Log events: ``agent_woken``, ``a2a_wake_failed``, ``a2a_wake_abandoned``,
``a2a_wake_overflow``, ``a2a_wake_overflow_evidence_failed``, ``a2a_wake_pump_failed``,
``a2a_task_turn_paused``.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable

import attrs
import trio

from taskplane.actors.owner_client import OwnerClient
from taskplane.actors.protocol import CrashHook, no_crash
from taskplane.actors.toolbox import TaskToolbox
from taskplane.actors.turns import RunningTurns
from taskplane.actors.wake_queue import Reservation, Wake, WakeQueue
from taskplane.actors.wake_records import unhealthy_record, wake_failed_record, woken_record
from taskplane.bridge.manifest import WorkflowOutputs
from taskplane.bridge.runtime import AgentRuntime, session_id, wake_prompt
from taskplane.errors import ActorGone, Overloaded, StoreUnavailable, TaskplaneError
from taskplane.store.contract import TaskStore
from taskplane.store.records import A2A_SOURCE, ActivationState, StoredTask

log = logging.getLogger("taskplane.actors.wake")

MAX_TURN_ATTEMPTS = 3
WAKE_RETRY_BASE_MS = 10
MAX_WAKE_DELIVERIES = 5
MAX_OVERFLOW_BACKLOG = 1024
PUMP_RETRY_CAP_MS = 1_000


@attrs.frozen
class WakeStatistics:
    """A snapshot of the wake actor (read by metrics and tests).

    Attributes:
        waiting: wakes waiting behind the offered one, reserved slots included
            (at most 128 admitted through intake: "Wake admission is bounded").
        reserved: slots held by acceptances still committing.
        offered: whether a wake is offered now.
        authority: the Task ID whose turn is running, if any.
        running_turns: turns running now.
        turns_started, turn_failures, overflows, abandoned: counts since start.
    """

    waiting: int
    reserved: int
    offered: bool
    authority: str | None
    running_turns: int
    turns_started: int
    turn_failures: int
    overflows: int
    abandoned: int


ADMISSION_WAIT_S = 1.0
"""Seconds a send of new work may wait for a free waiting slot before its 503."""

MAX_ADMISSION_WAITERS = 128
"""Sends that may wait for a slot at once; beyond that new work is refused at once."""


class WakeActor:
    """The wake queue's actor. ``offer`` is called by intake after each commit.

    Args:
        store, owners: the task store and the typed client of the per-task owners.
        runtime: the agent; this actor is its only caller.
        outputs: declared workflow outputs, handed to each turn's toolbox.
        now_ms: wall clock in ms (a parameter for tests).
        turns: the running turns (shared with the owners, so a cancel stops a turn).
        anchor_sources: native sources with reply-anchor support (their Tasks may ask
            for input: a direct reply continues them); A2A always may.
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
    ) -> None:
        self.crash_hook = crash_hook
        self.anchor_sources = anchor_sources
        self.store = store
        self.owners = owners
        self.runtime = runtime
        self.outputs = outputs
        self.now_ms = now_ms
        self.queue = WakeQueue()
        self._attempts: dict[str, int] = {}
        self._ready = trio.Event()
        self._overflowed: deque[Wake] = deque()
        self._overflow_ready = trio.Event()
        self.turns = turns
        self._turns_started = 0
        self._turn_failures = 0
        self._overflows = 0
        self._abandoned = 0
        self._room = trio.lowlevel.ParkingLot()

    @property
    def authority(self) -> str | None:
        """The Task ID whose turn is running, if any."""
        return self.queue.authority

    def reserve(self) -> Reservation | None:
        """Hold a waiting slot for an acceptance about to commit (``None``: full)."""
        return Reservation(self.queue) if self.queue.reserve() else None

    def signal_room(self) -> None:
        """Wake as many senders waiting in :meth:`reserve_within` as slots are free."""
        free = self.queue.limit - self.queue.waiting
        if free > 0 and self._room.statistics().tasks_waiting:
            self._room.unpark(count=free)

    @property
    def admission_waiters_full(self) -> bool:
        """``MAX_ADMISSION_WAITERS`` senders already wait for a slot."""
        return self._room.statistics().tasks_waiting >= MAX_ADMISSION_WAITERS

    async def reserve_within(self, timeout_s: float = ADMISSION_WAIT_S) -> Reservation | None:
        """:meth:`reserve`, waiting at most ``timeout_s`` seconds for a free slot.

        ``None`` at the deadline, or at once when ``MAX_ADMISSION_WAITERS`` already
        wait. A parked sender costs no CPU, so new work arriving at a full queue waits
        here instead of being refused and re-sent in a loop by clients that ignore
        ``Retry-After``: refusals do not starve the agent's turns, and each slot the
        agent frees goes to a waiting sender ("Wake admission is bounded": nothing is
        recorded or acknowledged while waiting). Cancelling stops the wait.
        """
        reservation = self.reserve()
        if reservation is not None or self.admission_waiters_full:
            return reservation
        with trio.move_on_after(timeout_s):
            while reservation is None:
                await self._room.park()
                reservation = self.reserve()
        return reservation

    def offer(self, wake: Wake, reservation: Reservation | None = None) -> bool:
        """Admit ``wake`` (never waits), using ``reservation`` if given.

        ``False``: the queue is full (overflow): logged now, recorded durably as
        ``WAKE_FAILED`` by this actor, and the Task failed with a message saying why.
        """
        admission = self.queue.admit(wake, reserved=reservation is not None and reservation.use())
        if admission == "queued":
            self._ready.set()
        if admission != "overflow":
            return True
        log.warning(
            "wake queue full (%d waiting); wake for task %s not admitted",
            self.queue.limit,
            wake.task_id,
            extra={
                "event": "a2a_wake_overflow",
                "taskId": wake.task_id,
                "activationId": wake.activation_id,
            },
        )
        if len(self._overflowed) < MAX_OVERFLOW_BACKLOG:
            self._overflowed.append(wake)
            self._overflow_ready.set()
        # else: left ACCEPTED without WOKEN, so startup replays it: still not lost.
        return False

    async def _record_overflows(self) -> None:
        while True:
            await self._overflow_ready.wait()
            self._overflow_ready = trio.Event()
            while self._overflowed:
                await self.record_overflow(self._overflowed.popleft())

    async def record_overflow(self, wake: Wake) -> None:
        """Record ``WAKE_FAILED`` (attempts 0) for an overflowed wake, durably, and fail
        its Task if it never started, so its caller sees why it will not run.

        Errors are logged (``a2a_wake_overflow_evidence_failed``), never raised.
        """
        self._overflows += 1
        try:
            await self.owners.fail_overflowed(wake)
        except TaskplaneError:
            log.exception(
                "overflow evidence failed",
                extra={"event": "a2a_wake_overflow_evidence_failed", "taskId": wake.task_id},
            )

    def holds(self, task_id: str) -> bool:
        """Whether ``task_id``'s turn is running now (the tools' turn authority)."""
        return self.queue.authority == task_id

    def statistics(self) -> WakeStatistics:
        """Queue depth, the running turn and lifetime counters (synchronous)."""
        return WakeStatistics(
            waiting=self.queue.waiting,
            reserved=self.queue.reserved,
            offered=self.queue.offered is not None,
            authority=self.queue.authority,
            running_turns=len(self.turns),
            turns_started=self._turns_started,
            turn_failures=self._turn_failures,
            overflows=self._overflows,
            abandoned=self._abandoned,
        )

    async def replay(self) -> int:
        """Admit the activations eligible at startup; return how many were queued."""
        eligible = await self.store.pending_activations()
        queued = 0
        for pending in eligible:
            # Replayed wakes are work already accepted: they are restored whatever the
            # bound (which limits new intake: intake refuses new work while over it).
            wake = Wake(pending.activation_id, pending.task_id)
            queued += self.queue.admit(wake, force=True) == "queued"
        if queued:
            self._ready.set()
        return queued

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Pump the queue forever, one turn at a time."""
        if self.queue.offered is not None:  # a crash interrupted it: offer it again
            self.queue.reoffer()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._record_overflows)
            task_status.started()
            await self._pump()

    async def _pump(self) -> None:
        failures = 0
        while True:
            wake = self.queue.offer()
            self.signal_room()  # a finished turn freed a slot
            if wake is None:
                await self._ready.wait()
                self._ready = trio.Event()
                continue
            try:
                self.crash_hook("wake")
                await self._deliver(wake)
                failures = 0
            except (StoreUnavailable, ActorGone, Overloaded) as exc:
                failures += 1
                delay_ms = min(WAKE_RETRY_BASE_MS * 2 ** (failures - 1), PUMP_RETRY_CAP_MS)
                log.warning(
                    "wake pump failed (%s); retrying in %d ms",
                    exc,
                    delay_ms,
                    extra={"event": "a2a_wake_pump_failed", "taskId": wake.task_id},
                )
                if self.queue.offered is not None:
                    self.queue.reoffer()
                await trio.sleep(delay_ms / 1000)
            except TaskplaneError as exc:
                # A definite refusal (e.g. the Task vanished): this wake cannot proceed.
                log.error(
                    "wake for task %s dropped: %s",
                    wake.task_id,
                    exc,
                    extra={"event": "a2a_wake_failed", "taskId": wake.task_id},
                )
                self._finish(wake)

    async def _load(self, wake: Wake) -> tuple[ActivationState, StoredTask | None]:
        loaded = await self.store.wake_state(wake.activation_id, wake.task_id)
        return loaded.activation, loaded.stored

    async def _deliver(self, wake: Wake) -> None:
        state, stored = await self._load(wake)
        if stored is None or stored.task.status.state.is_terminal:
            if "WOKEN" not in state.kinds:
                now = self.now_ms()
                await self.store.append((woken_record(wake, now),), now)
            self._finish(wake)
            return
        if state.deliveries >= MAX_WAKE_DELIVERIES:
            await self._abandon(wake, stored.source, "delivery cap reached without settlement")
            return
        failure: Exception | None = None
        # The turn's scope is open from the grant on: a cancel committed at any point
        # after it stops this turn (design rule "Cancel stops the running turn").
        with self.turns.running(wake.task_id) as scope:
            granted = await self.owners.grant_turn(wake, state)
            if granted is None or granted.status.state.is_interrupted:
                self._finish(wake)
                return
            task_id = self.queue.grant()
            log.info(
                "agent woken for task %s",
                task_id,
                extra={
                    "event": "agent_woken",
                    "taskId": task_id,
                    "sessionId": session_id(task_id),
                    "delivery": state.deliveries + 1,
                },
            )
            toolbox = TaskToolbox(
                task_id,
                self.owners,
                self,
                self.outputs,
                can_continue=stored.source == A2A_SOURCE or stored.source in self.anchor_sources,
            )
            self._turns_started += 1
            try:
                await self.runtime.run_turn(task_id, wake_prompt(task_id), toolbox)
            except Exception as exc:
                failure = exc
            finally:
                self.queue.authority = None
        task_id = wake.task_id
        after = (await self.owners.snapshot(task_id)).task
        if (
            failure is not None
            and not scope.cancelled_caught
            and not after.status.state.is_terminal
        ):
            # (A turn whose Task was canceled under it is over, not failed.)
            await self._turn_failed(wake, stored.source, failure)
            return
        if after.status.state.is_settled:
            await self.runtime.release(task_id)
            self._finish(wake)
        else:
            self.queue.reoffer()  # unsettled: bounded by MAX_WAKE_DELIVERIES

    async def _turn_failed(self, wake: Wake, source: str, failure: Exception) -> None:
        self._turn_failures += 1
        attempts = self._attempts.get(wake.activation_id, 0) + 1
        self._attempts[wake.activation_id] = attempts
        log.warning(
            "turn for task %s failed (attempt %d of %d): %r",
            wake.task_id,
            attempts,
            MAX_TURN_ATTEMPTS,
            failure,
            extra={"event": "a2a_wake_failed", "taskId": wake.task_id, "attempts": attempts},
            exc_info=failure,
        )
        if attempts < MAX_TURN_ATTEMPTS:
            self.queue.reoffer()
            await trio.sleep(WAKE_RETRY_BASE_MS * 2 ** (attempts - 1) / 1000)
            return
        await self.runtime.release(wake.task_id)
        now = self.now_ms()
        error = f"turn failed {attempts} times: {failure!r}"
        await self.store.append((unhealthy_record(wake, source, error),), now)
        log.error(
            "task %s paused after %d failed turns",
            wake.task_id,
            attempts,
            extra={"event": "a2a_task_turn_paused", "taskId": wake.task_id},
        )
        self._finish(wake)

    async def _abandon(self, wake: Wake, source: str, reason: str) -> None:
        self._abandoned += 1
        now = self.now_ms()
        records = (
            unhealthy_record(wake, source, reason),
            wake_failed_record(wake, MAX_WAKE_DELIVERIES, reason, now),
        )
        await self.store.append(records, now)
        log.error(
            "wake for task %s abandoned: %s",
            wake.task_id,
            reason,
            extra={"event": "a2a_wake_abandoned", "taskId": wake.task_id},
        )
        await self.runtime.release(wake.task_id)
        self._finish(wake)

    def _finish(self, wake: Wake) -> None:
        self._attempts.pop(wake.activation_id, None)
        self.queue.retire()
