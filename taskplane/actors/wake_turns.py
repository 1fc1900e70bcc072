"""One offered wake, run to its outcome: the turn, its deadline, its retries.

Design rules "Wake authority begins at delivery", "Wake recovery follows durable
Task state" and "Failure is visible". The wake actor (:mod:`taskplane.actors.wake`)
runs :meth:`TurnRunner.deliver` for each offered wake, up to ``A2A_AGENT_CONCURRENCY``
at once, and acts on the :data:`Outcome` it returns.

Per offered wake: a missing or terminal Task is retired (``WOKEN``); a wake delivered
``MAX_WAKE_DELIVERIES`` times without settling is given up on; otherwise owner(T)
grants the turn (WORKING + ``WOKEN`` + ``WAKE_DELIVERED`` in one commit) and the
turn runs, for at most the turn deadline (``A2A_TURN_TIMEOUT_MS``). Afterwards the
authority is revoked; a settled Task's session is released; an unsettled one is
re-offered.

A turn that raised :class:`~taskplane.bridge.turn_outcome.TurnUnsettled` (the agent
answered, after reminders, without settling the Task) is not retried: ``WAKE_FAILED``
+ ``activation.unsettled`` evidence + the Task FAILED with the agent's text in its
status message, in one commit through owner(T). The policy (``A2A_AGENT_PLAIN_TEXT``)
chose that outcome: it is logged at warning and its evidence does not count against
readiness (a model ignoring its tools, perhaps provoked by a caller, must not get
the node pulled). Log lines quote at most ``MAX_LOG_TEXT_CHARS`` of any text.

A turn that raised :class:`~taskplane.errors.ProviderUnavailable` (the model provider
answered 429 or 5xx, could not be reached, or the agent program is restarting) is not
a failed turn (design rule "Provider failures are not Task failures"): the wake is
retired and admitted again after a pause, 1 s doubling to
``A2A_AGENT_PROVIDER_BACKOFF_CAP_S`` (at least the provider's ``Retry-After``), and
its next delivery repeats the failed one's number, so the delivery cap is not used
up. Once ``A2A_AGENT_PROVIDER_PATIENCE_S`` have passed since the first such failure
the plane gives up as at the delivery cap (``WAKE_FAILED`` with ``error: "the
agent's provider stayed unavailable"``). That clock is kept in memory: a restart
starts it again.

Failed turns (an exception, or the deadline passed):

1. retried at once with backoff (10 ms, 20 ms) up to ``MAX_TURN_ATTEMPTS`` turns;
2. then the wake pauses: session released, ``activation.unhealthy`` evidence, and the
   wake re-admitted later, after 1 s, 2 s, 4 s ... (capped at
   ``RECOVERY_BACKOFF_CAP_MS``), one turn each time;
3. the delivery cap ends it: a failed turn that was the wake's
   ``MAX_WAKE_DELIVERIES``-th delivery (durable, counted across restarts) gives up:
   ``WAKE_FAILED`` + unhealthy evidence + the Task FAILED with an agent status message
   giving the reason, in one commit through owner(T). A blocking send settles then.

Log events: ``agent_woken`` and ``agent_turn_ended`` (a turn's start and end, so a
log shows when each Task held its turn), ``a2a_wake_failed``, ``a2a_turn_timed_out``,
``a2a_task_turn_paused``, ``a2a_wake_abandoned``, ``agent_provider_unavailable``,
``agent_provider_available``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

import attrs
import trio

from taskplane.actors.channels import Channels
from taskplane.actors.owner_client import OwnerClient
from taskplane.actors.toolbox import TaskToolbox
from taskplane.actors.turns import RunningTurns
from taskplane.actors.wake_queue import Wake, WakeQueue
from taskplane.actors.wake_records import (
    accepted_state,
    unhealthy_record,
    unsettled_record,
    wake_failed_record,
    woken_record,
)
from taskplane.backoff import backoff
from taskplane.bridge.manifest import WorkflowOutputs
from taskplane.bridge.runtime import AgentRuntime, session_id, wake_prompt
from taskplane.bridge.tools import MAX_LOG_TEXT_CHARS, clip
from taskplane.bridge.turn_outcome import TurnUnsettled
from taskplane.errors import Fenced, ProviderUnavailable
from taskplane.model.types import Task
from taskplane.settings import (
    DEFAULT_PROVIDER_BACKOFF_CAP_S,
    DEFAULT_PROVIDER_PATIENCE_S,
    DEFAULT_TURN_TIMEOUT_MS,
)
from taskplane.store.contract import TaskStore
from taskplane.store.records import A2A_SOURCE

log = logging.getLogger("taskplane.actors.wake")

MAX_TURN_ATTEMPTS = 3
WAKE_RETRY_BASE_MS = 10
"""First delay before retrying a failed turn, or a delivery the plane could not make
(a transient failure); doubled at each retry."""
PUMP_RETRY_CAP_MS = 1_000
"""Longest delay between retries of a delivery the plane could not make."""
MAX_WAKE_DELIVERIES = 5
RECOVERY_BACKOFF_BASE_MS = 1_000
"""First pause of a wake whose turns keep failing; doubled at each pause."""
RECOVERY_BACKOFF_CAP_MS = 60_000
"""Longest pause between recovery turns."""
PROVIDER_BACKOFF_BASE_S = 1.0
"""First pause of a wake whose provider is unavailable; doubled at each further one,
up to ``A2A_AGENT_PROVIDER_BACKOFF_CAP_S``."""
CAP_REASON = "delivery cap reached without settlement"
PROVIDER_REASON = "the agent's provider stayed unavailable"
UNSETTLED_REASON = "the agent ended its turn without settling the task"
ERROR_CHARS = 300
"""Characters of the last turn error quoted in a given-up Task's status message."""


