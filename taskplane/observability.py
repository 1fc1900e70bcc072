"""Feeding health and metrics from the running plane, without reaching into it.

* :func:`read_statistics`: the ONE adapter that reads the actors' and the store's
  ``statistics()`` records into a :class:`~taskplane.http.metrics.PlaneStatistics`
  (when a record gains a figure, only this function changes).
* :class:`Liveness`: which supervised actors are running right now.
* :class:`MeasuredRuntime`: wraps the agent runtime to time turns, count failures,
  and hold back new turns during shutdown (rule: "Shutdown gives the running turn a
  deadline; what it does not finish is replayed").
* :func:`count_restarts`: supervision crash reports -> the restarts counter.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import Any

import attrs
import trio

from taskplane.actors.plane import TaskPlane
from taskplane.bridge.runtime import AgentRuntime
from taskplane.bridge.tool_api import TaskTools
from taskplane.bridge.triage import DirectReplies
from taskplane.cluster.counters import ClusterCounters
from taskplane.http.metrics import Metrics, PlaneStatistics
from taskplane.model.types import Message, Part
from taskplane.supervision import CrashReport

log = logging.getLogger("taskplane")

STATISTICS_DEADLINE_S = 2.0
"""Longest a ``/readyz`` or ``/metrics`` reading waits for the store, in seconds."""
REQUIRED_ACTORS = ("store", "intake", "wake")


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


def _no_records_dropped() -> int:
    return 0


class Liveness:
    """Names of the supervised actors whose current incarnation is running."""

    def __init__(self) -> None:
        self.running: set[str] = set()

    def track(self, name: str, start: Callable[..., Awaitable[None]]) -> Callable[..., Any]:
        """``start`` wrapped so ``name`` counts as running from ``started()`` to exit."""
        running = self.running

        async def tracked(*, task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED) -> None:
            try:
                await start(task_status=_Reporting(name, running, task_status))
            finally:
                running.discard(name)

        return tracked


class _Reporting:
    """A ``task_status`` that marks ``name`` running when ``started()`` is called."""

    def __init__(self, name: str, running: set[str], inner: trio.TaskStatus[Any]) -> None:
        self.name = name
        self.running = running
        self.inner = inner

    def started(self, value: Any = None) -> None:
        self.running.add(self.name)
        self.inner.started(value)


async def read_statistics(
    plane: TaskPlane,
    liveness: Liveness,
    runtime: MeasuredRuntime,
    since_ms: int,
    stopped_sources: Collection[str] = (),
    log_records_dropped: int = 0,
    cluster: ClusterCounters | None = None,
) -> PlaneStatistics:
    """A reading of ``plane`` (the store part bounded by :data:`STATISTICS_DEADLINE_S`).

    Unhealthy evidence counts only when it is newer than the last recovery (rule
    "Readiness counts unhealthy evidence since the last recovery"): the later of
    ``since_ms`` and the end of the runtime's most recent successful turn. While the
    store's writes fail, the reading first tries one small commit (rule "Readiness
    tells the truth"), so it reports the store failing exactly until a commit succeeds.

    Args:
        since_ms: this process's start, ms since the epoch.
        stopped_sources: native sources their supervisor gave up on.
        log_records_dropped: the process's log writer's dropped records so far.
        cluster: this node's cluster event counts (all 0 when omitted: SQLite).
    """
    since_ms = max(since_ms, runtime.last_success_ms)
    wake = plane.wake.statistics()
    admission = plane.admission.statistics()
    owners = plane.registry.statistics()
    counts = None
    with trio.move_on_after(STATISTICS_DEADLINE_S):
        try:
            if plane.store.statistics().commit_failure is not None:
                await _probe(plane)
            counts = await plane.store.counts(since_ms)
        except Exception:
            log.debug("statistics read failed", exc_info=True, extra={"event": "stats_failed"})
    store = plane.store.statistics()
    cluster = cluster if cluster is not None else ClusterCounters()
    return PlaneStatistics(
        store_open=counts is not None,
        store_commit_failure=store.commit_failure,
        actors_running=all(name in liveness.running for name in REQUIRED_ACTORS),
        tasks_by_state=counts.tasks_by_state if counts else {},
        deliveries_by_state=counts.deliveries_by_state if counts else {},
        wake_queue_depth=admission.waiting,
        wake_queue_reserved=admission.reserved,
        wake_queue_limit=admission.limit,
        turn_running=wake.running_turns > 0 or runtime.running > 0,
        turns_running=max(wake.running_turns, runtime.running),
        owners_live=owners.owners,
        unhealthy_since_recovery=counts.unhealthy_after_ms if counts else 0,
        store_transactions=store.transactions,
        store_operations=store.operations,
        stopped_sources=tuple(sorted(stopped_sources)),
        agent_provider_unavailable=wake.provider_unavailable,
        log_records_dropped=log_records_dropped,
        turn_leases_lost=cluster.turn_leases_lost,
        turns_self_fenced=cluster.turns_self_fenced,
        fenced_writes=cluster.fenced_writes,
        wakes_reclaimed=cluster.wakes_reclaimed,
        wakes_claimed_at_acceptance=cluster.wakes_claimed_at_acceptance,
        heartbeat_failures=cluster.heartbeat_failures,
        leader_terms=cluster.leader_terms,
    )


async def _probe(plane: TaskPlane) -> None:
    """While writes fail, each reading tries one small commit: readiness comes back
    as soon as one succeeds, even when no client writes (design rule "Readiness
    tells the truth")."""
    try:
        await plane.store.probe_commit(plane.now_ms())
    except Exception:  # still failing (StoreUnavailable): statistics() says why
        log.debug("write probe failed", exc_info=True, extra={"event": "store_probe_failed"})


@attrs.define(eq=False)
class PlaneObserver:
    """Everything health and metrics need from one running plane.

    Attributes:
        metrics: the server's instruments (one registry).
        liveness: which supervised actors run.
        runtime: the measured agent runtime (set by :meth:`wrap_runtime`).
        recovered_at_ms: when this process started the plane, ms since the epoch
            (the first recovery; each successful turn is a later one).
        stopped_sources: native sources their supervisor gave up on (not ready).
        log_records_dropped: reads the process's log writer's dropped records
            (:meth:`taskplane.logging_setup.LogWriter.statistics`; none by default).
        cluster: this node's cluster event counts, written by the cluster actors
            (heartbeat, leaders, the shared wake queue); all 0 on a SQLite store.
    """

    metrics: Metrics = attrs.Factory(Metrics)
    liveness: Liveness = attrs.Factory(Liveness)
    runtime: MeasuredRuntime | None = None
    recovered_at_ms: int = 0
    stopped_sources: set[str] = attrs.Factory(set)
    log_records_dropped: Callable[[], int] = _no_records_dropped
    cluster: ClusterCounters = attrs.Factory(ClusterCounters)

    def wrap_runtime(
        self, inner: AgentRuntime, now_ms: Callable[[], int] | None = None
    ) -> MeasuredRuntime:
        """Measure ``inner`` (turn ends stamped with ``now_ms``, the plane's clock in
        ms since the epoch; wall clock when omitted); remembered for readings and
        shutdown."""
        self.runtime = MeasuredRuntime(inner, self.metrics, now_ms or _wall_ms)
        return self.runtime

    def source_stopped(self, name: str) -> None:
        """A source's supervisor gave up on it: ``/readyz`` says so from now on."""
        self.stopped_sources.add(name)

    def on_batch(self, ops: int, seconds: float) -> None:
        """Store hook: one transaction took ``seconds``."""
        del ops
        self.metrics.commit_seconds.observe(seconds)

    async def statistics(self, plane: TaskPlane) -> PlaneStatistics:
        """:func:`read_statistics` for ``plane``."""
        assert self.runtime is not None
        return await read_statistics(
            plane,
            self.liveness,
            self.runtime,
            self.recovered_at_ms,
            self.stopped_sources,
            self.log_records_dropped(),
            self.cluster,
        )


class MeasuredRuntime:
    """An :class:`~taskplane.bridge.runtime.AgentRuntime` that measures ``inner``.

    Each turn is timed into ``taskplane_turn_duration_seconds``; a turn that raises
    counts in ``taskplane_turn_failures``; a turn that returns stamps
    ``last_success_ms`` (``now_ms()``, ms since the epoch): the last recovery
    readiness measures unhealthy evidence from. After :meth:`drain` starts, no new
    turn begins (it waits until cancelled, so its wake stays replayable).
    """

    def __init__(
        self, inner: AgentRuntime, metrics: Metrics, now_ms: Callable[[], int] | None = None
    ) -> None:
        self.inner = inner
        self.metrics = metrics
        self.now_ms = now_ms or _wall_ms
        self.last_success_ms = 0
        self.running = 0
        self._draining = False
        self._idle = trio.Event()
        self._idle.set()

    def triage(self, message: Message) -> Sequence[Part] | None:
        return self.inner.triage(message)

    async def reply_directly(self, message: Message) -> Sequence[Part] | None:
        """The inner runtime's asynchronous triage (``None`` if it has none)."""
        if isinstance(self.inner, DirectReplies):
            return await self.inner.reply_directly(message)
        return None

    async def run_turn(self, task_id: str, prompt: str, tools: TaskTools) -> None:
        if self._draining:
            await trio.sleep_forever()  # shutdown: left for replay at the next start
        self.running += 1
        self._idle = trio.Event() if self.running == 1 else self._idle
        started = time.perf_counter()
        try:
            await self.inner.run_turn(task_id, prompt, tools)
        except Exception:
            self.metrics.turn_failures.inc()
            raise
        else:
            self.last_success_ms = max(self.last_success_ms, self.now_ms())
        finally:
            self.metrics.turn_seconds.observe(time.perf_counter() - started)
            self.running -= 1
            if self.running == 0:
                self._idle.set()

    async def release(self, task_id: str) -> None:
        await self.inner.release(task_id)

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def drain(self, deadline_s: float) -> bool:
        """Start no new turn; wait up to ``deadline_s`` for the running one to end.

        Returns ``True`` if no turn was running at the end.
        """
        self._draining = True
        with trio.move_on_after(deadline_s if deadline_s > 0 else math.inf):
            await self._idle.wait()
        return self.running == 0


async def count_restarts(reports: trio.MemoryReceiveChannel[CrashReport], metrics: Metrics) -> None:
    """Count each supervision crash report per actor until the channel closes."""
    async with reports:
        async for report in reports:
            metrics.restarts.labels(report.child).inc()
