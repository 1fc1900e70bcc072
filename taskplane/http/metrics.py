"""Prometheus metrics and readiness for one server (``GET /metrics``, ``GET /readyz``).

Every instrument lives in this object's own :class:`CollectorRegistry` (never the
process-global one): two servers in one process never mix figures (rule: "No global
mutable state"). Counters and histograms are updated where things happen (requests,
sends, turns, commits, restarts); figures read from the plane (Tasks by state, wake
queue depth, ...) arrive as a :class:`PlaneStatistics` reading taken at scrape time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import attrs
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

METRICS_MEDIA_TYPE = CONTENT_TYPE_LATEST
_LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
_TURN_BUCKETS_S = (0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0)


@attrs.frozen
class PlaneStatistics:
    """A reading of the running plane.

    Attributes:
        store_open: a store round trip answered.
        store_commit_failure: why writes cannot be made durable now (disk full, I/O
            error), until a commit succeeds again; ``None`` while they commit.
        actors_running: the store, intake and wake actors are all running.
        tasks_by_state: Task count per ``TASK_STATE_*`` name.
        deliveries_by_state: outbound delivery count per state.
        wake_queue_depth: wakes waiting behind the offered one, reserved slots included.
        wake_queue_reserved: slots held by acceptances still committing.
        wake_queue_limit: the bound on waiting wakes.
        turn_running: an agent turn is running now (a 0/1 flag).
        turns_running: agent turns running now on this node (up to
            ``A2A_AGENT_CONCURRENCY``).
        owners_live: owner actors alive (one per Task with recent activity).
        unhealthy_since_recovery: unhealthy evidence recorded since the last
            recovery (the most recent successful agent turn, or this process's start).
        store_transactions, store_operations: store transactions and operations
            since the store was opened.
        stopped_sources: native sources their supervisor gave up on.
        agent_provider_unavailable: Tasks waiting because the agent's model provider
            (or program) is unavailable; they resume by themselves.
        log_records_dropped: log records dropped since the process started, because
            the log writer's queue was full (the process's log stream, shared by
            every server in it).
        turn_leases_lost, turns_self_fenced, fenced_writes, wakes_reclaimed,
            wakes_claimed_at_acceptance, heartbeat_failures, leader_terms: this node's
            cluster events since it started (PostgreSQL; 0 on SQLite; see
            :class:`taskplane.cluster.counters.ClusterCounters`).
    """

    store_open: bool = False
    store_commit_failure: str | None = None
    actors_running: bool = False
    tasks_by_state: Mapping[str, int] = attrs.field(factory=dict)
    deliveries_by_state: Mapping[str, int] = attrs.field(factory=dict)
    wake_queue_depth: int = 0
    wake_queue_reserved: int = 0
    wake_queue_limit: int = 0
    turn_running: bool = False
    owners_live: int = 0
    unhealthy_since_recovery: int = 0
    store_transactions: int = 0
    store_operations: int = 0
    stopped_sources: tuple[str, ...] = ()
    agent_provider_unavailable: int = 0
    log_records_dropped: int = 0
    turns_running: int = 0
    turn_leases_lost: int = 0
    turns_self_fenced: int = 0
    fenced_writes: int = 0
    wakes_reclaimed: int = 0
    wakes_claimed_at_acceptance: int = 0
    heartbeat_failures: int = 0
    leader_terms: int = 0

    @property
    def overloaded(self) -> bool:
        """New work would be refused with 503 (every wake slot is taken)."""
        # wake_queue_depth already counts reserved slots (WakeStatistics.waiting).
        return self.wake_queue_limit > 0 and self.wake_queue_depth >= self.wake_queue_limit

    def not_ready_reasons(self) -> list[str]:
        """Why ``/readyz`` answers 503; empty when ready."""
        reasons = []
        if not self.store_open:
            reasons.append("the task store does not answer")
        if self.store_commit_failure is not None:
            reasons.append(
                f"the task store cannot commit ({self.store_commit_failure}); every write "
                "is refused with 503 until a commit succeeds again"
            )
        if not self.actors_running:
            reasons.append("an actor (store, intake or wake) is not running")
        if self.overloaded:
            reasons.append("the wake queue is full; new work is refused with 503")
        if self.unhealthy_since_recovery:
            reasons.append(
                f"{self.unhealthy_since_recovery} unhealthy evidence record(s) since the "
                "last recovery (a successful agent turn, or the start); see the log"
            )
        if self.agent_provider_unavailable:
            reasons.append(
                f"agent provider unavailable: {self.agent_provider_unavailable} task(s) "
                "wait for it and resume by themselves"
            )
        reasons.extend(
            f"source {name} stopped after repeated failures" for name in self.stopped_sources
        )
        return reasons


_BY_STATE: tuple[tuple[str, str, Callable[[PlaneStatistics], Mapping[str, int]]], ...] = (
    ("taskplane_tasks", "Stored Tasks by state", lambda s: s.tasks_by_state),
    ("taskplane_deliveries", "Outbound deliveries by state", lambda s: s.deliveries_by_state),
)
"""Gauges labelled ``state``, read from the plane at scrape time: name, help, reading."""

_READINGS: tuple[tuple[str, str, Callable[[PlaneStatistics], int]], ...] = (
    (
        "taskplane_wake_queue_depth",
        "Wakes waiting behind the running turn",
        lambda s: s.wake_queue_depth,
    ),
    (
        "taskplane_wake_queue_reserved",
        "Wake slots held by acceptances still committing",
        lambda s: s.wake_queue_reserved,
    ),
    ("taskplane_wake_queue_limit", "Most wakes that may wait", lambda s: s.wake_queue_limit),
    ("taskplane_turn_running", "1 while an agent turn runs", lambda s: int(s.turn_running)),
    ("taskplane_turns_running", "Agent turns running now", lambda s: s.turns_running),
    ("taskplane_task_owners", "Owner actors alive", lambda s: s.owners_live),
    (
        "taskplane_agent_provider_unavailable",
        "Tasks waiting because the agent provider is unavailable",
        lambda s: s.agent_provider_unavailable,
    ),
    ("taskplane_ready", "1 when /readyz answers 200", lambda s: int(not s.not_ready_reasons())),
    (
        "taskplane_store_commit_failing",
        "1 while store writes fail to commit (disk full, I/O error), until one commits",
        lambda s: int(s.store_commit_failure is not None),
    ),
    (
        "taskplane_store_transactions",
        "Store transactions since the store was opened (group commit: many ops each)",
        lambda s: s.store_transactions,
    ),
    (
        "taskplane_store_operations",
        "Store operations since the store was opened",
        lambda s: s.store_operations,
    ),
)
"""Single-value gauges read from the plane at scrape time: name, help, reading."""

_COUNTS: tuple[tuple[str, str, Callable[[PlaneStatistics], int]], ...] = (
    (
        "taskplane_turn_leases_lost",
        "Turns stopped because their wake's lease was no longer this node's",
        lambda s: s.turn_leases_lost,
    ),
    (
        "taskplane_turns_self_fenced",
        "Turns this node stopped because their lease went unrenewed too long",
        lambda s: s.turns_self_fenced,
    ),
    (
        "taskplane_fenced_writes",
        "Turn writes refused because their lease was no longer current",
        lambda s: s.fenced_writes,
    ),
    (
        "taskplane_wakes_reclaimed",
        "Claims of a wake claimed before (epoch above 1)",
        lambda s: s.wakes_reclaimed,
    ),
    (
        "taskplane_wakes_claimed_at_acceptance",
        "Wakes whose acceptance claimed their turn for this node",
        lambda s: s.wakes_claimed_at_acceptance,
    ),
    (
        "taskplane_heartbeat_failures",
        "Node heartbeats that could not reach the database",
        lambda s: s.heartbeat_failures,
    ),
    ("taskplane_leader_terms", "Leader terms this node started", lambda s: s.leader_terms),
)
"""Counters read from the plane at scrape time (``<name>_total``): name, help, reading."""


class _ReadCounter(Collector):
    """A counter whose value is read from the plane at scrape time (``<name>_total``)."""

    def __init__(self, name: str, doc: str, registry: CollectorRegistry) -> None:
        self.name = name
        self.doc = doc
        self.value = 0
        registry.register(self)

    def describe(self) -> Iterable[CounterMetricFamily]:
        return [CounterMetricFamily(self.name, self.doc)]

    def collect(self) -> Iterable[CounterMetricFamily]:
        return [CounterMetricFamily(self.name, self.doc, value=self.value)]


class Metrics:
    """The instruments of one server, in their own registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "taskplane_http_requests",
            "HTTP requests answered, by route template, method and status code",
            ["route", "method", "status"],
            registry=r,
        )
        self.request_seconds = Histogram(
            "taskplane_http_request_duration_seconds",
            "Time to answer a request (to the response head for streams), by route",
            ["route"],
            buckets=_LATENCY_BUCKETS_S,
            registry=r,
        )
        self.sends = Counter(
            "taskplane_sends",
            "Accepted sends by outcome: created, continued, duplicate, or message",
            ["disposition"],
            registry=r,
        )
        self.conflicts = Counter(
            "taskplane_http_conflicts", "Requests answered 409 (Task state conflicts)", registry=r
        )
        self.unknown_fields = Counter(
            "taskplane_unknown_fields",
            "Request fields and query parameters ignored as unknown (A2A §5.7), by request",
            ["request"],
            registry=r,
        )
        self.sse_subscribers = Gauge(
            "taskplane_sse_subscribers", "Open SSE streams (stream and subscribe)", registry=r
        )
        self.turn_seconds = Histogram(
            "taskplane_turn_duration_seconds",
            "Agent turn durations, failed turns included",
            buckets=_TURN_BUCKETS_S,
            registry=r,
        )
        self.turn_failures = Counter(
            "taskplane_turn_failures", "Agent turns that raised", registry=r
        )
        self.commit_seconds = Histogram(
            "taskplane_store_commit_duration_seconds",
            "Store transaction latency (one batch of operations, commit included)",
            buckets=_LATENCY_BUCKETS_S,
            registry=r,
        )
        self.restarts = Counter(
            "taskplane_supervisor_restarts",
            "Actor crashes handled by a supervisor, by actor",
            ["actor"],
            registry=r,
        )
        self._by_state = [
            (Gauge(name, doc, ["state"], registry=r), read) for name, doc, read in _BY_STATE
        ]
        self._readings = [(Gauge(name, doc, registry=r), read) for name, doc, read in _READINGS]
        self._counts = [(_ReadCounter(name, doc, r), read) for name, doc, read in _COUNTS]
        self._log_records_dropped = _ReadCounter(
            "taskplane_log_records_dropped",
            "Log records dropped because the log writer's queue was full",
            r,
        )

    def render(self, stats: PlaneStatistics) -> bytes:
        """The Prometheus text exposition, with ``stats`` as the current readings."""
        for gauge, read_counts in self._by_state:
            gauge.clear()
            for state, count in read_counts(stats).items():
                gauge.labels(state).set(count)
        for gauge, read in self._readings:
            gauge.set(read(stats))
        self._log_records_dropped.value = stats.log_records_dropped
        for counter, read in self._counts:
            counter.value = read(stats)
        return generate_latest(self.registry)