class TurnTimedOut(Exception):
    """The turn ran past the turn deadline and was cancelled."""


@attrs.frozen
class Done:
    """The wake is over: retire it."""


@attrs.frozen
class Again:
    """Re-offer the wake after ``delay_s`` (it keeps its offer slot meanwhile)."""

    delay_s: float = 0.0


@attrs.frozen
class Later:
    """Retire the wake now and admit it again after ``delay_s`` (a recovery pause)."""

    delay_s: float


Outcome = Done | Again | Later


@attrs.frozen
class TurnSettings:
    """How turns run (design rule "Wake admission is bounded" keeps the 128 bound
    whatever these are).

    Attributes:
        concurrency: Tasks that may hold turn authority at once (1..64).
        turn_timeout_ms: a turn's deadline in ms (0: none).
        provider_patience_s: how long a wake may wait out an unavailable provider, in
            seconds from its first such failure, before its Task fails.
        provider_backoff_cap_s: the longest pause between two tries of an unavailable
            provider, in seconds.
    """

    concurrency: int = 1
    turn_timeout_ms: int = DEFAULT_TURN_TIMEOUT_MS
    provider_patience_s: float = DEFAULT_PROVIDER_PATIENCE_S
    provider_backoff_cap_s: float = DEFAULT_PROVIDER_BACKOFF_CAP_S


def _pump_delays() -> Iterator[float]:
    return backoff(WAKE_RETRY_BASE_MS / 1000, PUMP_RETRY_CAP_MS / 1000)


def _turn_delays() -> Iterator[float]:
    return backoff(WAKE_RETRY_BASE_MS / 1000)  # MAX_TURN_ATTEMPTS bounds it


def _pause_delays() -> Iterator[float]:
    return backoff(RECOVERY_BACKOFF_BASE_MS / 1000, RECOVERY_BACKOFF_CAP_MS / 1000)


@attrs.define
class WakeRetries:
    """One wake's retry state, from its first failure until it is over (``Done``).

    Each retry takes the next delay of its iterator (:func:`taskplane.backoff.backoff`);
    nothing here counts but the failed turns, which the log reports.

    Attributes:
        pump: seconds before delivering again after a transient failure of the plane
            (``Transient``): 10 ms doubling to ``PUMP_RETRY_CAP_MS``; restarted once a
            delivery gets through.
        turns: seconds before retrying a failed turn at once: 10 ms, 20 ms (at most
            ``MAX_TURN_ATTEMPTS`` turns).
        pauses: seconds of each recovery pause: 1 s doubling to
            ``RECOVERY_BACKOFF_CAP_MS``.
        failed_turns: turns of this wake that failed so far ("attempt n of 3").
        provider: seconds of each pause while the agent's provider is unavailable
            (1 s doubling to the settings' cap); restarted once a turn gets through.
        provider_since: ``trio.current_time()`` of the first provider failure of the
            current run of them, or ``None``.
        provider_redeliver: the last delivery failed because the provider was
            unavailable: the next grant repeats its delivery number, so provider
            failures do not count toward ``MAX_WAKE_DELIVERIES``.
    """

    pump: Iterator[float] = attrs.field(factory=_pump_delays)
    turns: Iterator[float] = attrs.field(factory=_turn_delays)
    pauses: Iterator[float] = attrs.field(factory=_pause_delays)
    failed_turns: int = 0
    provider: Iterator[float] | None = None
    provider_since: float | None = None
    provider_redeliver: bool = False


class TurnRunner:
    """Runs offered wakes (see the module docstring); shared by concurrent turns.

    Counters (read by :class:`~taskplane.actors.wake.WakeStatistics`):
    ``turns_started``, ``turn_failures``, ``timeouts``, ``abandoned``, and
    :attr:`provider_waiting`; ``provider_failures`` counts the turns that found the
    provider unavailable (not failed turns).
    """

    def __init__(
        self,
        store: TaskStore,
        owners: OwnerClient,
        runtime: AgentRuntime,
        outputs: WorkflowOutputs,
        now_ms: Callable[[], int],
        turns: RunningTurns,
        queue: WakeQueue,
        settings: TurnSettings,
        anchor_sources: frozenset[str],
        channels: Channels | None = None,
    ) -> None:
        self.store, self.owners, self.runtime = store, owners, runtime
        self.channels = channels
        self.outputs, self.now_ms, self.turns = outputs, now_ms, turns
        self.queue, self.settings, self.anchor_sources = queue, settings, anchor_sources
        self._retries: dict[str, WakeRetries] = {}
        """Activation ID -> its retry state (only for wakes that failed at least once)."""
        self._delivered: set[str] = set()
        """Activations delivered at least once (their journal state must be read)."""
        self.turns_started = self.turn_failures = self.timeouts = self.abandoned = 0
        self.provider_failures = 0

    def forget(self, wake: Wake) -> None:
        """Drop ``wake``'s retry state (it is over)."""
        self._retries.pop(wake.activation_id, None)
        self._delivered.discard(wake.activation_id)

    def retries(self, wake: Wake) -> WakeRetries:
        """``wake``'s retry state, created at its first failure."""
        retries = self._retries.get(wake.activation_id)
        if retries is None:
            retries = self._retries[wake.activation_id] = WakeRetries()
        return retries

    def got_through(self, wake: Wake) -> None:
        """A delivery of ``wake`` reached an outcome: its next transient failure waits
        the first pump delay again."""
        retries = self._retries.get(wake.activation_id)
        if retries is not None:
            retries.pump = _pump_delays()

    async def deliver(self, wake: Wake) -> Outcome:
        """Run ``wake``'s turn (or retire it) and say what becomes of it.

        Raises:
            Fenced: the wake's lease is no longer this node's (a shared store); the
                turn stopped and nothing more was recorded.
            Transient: retry later (the caller backs off with ``retries(wake).pump``).
            TaskplaneError: any other; the wake cannot proceed.
        Cancellation: the turn is cancelled; the wake stays offered (replayable).
        """
        if wake.accepted_source is not None and wake.activation_id not in self._delivered:
            # First delivery of a wake offered right after its COMMIT: nothing of the
            # activation is journaled yet, and owner(T) checks the Task at the grant.
            state, source = accepted_state(wake), wake.accepted_source
        else:
            loaded = await self.store.wake_state(wake.activation_id, wake.task_id)
            state, stored = loaded.activation, loaded.stored
            if stored is None or stored.task.status.state.is_terminal:
                if "WOKEN" not in state.kinds:
                    now = self.now_ms()
                    await self.store.append((woken_record(wake, now),), now, fence=wake.fence)
                return Done()
            source = stored.source
            retries = self._retries.get(wake.activation_id)
            if retries is not None and retries.provider_redeliver and state.deliveries > 0:
                # The provider failed the last delivery: this one repeats its number.
                state = attrs.evolve(state, deliveries=state.deliveries - 1)
            if state.deliveries >= MAX_WAKE_DELIVERIES:
                why = f"it was woken {MAX_WAKE_DELIVERIES} times without finishing"
                await self._give_up(wake, source, CAP_REASON, why)
                return Done()
        self._delivered.add(wake.activation_id)
        failure: Exception | None = None
        settled: Task | None = None
        # The turn's scope is open from the grant on: a cancel committed at any point
        # after it stops this turn (design rule "Cancel stops the running turn").
        with self.turns.running(wake.task_id) as scope:
            granted = await self.owners.grant_turn(wake, state)
            if granted is None or granted.status.state.is_interrupted:
                return Done()
            failure, settled = await self._run_turn(wake, source, state.deliveries + 1)
        if isinstance(failure, Fenced):
            # The turn's lease moved to another node (design rule "Turn authority is a
            # lease"): not a failed turn; nothing more may be recorded for it here.
            raise failure
        # A turn that left its Task terminal needs no fresh snapshot (terminal is final);
        # asking owner(T) would restart a retired owner and re-read the Task.
        after = settled or (await self.owners.snapshot(wake.task_id)).task
        canceled = scope.cancelled_caught or after.status.state.is_terminal
        if isinstance(failure, ProviderUnavailable) and not canceled:
            return await self._provider_unavailable(wake, source, failure, state.deliveries + 1)
        self._provider_back(wake)
        if isinstance(failure, TurnUnsettled) and not canceled:
            # The agent answered but would not settle: retrying repeats the answer.
            await self._give_up(
                wake,
                source,
                str(failure),
                str(failure),
                state.deliveries + 1,
                UNSETTLED_REASON,
                by_policy=True,
            )
            return Done()
        if failure is not None and not canceled:
            # (A turn whose Task was canceled under it is over, not failed.)
            return await self._turn_failed(wake, source, failure, state.deliveries + 1)
        if after.status.state.is_settled:
            await self.runtime.release(wake.task_id)
            return Done()
        return Again()  # unsettled: bounded by MAX_WAKE_DELIVERIES

    async def _run_turn(
        self, wake: Wake, source: str, delivery: int
    ) -> tuple[Exception | None, Task | None]:
        """Run the turn; return its failure (``None``: it ended normally) and the Task
        as its last tool call left it if that was terminal."""
        task_id = self.queue.grant(wake)
        log.info(
            "agent woken for task %s",
            task_id,
            extra={
                "event": "agent_woken",
                "taskId": task_id,
                "sessionId": session_id(task_id),
                "delivery": delivery,
            },
        )
        toolbox = TaskToolbox(
            task_id,
            self.owners,
            self.queue,
            self.outputs,
            can_continue=source == A2A_SOURCE or source in self.anchor_sources,
            channel=None
            if self.channels is None or source == A2A_SOURCE
            else self.channels.get(source),
            fence=wake.fence,
        )
        self.turns_started += 1
        timeout_ms = self.settings.turn_timeout_ms
        deadline = trio.CancelScope()
        if timeout_ms > 0:
            deadline.deadline = trio.current_time() + timeout_ms / 1000
        failure: Exception | None = None
        try:
            with deadline:
                await self.runtime.run_turn(task_id, wake_prompt(task_id), toolbox)
        except Exception as exc:
            failure = exc
        finally:
            self.queue.revoke(task_id)
            log.info(
                "turn ended for task %s",
                task_id,
                extra={"event": "agent_turn_ended", "taskId": task_id, "delivery": delivery},
            )
        if deadline.cancel_called:  # the deadline passed (however the runtime ended)
            self.timeouts += 1
            log.warning(
                "turn for task %s passed its %d ms deadline; cancelled",
                task_id,
                timeout_ms,
                extra={"event": "a2a_turn_timed_out", "taskId": task_id, "timeoutMs": timeout_ms},
            )
            return TurnTimedOut(f"the turn passed its {timeout_ms} ms deadline"), None
        return failure, toolbox.settled_terminal

    async def _turn_failed(
        self, wake: Wake, source: str, failure: Exception, delivery: int
    ) -> Outcome:
        self.turn_failures += 1
        retries = self.retries(wake)
        retries.failed_turns += 1
        attempts = retries.failed_turns
        log.warning(
            "turn for task %s failed (%d failed turns; delivery %d of %d): %s",
            wake.task_id,
            attempts,
            delivery,
            MAX_WAKE_DELIVERIES,
            clip(repr(failure), MAX_LOG_TEXT_CHARS),
            extra={
                "event": "a2a_wake_failed",
                "taskId": wake.task_id,
                "attempts": attempts,
                "delivery": delivery,
            },
            exc_info=failure,
        )
        if delivery >= MAX_WAKE_DELIVERIES:
            last = f"{type(failure).__name__}: {failure}"[:ERROR_CHARS]
            error = clip(f"{CAP_REASON}; the last turn failed: {failure!r}", MAX_LOG_TEXT_CHARS)
            await self._give_up(wake, source, error, f"its turn failed {delivery} times ({last})")
            return Done()
        error = clip(f"turn failed {attempts} times: {failure!r}", MAX_LOG_TEXT_CHARS)
        if attempts < MAX_TURN_ATTEMPTS:
            return Again(next(retries.turns))
        await self.runtime.release(wake.task_id)
        now = self.now_ms()
        await self.store.append((unhealthy_record(wake, source, error),), now, fence=wake.fence)
        delay_s = next(retries.pauses)
        log.error(
            "task %s paused after %d failed turns; trying again in %s s",
            wake.task_id,
            attempts,
            delay_s,
            extra={"event": "a2a_task_turn_paused", "taskId": wake.task_id, "retryInS": delay_s},
        )
        return Later(delay_s)

    @property
    def provider_waiting(self) -> int:
        """Wakes waiting now because their agent's provider is unavailable."""
        return sum(r.provider_since is not None for r in self._retries.values())

    async def _provider_unavailable(
        self, wake: Wake, source: str, failure: ProviderUnavailable, delivery: int
    ) -> Outcome:
        """Pause ``wake`` (design rule "Provider failures are not Task failures"): the
        next pause of its provider backoff, at least the provider's ``Retry-After``
        (both capped), or give up once the patience has run out."""
        self.provider_failures += 1
        retries = self.retries(wake)
        now = trio.current_time()
        if retries.provider_since is None or retries.provider is None:
            retries.provider_since = now
            retries.provider = backoff(
                PROVIDER_BACKOFF_BASE_S, self.settings.provider_backoff_cap_s
            )
        waited = now - retries.provider_since
        patience = self.settings.provider_patience_s
        if waited >= patience:
            why = f"{PROVIDER_REASON} for {round(waited)} s ({failure})"
            why = clip(why, MAX_LOG_TEXT_CHARS)
            retries.provider_since = None
            await self._give_up(wake, source, why, why, delivery, PROVIDER_REASON)
            return Done()
        delay_s = next(retries.provider)
        if failure.retry_after_s is not None:
            delay_s = max(delay_s, min(failure.retry_after_s, self.settings.provider_backoff_cap_s))
        delay_s = min(delay_s, patience - waited)  # the last try is at the patience's end
        retries.provider_redeliver = True
        log.warning(
            "agent provider unavailable for task %s (%s); trying again in %.3g s",
            wake.task_id,
            clip(str(failure), MAX_LOG_TEXT_CHARS),
            delay_s,
            extra={
                "event": "agent_provider_unavailable",
                "taskId": wake.task_id,
                "retryInS": delay_s,
                "waitedS": waited,
            },
        )
        return Later(delay_s)

    def _provider_back(self, wake: Wake) -> None:
        """A turn of ``wake`` got through to its provider: its provider state restarts."""
        retries = self._retries.get(wake.activation_id)
        if retries is not None and retries.provider_since is not None:
            log.info(
                "agent provider available again for task %s",
                wake.task_id,
                extra={"event": "agent_provider_available", "taskId": wake.task_id},
            )
        if retries is not None:
            retries.provider, retries.provider_since = None, None
            retries.provider_redeliver = False

    async def _give_up(
        self,
        wake: Wake,
        source: str,
        error: str,
        reason: str,
        attempts: int = MAX_WAKE_DELIVERIES,
        why: str = CAP_REASON,
        *,
        by_policy: bool = False,
    ) -> None:
        """``WAKE_FAILED`` (``why``: the delivery cap, or an unsettled turn) + evidence
        (``error``) + the Task FAILED with ``reason`` in its status message, in one
        commit through owner(T).

        The evidence is ``activation.unhealthy`` (counted by readiness; logged at
        error), or ``activation.unsettled`` when ``by_policy`` (the plain-text
        policy failed the Task: not ill-health; logged at warning)."""
        self.abandoned += 1
        now = self.now_ms()
        evidence = unsettled_record if by_policy else unhealthy_record
        records = (
            evidence(wake, source, clip(error, MAX_LOG_TEXT_CHARS)),
            wake_failed_record(wake, attempts, why, now),
        )
        await self.owners.fail_task(wake, reason, records)
        log.log(
            logging.WARNING if by_policy else logging.ERROR,
            "wake for task %s abandoned: %s",
            wake.task_id,
            clip(error, MAX_LOG_TEXT_CHARS),
            extra={"event": "a2a_wake_abandoned", "taskId": wake.task_id},
        )
        await self.runtime.release(wake.task_id)
