"""The multi-node drill: load, faults and checks on N ``taskplane serve`` nodes that
share one PostgreSQL database.

Used by ``tests/drills/test_cluster_drill.py`` (short, in CI) and
``bench/cluster_drill.py`` (long, by hand). The nodes are
:class:`tests.support.cluster_nodes.NodeCluster`'s; the nodes are black boxes reached
over HTTP, plus read-only queries of their database and their JSON logs.

**Load** (``clients`` concurrent flows, every random choice from one seed):

- *sends*: a new ``messageId`` each (``sleep: <ms>`` for the scripted agent), to a
  random node, non-blocking or blocking, a few as ``message:stream``. A transport
  error or a 5xx is an *unknown outcome*: the send is sent again (same messageId and
  payload) to another node, until it is acknowledged (bounded; after the load every
  unknown one is resolved that way).
- *re-sends*: about ``p_resend`` of the acknowledged sends are sent again to another
  node, some of them at the same moment as the first copy (two nodes at once).
- *continuations*: ``ask:`` Tasks (``INPUT_REQUIRED``), read on another node until
  they wait, then answered (a new messageId with the ``taskId``) on another node.
- *cancels*: long ``sleep:`` Tasks cancelled on a node other than the acceptor.
- *subscribers*: ``GET /tasks/{id}:subscribe`` on a node other than the acceptor,
  read to their end.

Every operation's invoke and outcome (ok / fail / unknown) is kept in
:attr:`Drill.ops` and written to ``ops.jsonl`` in the work directory; the report
(summary, violations, notes such as the fenced windows) to ``report.txt``.

**Faults** (while the load runs, one at a time): every ``kill_every_s`` a random
node SIGKILLed and restarted; once a node SIGSTOPped for ``pause_s`` (longer than
its lease) and resumed; once PostgreSQL stopped immediately and started again. The
load lasts ``load_s`` and then until the pause, the database restart and
``min_kills`` kills have all been done.

**Checks** after the load (every node up again, unknown sends resolved, a bounded
settle), each a :class:`Violation` when it fails:

1. every acknowledged send is held by exactly the Task its answer named, and every
   answer for one messageId named the same Task (database: ``tasks.task_json``);
2. no messageId is in the history of two Tasks, nor twice in one; no Task holds a
   messageId nobody sent, or one artifact twice;
3. every Task settles (terminal) within ``settle_s``, in the state its flow implies
   (a ``sleep:`` completed, an acknowledged cancel canceled, an answered question
   completed with the answer); ``FAILED`` only at the delivery cap;
4. no two turns of one Task overlapped: turn start (``agent_woken``) and end
   (``agent_turn_ended``) per Task from every node's log; a killed life's open turn
   ends at its kill. A turn that was running on a node while it was SIGSTOPped past
   its lease may overlap its successor after the resume (a frozen process cannot
   stop itself): that overlap is counted as a *fenced window*, not a violation, and
   reported with the stale turn's node, Task and time after the resume; but that
   node must log that it lost or gave up the turn's lease (or a ``Fenced`` write)
   for the Task;
5. no node logged more turns of a Task than the journal holds deliveries of it;
6. at most 5 deliveries per activation (``WAKE_DELIVERED`` in the journal), no
   delivery number recorded twice;
7. every node answers ``GET /tasks/{id}`` the same for every Task, and as the
   database holds it;
8. every subscriber stream ended with a terminal frame (in the Task's final state,
   at most ``LIVE_LATE_S`` after that status when nothing failed meanwhile) or the
   documented ``503 UNAVAILABLE`` error frame, or was cut by a fault of its node;
   never closed early, never stalled;
9. an acknowledged cancel (sent to a node other than the acceptor) stopped the
   Task's running turn within ``CANCEL_STOP_S``, wherever it ran, and no turn of
   that Task started after it.

Fenced writes are counted (log lines and evidence rows that say ``fenc...``) and
reported, as are the faults, sends, re-sends, continuations and cancels
(:meth:`DrillReport.summary`).
"""

from __future__ import annotations

import contextlib
import gc
import json
import random
import re
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import psycopg
import trio

from tests.e2e.taskplane_proc import Spawner
from tests.support.cluster_nodes import Node, NodeCluster, NodeStartFailed
from tests.support.pg import Cluster

TERMINAL = frozenset(
    {"TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED", "TASK_STATE_REJECTED"}
)
INTERRUPTED = frozenset({"TASK_STATE_INPUT_REQUIRED", "TASK_STATE_AUTH_REQUIRED"})
MAX_DELIVERIES = 5
REQUEST_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_S = 2.0
STREAM_READ_TIMEOUT_S = 25.0
"""Longest silence of a live stream before it counts as stalled (the server sends a
keep-alive comment after 15 s without an event)."""
BLOCKING_TIMEOUT_MS = 4000
SEND_ATTEMPTS = 12
"""Tries of one send during the load (other nodes after an unknown outcome)."""
WAIT_INPUT_S = 30.0
"""How long a continuation flow waits for its Task to ask (read on other nodes)."""
RESOLVE_S = 60.0
CHECK_CONCURRENCY = 8
UNAVAILABLE = 503
LIVE_LATE_S = 5.0
"""Longest time from a Task's terminal status to a subscriber's terminal frame on a
node and database that had no fault meanwhile."""
CANCEL_STOP_S = 2.0
"""Longest time a turn may run on after a 200 answer to its Task's cancel (sent to
another node)."""
SLACK_S = 1.0
"""Tolerance between a client's clock readings and the nodes' log stamps (the same
machine clock, but read at different points of a request)."""
FENCED = re.compile(r"\bFenced\b")
STALE_STOP_EVENTS = frozenset({"a2a_wake_self_fenced", "a2a_wake_lease_lost"})
"""The log events by which a node says it stopped a turn whose lease it lost or gave
up (``taskplane.cluster.wake``)."""
CLUSTER_EVENTS = re.compile(r"lease|fenc|reclaim|doorbell|claims_tail|conflict", re.IGNORECASE)
"""Log events of the cluster machinery, counted by name for the summary."""
"""The error type of a write under a lease that moved (``taskplane.errors.Fenced``), as
a log line's message or exception names it (a traceback's ``fence=`` arguments do not)."""


# --------------------------------------------------------------------------- records


@dataclass
class DrillConfig:
    """Knobs of one drill; durations in seconds."""

    nodes: int = 3
    load_s: float = 45.0
    seed: int = 0
    clients: int = 6
    lease_ttl_s: float = 2.0
    concurrency: int = 4
    kill_every_s: tuple[float, float] = (3.0, 6.0)
    min_kills: int = 0
    """Kills the drill makes at least: the load goes on past ``load_s`` until it has
    made them, the pause and the database restart (each fault is done, never left to
    the timing)."""
    pause_s: float | None = None
    """How long the paused node stays stopped (default: 2 leases + 1.5 s)."""
    pause_at: float = 0.3
    """When the pause starts, as a fraction of the load."""
    db_restart_at: float = 0.6
    db_down_s: float = 1.0
    sleep_ms: tuple[int, int] = (50, 400)
    p_resend: float = 0.1
    p_same_moment: float = 0.4
    """Of the re-sends: the share sent at the same moment as the first copy."""
    p_ask: float = 0.15
    p_cancel: float = 0.1
    p_subscribe: float = 0.15
    p_stream: float = 0.05
    p_blocking: float = 0.15
    settle_s: float = 60.0
    budget_s: float = 600.0
    progress: Any = None
    """Called with one line per fault (the script's ``--verbose``), or ``None``."""

    @property
    def pause_length_s(self) -> float:
        return self.pause_s if self.pause_s is not None else 2 * self.lease_ttl_s + 1.5


@dataclass
class Op:
    """One operation: what was invoked where, when, and how it ended."""

    kind: str
    node: int
    invoked_at: float
    message_id: str | None = None
    task_id: str | None = None
    ended_at: float | None = None
    outcome: str = "pending"  # ok | fail | unknown
    status: int | None = None
    detail: str = ""


@dataclass
class Sent:
    """One messageId: its payload, the Task its answers named, its flow."""

    message_id: str
    text: str
    flow: str  # plain | ask | answer | cancel
    task_id: str | None = None
    """The Task of the first 2xx answer."""
    continues: str | None = None
    """For an answer: the Task it continues."""
    acceptor: int | None = None
    answers: list[tuple[int, str]] = field(default_factory=list)
    unknown: int = 0
    refused: bool = False
    """Answered with a 4xx (a violation): not sent again."""


@dataclass
class Stream:
    """One subscriber (``:subscribe``) or streaming send (``message:stream``)."""

    kind: str
    node: int
    task_id: str | None
    opened_at: float
    ended_at: float | None = None
    end: str = "open"  # terminal | error:<code> | refused:<code> | cut | closed | stalled
    last_state: str | None = None
    frames: int = 0
    detail: str = ""
    final: str | None = None
    """``terminal`` or ``error:<code>`` once the last frame arrived."""
    final_at: float | None = None
    """When the last frame (terminal or error) arrived (wall clock)."""
    after_end: int = 0
    """Frames that arrived after the last frame."""


@dataclass
class Violation:
    kind: str
    detail: str


@dataclass
class Turn:
    node: str
    incarnation: int
    task_id: str
    delivery: int | None
    start: float
    end: float | None
    end_kind: str  # logged | killed | open
    stale_from: float | None = None
    """SIGSTOP time, if the node was stopped while this turn ran."""
    resumed_at: float | None = None


@dataclass
class DrillReport:
    config: DrillConfig
    workdir: Path
    sends: int = 0
    acknowledged: int = 0
    unknown_outcomes: int = 0
    refused_503: int = 0
    resends: int = 0
    same_moment_resends: int = 0
    continuations: int = 0
    cancels: int = 0
    cancels_acked: int = 0
    subscribers: int = 0
    streams_by_end: Counter[str] = field(default_factory=Counter)
    kills: int = 0
    restarts: int = 0
    pauses: int = 0
    db_restarts: int = 0
    tasks_checked: int = 0
    gets: int = 0
    unplanned_exits: int = 0
    turns_seen: int = 0
    deliveries: int = 0
    max_deliveries: int = 0
    fenced_windows: int = 0
    max_live_lag_s: float = 0.0
    fenced_log_lines: Counter[str] = field(default_factory=Counter)
    fenced_evidence: int = 0
    cluster_events: Counter[str] = field(default_factory=Counter)
    failed_at_cap: int = 0
    elapsed_s: float = 0.0
    violations: list[Violation] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations

    def summary(self) -> str:
        fenced = sum(self.fenced_log_lines.values())
        ends = ", ".join(f"{k} {v}" for k, v in sorted(self.streams_by_end.items())) or "none"
        return (
            f"cluster drill seed={self.config.seed} nodes={self.config.nodes} "
            f"load={self.config.load_s:.0f}s clients={self.config.clients} "
            f"ttl={self.config.lease_ttl_s:g}s: sends={self.sends} "
            f"(acknowledged {self.acknowledged}, unknown outcomes {self.unknown_outcomes}, "
            f"503 refusals {self.refused_503}), re-sends={self.resends} "
            f"(same moment {self.same_moment_resends}), continuations={self.continuations}, "
            f"cancels={self.cancels} (acknowledged {self.cancels_acked}), "
            f"streams={self.subscribers} ({ends}), kills={self.kills}, "
            f"restarts={self.restarts}, pauses={self.pauses}, db restarts={self.db_restarts}, "
            f"unplanned exits={self.unplanned_exits}, "
            f"Tasks checked={self.tasks_checked} (GETs {self.gets}), "
            f"turns seen={self.turns_seen}, deliveries={self.deliveries} "
            f"(max per activation {self.max_deliveries}), fenced writes={fenced} "
            f"log lines {dict(self.fenced_log_lines)} + {self.fenced_evidence} evidence rows, "
            f"fenced windows={self.fenced_windows}, failed at the cap={self.failed_at_cap}, "
            f"slowest terminal frame {self.max_live_lag_s:.2f}s after its status, "
            f"cluster log events {dict(self.cluster_events)}, "
            f"violations={len(self.violations)}, elapsed={self.elapsed_s:.1f}s"
        )

    def failure_text(self) -> str:
        lines = [
            f"CLUSTER DRILL FOUND {len(self.violations)} VIOLATION(S) -- seed {self.config.seed}"
            if self.violations
            else f"cluster drill passed -- seed {self.config.seed}",
            f"work directory (node logs, ops.jsonl): {self.workdir}",
            self.summary(),
        ]
        by_kind: dict[str, list[Violation]] = defaultdict(list)
        for v in self.violations:
            by_kind[v.kind].append(v)
        for kind, found in by_kind.items():
            lines.append(f"* {kind} ({len(found)}):")
            lines.extend(f"  - {v.detail}" for v in found[:6])
            if len(found) > 6:
                lines.append(f"  - ... and {len(found) - 6} more")
        lines.extend(f"note: {n}" for n in self.notes[:40])
        return "\n".join(lines)


# --------------------------------------------------------------------------- the drill


def _ts(value: object) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value).timestamp()
    except ValueError:
        return None


def _state(frame: dict[str, Any]) -> str | None:
    if "task" in frame:
        return str(frame["task"].get("status", {}).get("state"))
    if "statusUpdate" in frame:
        return str(frame["statusUpdate"].get("status", {}).get("state"))
    return None


class Drill:
    """State of one drill run; see the module docstring."""

    def __init__(self, config: DrillConfig, cluster: NodeCluster, workdir: Path) -> None:
        self.config, self.cluster, self.workdir = config, cluster, workdir
        self.report = DrillReport(config, workdir)
        self.sent: dict[str, Sent] = {}
        self.ops: list[Op] = []
        self.streams: list[Stream] = []
        self.cancel_acked: set[str] = set()
        self.cancel_tried: set[str] = set()
        self.cancel_acked_at: dict[str, float] = {}
        self.expect_final: dict[str, str] = {}
        """Task id -> the terminal state a blocking send answered (terminal is final)."""
        self.load_over = False
        self.t0 = time.monotonic()
        self._count = 0
        self.clients: list[httpx.AsyncClient] = []

    # ---- bookkeeping

    def violation(self, kind: str, detail: str) -> None:
        self.report.violations.append(Violation(kind, detail))

    def progress(self, line: str) -> None:
        if self.config.progress is not None:
            self.config.progress(f"t+{time.monotonic() - self.t0:7.2f}s {line}")

    def op(self, kind: str, node: int, **fields: Any) -> Op:
        entry = Op(kind, node, time.time(), **fields)
        self.ops.append(entry)
        return entry

    def new_id(self, client: int) -> str:
        self._count += 1
        return f"drill-{self.config.seed}-c{client}-{self._count}"

    def other(self, rng: random.Random, than: int | None) -> int:
        """A random node index, not ``than`` when there is another."""
        choices = [i for i in range(len(self.cluster.nodes)) if i != than]
        return rng.choice(choices or [0])

    def http(self, node: int) -> httpx.AsyncClient:
        return self.clients[node]

    # ---- sends

    async def post_send(
        self,
        node: int,
        sent: Sent,
        why: str,
        *,
        blocking: bool = False,
    ) -> str | None:
        """One ``POST /message:send`` of ``sent`` to ``node``; books the answer; the
        Task id of a 2xx answer (``None``: unknown outcome or refused)."""
        message: dict[str, Any] = {
            "messageId": sent.message_id,
            "role": "ROLE_USER",
            "parts": [{"text": sent.text}],
        }
        if sent.continues is not None:
            message["taskId"] = sent.continues
        body = {"message": message, "configuration": {"returnImmediately": not blocking}}
        entry = self.op(why, node, message_id=sent.message_id)
        try:
            response = await self.http(node).post("/message:send", json=body)
        except httpx.TransportError as exc:
            return self._unknown(entry, sent, type(exc).__name__)
        entry.status = response.status_code
        if response.status_code >= 500:
            if response.status_code == UNAVAILABLE and "Retry-After" in response.headers:
                self.report.refused_503 += 1
            return self._unknown(entry, sent, response.text[:200])
        if response.status_code != 200:
            entry.ended_at, entry.outcome, entry.detail = time.time(), "fail", response.text[:300]
            sent.refused = True
            self.violation(
                "identical send refused",
                f"{why} of {sent.message_id} on node {node} answered "
                f"{response.status_code}: {response.text[:300]}",
            )
            return None
        task = response.json().get("task")
        entry.ended_at, entry.outcome = time.time(), "ok"
        if not isinstance(task, dict):
            entry.outcome = "fail"
            self.violation("send answered without a Task", f"{sent.message_id}: {response.text}")
            return None
        return self._answered(entry, sent, node, task, blocking)

    def _unknown(self, entry: Op, sent: Sent, detail: str) -> None:
        entry.ended_at, entry.outcome, entry.detail = time.time(), "unknown", detail
        sent.unknown += 1
        self.report.unknown_outcomes += 1
        return None

    def _answered(
        self, entry: Op, sent: Sent, node: int, task: dict[str, Any], blocking: bool
    ) -> str:
        task_id = str(task.get("id"))
        entry.task_id = task_id
        sent.answers.append((node, task_id))
        if sent.continues is not None and task_id != sent.continues:
            self.violation(
                "continuation answered with another Task",
                f"{sent.message_id} continues {sent.continues}; node {node} answered {task_id}",
            )
        if sent.task_id is None:
            sent.task_id, sent.acceptor = task_id, node
            self.report.acknowledged += 1
        elif sent.task_id != task_id:
            self.violation(
                "one messageId, two Tasks in answers",
                f"{sent.message_id}: answers {sent.answers}",
            )
        if blocking:
            state = task.get("status", {}).get("state")
            if state in TERMINAL:
                self.expect_final[task_id] = str(state)
        return task_id

    async def send_until_acked(
        self, rng: random.Random, sent: Sent, first: int, *, blocking: bool = False
    ) -> str | None:
        """Send ``sent`` to ``first``, then to other nodes after unknown outcomes,
        at most :data:`SEND_ATTEMPTS` times; the acknowledged Task id or ``None``."""
        node = first
        for attempt in range(SEND_ATTEMPTS):
            why = "send" if attempt == 0 else "send again"
            task_id = await self.post_send(node, sent, why, blocking=blocking)
            if task_id is not None:
                return task_id
            if sent.refused:
                return None  # answered with a 4xx: booked as a violation
            await trio.sleep(min(0.05 * 2**attempt, 1.0))
            node = self.other(rng, node)
        return None

    def new_sent(self, client: int, text: str, flow: str, continues: str | None = None) -> Sent:
        message_id = self.new_id(client)
        sent = Sent(message_id, f"{text}", flow, continues=continues)
        self.sent[message_id] = sent
        self.report.sends += 1
        return sent

    async def maybe_resend(self, rng: random.Random, sent: Sent) -> None:
        """About ``p_resend`` of acknowledged sends: again, to another node."""
        share = self.config.p_resend * (1 - self.config.p_same_moment)
        if sent.task_id is None or rng.random() >= share:
            return
        self.report.resends += 1
        await self.post_send(self.other(rng, sent.acceptor), sent, "re-send")

    async def send_new(self, rng: random.Random, client: int, text: str, flow: str) -> Sent:
        """A new send of ``text`` (``flow``); some at the same moment on two nodes,
        some blocking, some as ``message:stream``; then maybe a re-send."""
        sent = self.new_sent(client, text, flow)
        first = rng.randrange(len(self.cluster.nodes))
        if rng.random() < self.config.p_resend * self.config.p_same_moment:
            self.report.resends += 1
            self.report.same_moment_resends += 1
            second = self.other(rng, first)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self.send_until_acked, rng, sent, first)
                nursery.start_soon(self.post_send, second, sent, "same-moment send")
        elif flow == "plain" and rng.random() < self.config.p_stream:
            await self.stream_send(first, sent)
            if sent.task_id is None:
                await self.send_until_acked(rng, sent, self.other(rng, first))
        else:
            blocking = flow == "plain" and rng.random() < self.config.p_blocking
            await self.send_until_acked(rng, sent, first, blocking=blocking)
            await self.maybe_resend(rng, sent)
        return sent

    # ---- streams

    async def read_stream(self, stream: Stream, response: httpx.Response) -> None:
        """Read SSE events until the server closes the stream; classify its end in
        ``stream``. The last frame (terminal, or an error) is noted when it arrives
        (:attr:`Stream.final_at`); reading goes on to the end of the response, so a
        frame after it (:attr:`Stream.after_end`) is seen, as is a server that never
        closes (a read timeout: ``unclosed``)."""
        error_next = False
        final: str | None = None
        async with contextlib.aclosing(response.aiter_lines()) as lines:
            async for line in lines:
                if line.startswith("event:"):
                    error_next = line.split(":", 1)[1].strip() == "error"
                    continue
                if not line.startswith("data:"):
                    continue
                stream.frames += 1
                if final is not None:
                    stream.after_end += 1
                    continue
                frame = json.loads(line[5:])
                if error_next or "error" in frame:
                    code = frame.get("error", {}).get("code")
                    final, stream.detail = f"error:{code}", line[:300]
                    stream.final, stream.final_at = final, time.time()
                    continue
                if stream.task_id is None and "task" in frame:
                    stream.task_id = str(frame["task"].get("id"))
                state = _state(frame)
                if state is None:
                    continue
                stream.last_state = state
                if state in TERMINAL or (stream.kind == "stream" and state in INTERRUPTED):
                    final, stream.final_at = "terminal", time.time()
                    stream.final = final
        stream.end = final or "closed"

    async def open_stream(
        self, stream: Stream, method: str, path: str, body: dict[str, Any] | None
    ) -> None:
        client = self.http(stream.node)
        timeout = httpx.Timeout(STREAM_READ_TIMEOUT_S, connect=CONNECT_TIMEOUT_S)
        try:
            async with client.stream(method, path, json=body, timeout=timeout) as response:
                if response.status_code != 200:
                    await response.aread()
                    stream.end, stream.detail = (
                        f"refused:{response.status_code}",
                        response.text[:300],
                    )
                    return
                await self.read_stream(stream, response)
        except httpx.ReadTimeout:
            stream.end = "stalled" if stream.final_at is None else "unclosed"
        except (httpx.TransportError, httpx.StreamError) as exc:
            # Cut: by a fault of the node if nothing ended the stream before.
            stream.end, stream.detail = stream.final or "cut", type(exc).__name__
        finally:
            stream.ended_at = time.time()
            self.report.streams_by_end[stream.end.split(":")[0]] += 1

    async def subscribe(self, node: int, task_id: str) -> None:
        stream = Stream("subscribe", node, task_id, time.time())
        self.streams.append(stream)
        self.report.subscribers += 1
        await self.open_stream(stream, "GET", f"/tasks/{task_id}:subscribe", None)

    async def stream_send(self, node: int, sent: Sent) -> None:
        """``message:stream`` of ``sent`` on ``node``: its first frame acknowledges it."""
        stream = Stream("stream", node, None, time.time())
        self.streams.append(stream)
        self.report.subscribers += 1
        body = {
            "message": {
                "messageId": sent.message_id,
                "role": "ROLE_USER",
                "parts": [{"text": sent.text}],
            }
        }
        entry = self.op("stream send", node, message_id=sent.message_id)
        await self.open_stream(stream, "POST", "/message:stream", body)
        entry.ended_at = time.time()
        if stream.task_id is None:
            entry.outcome, entry.detail = "unknown", stream.end
            sent.unknown += 1
            self.report.unknown_outcomes += 1
            return
        entry.outcome, entry.task_id = "ok", stream.task_id
        sent.answers.append((node, stream.task_id))
        if sent.task_id is None:
            sent.task_id, sent.acceptor = stream.task_id, node
            self.report.acknowledged += 1
        elif sent.task_id != stream.task_id:
            self.violation(
                "one messageId, two Tasks in answers", f"{sent.message_id}: {sent.answers}"
            )

    # ---- flows

    async def read_state(self, node: int, task_id: str) -> str | None:
        entry = self.op("get", node, task_id=task_id)
        try:
            response = await self.http(node).get(f"/tasks/{task_id}")
        except httpx.TransportError as exc:
            entry.ended_at, entry.outcome, entry.detail = time.time(), "unknown", repr(exc)
            return None
        entry.ended_at, entry.status = time.time(), response.status_code
        if response.status_code != 200:
            entry.outcome, entry.detail = "fail", response.text[:200]
            if response.status_code == 404:
                self.violation(
                    "acknowledged Task unknown to a node",
                    f"GET /tasks/{task_id} on node {node}: {response.text[:200]}",
                )
            return None
        entry.outcome = "ok"
        return str(response.json().get("status", {}).get("state"))

    async def ask_flow(self, rng: random.Random, client: int) -> None:
        """``ask:`` a Task, read it on other nodes until it waits, answer it on
        another node than the one that accepted it."""
        sent = await self.send_new(rng, client, f"ask: question {self._count + 1}?", "ask")
        if sent.task_id is None:
            return
        task_id = sent.task_id
        deadline = time.monotonic() + WAIT_INPUT_S
        state = None
        while time.monotonic() < deadline:
            state = await self.read_state(self.other(rng, sent.acceptor), task_id)
            if state in INTERRUPTED or state in TERMINAL:
                break
            await trio.sleep(0.1)
        if state not in INTERRUPTED:
            self.report.notes.append(
                f"ask Task {task_id} did not wait for input within {WAIT_INPUT_S:.0f} s "
                f"(last read: {state}); not answered"
            )
            return
        answer = self.new_sent(client, f"answer to {task_id}", "answer", continues=task_id)
        self.report.continuations += 1
        await self.send_until_acked(rng, answer, self.other(rng, sent.acceptor))
        await self.maybe_resend(rng, answer)

    async def cancel_flow(self, rng: random.Random, client: int) -> None:
        """A long ``sleep:`` cancelled on another node than its acceptor."""
        ms = rng.randint(1500, 4000)
        sent = await self.send_new(rng, client, f"sleep: {ms}", "cancel")
        if sent.task_id is None:
            return
        await trio.sleep(rng.uniform(0.05, 1.2))
        node = self.other(rng, sent.acceptor)
        for attempt in range(4):
            self.report.cancels += attempt == 0
            self.cancel_tried.add(sent.task_id)
            entry = self.op("cancel", node, task_id=sent.task_id)
            try:
                response = await self.http(node).post(f"/tasks/{sent.task_id}:cancel")
            except httpx.TransportError as exc:
                entry.ended_at, entry.outcome, entry.detail = time.time(), "unknown", repr(exc)
                node = self.other(rng, node)
                await trio.sleep(0.2)
                continue
            entry.ended_at, entry.status = time.time(), response.status_code
            if response.status_code == 200:
                entry.outcome = "ok"
                self.cancel_acked.add(sent.task_id)
                self.cancel_acked_at[sent.task_id] = entry.ended_at
                self.report.cancels_acked += 1
                state = response.json().get("status", {}).get("state")
                if state != "TASK_STATE_CANCELED":
                    self.violation(
                        "cancel answered 200 without CANCELED",
                        f"Task {sent.task_id} on node {node}: {state}",
                    )
                return
            if response.status_code == 400 and "TASK_NOT_CANCELABLE" in response.text:
                entry.outcome = "ok"  # it finished first
                return
            entry.outcome, entry.detail = "fail", response.text[:200]
            if response.status_code < 500:
                self.violation(
                    "cancel refused",
                    f"Task {sent.task_id} on node {node}: {response.status_code} "
                    f"{response.text[:200]}",
                )
                return
            node = self.other(rng, node)
            await trio.sleep(0.2)

    async def client(self, index: int) -> None:
        rng = random.Random(f"{self.config.seed}:client:{index}")
        c = self.config
        async with trio.open_nursery() as subscribers:
            while not self.load_over:
                roll = rng.random()
                if roll < c.p_ask:
                    await self.ask_flow(rng, index)
                    continue
                if roll < c.p_ask + c.p_cancel:
                    await self.cancel_flow(rng, index)
                    continue
                ms = rng.randint(*c.sleep_ms)
                sent = await self.send_new(rng, index, f"sleep: {ms}", "plain")
                if sent.task_id is not None and rng.random() < c.p_subscribe:
                    node = self.other(rng, sent.acceptor)
                    subscribers.start_soon(self.subscribe, node, sent.task_id)

    # ---- faults

    async def faults(self) -> None:
        c, cluster = self.config, self.cluster
        rng = random.Random(f"{c.seed}:faults")
        start = time.monotonic()
        paused = restarted_db = False
        while True:
            await trio.sleep(rng.uniform(*c.kill_every_s))
            elapsed = time.monotonic() - start
            over = elapsed >= c.load_s
            if over and paused and restarted_db and self.report.kills >= c.min_kills:
                return
            node = rng.choice(cluster.nodes)
            for each in cluster.nodes:
                if not each.life.alive:
                    self.progress(f"{each.node_id} exited on its own; restarting it")
                    await cluster.ensure_all_up()
            if not paused and (over or elapsed >= c.pause_at * c.load_s):
                paused = True
                self.progress(f"SIGSTOP {node.node_id} for {c.pause_length_s:.1f} s")
                cluster.pause(node)
                self.report.pauses += 1
                await trio.sleep(c.pause_length_s)
                cluster.resume(node)
                self.progress(f"SIGCONT {node.node_id}")
            elif not restarted_db and (over or elapsed >= c.db_restart_at * c.load_s):
                restarted_db = True
                self.progress(f"PostgreSQL stopped immediately for {c.db_down_s:.1f} s")
                await cluster.restart_database(c.db_down_s)
                self.report.db_restarts += 1
                self.progress("PostgreSQL started")
            else:
                self.progress(f"SIGKILL {node.node_id}")
                await cluster.kill(node)
                self.report.kills += 1
                await cluster.restart(node)
                self.report.restarts += 1
                self.progress(f"{node.node_id} ready (life {node.life.incarnation})")

    async def load(self) -> None:
        async with trio.open_nursery() as nursery:
            for index in range(self.config.clients):
                nursery.start_soon(self.client, index)
            await self.faults()
            self.load_over = True

    # ---- after the load

    async def resolve_unknowns(self) -> None:
        """Send every never-acknowledged messageId again until it is acknowledged."""
        rng = random.Random(f"{self.config.seed}:resolve")
        deadline = time.monotonic() + RESOLVE_S
        limiter = trio.CapacityLimiter(CHECK_CONCURRENCY)

        async def resolve(sent: Sent) -> None:
            async with limiter:
                node = rng.randrange(len(self.cluster.nodes))
                while sent.task_id is None and time.monotonic() < deadline:
                    if await self.post_send(node, sent, "final send") is None:
                        if sent.refused:
                            return
                        node = self.other(rng, node)
                        await trio.sleep(0.2)

        async with trio.open_nursery() as nursery:
            for sent in list(self.sent.values()):
                if sent.task_id is None:
                    nursery.start_soon(resolve, sent)
        for sent in self.sent.values():
            if sent.task_id is None and not sent.refused:
                self.violation(
                    "send never acknowledged",
                    f"{sent.message_id} ({sent.flow}) after {RESOLVE_S:.0f} s of retries",
                )

    def rows(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.cluster.store_url, autocommit=True) as conn:
            return conn.execute(sql, tuple(args)).fetchall()

    async def settle(self) -> dict[str, tuple[str, dict[str, Any]]]:
        """Wait (bounded) until no Task is SUBMITTED or WORKING; every Task by id."""
        deadline = time.monotonic() + self.config.settle_s
        while True:
            found = await trio.to_thread.run_sync(
                self.rows, "SELECT task_id, state, task_json FROM tasks"
            )
            tasks = {r[0]: (r[1], json.loads(r[2])) for r in found}
            active = [t for t, (s, _) in tasks.items() if s not in TERMINAL | INTERRUPTED]
            if not active or time.monotonic() > deadline:
                for task_id in active[:20]:
                    self.violation(
                        "Task did not settle",
                        f"{task_id} still {tasks[task_id][0]} {self.config.settle_s:.0f} s "
                        "after the load",
                    )
                return tasks
            await trio.sleep(0.25)

    # ---- checks

    def check_claims(self, tasks: dict[str, tuple[str, dict[str, Any]]]) -> None:
        """Checks 1 and 2: every messageId in one Task, the one its answers named."""
        holders: dict[str, list[str]] = defaultdict(list)
        for task_id, (_, task) in tasks.items():
            history = task.get("history") or []
            for message in history:
                if message.get("role") == "ROLE_USER":
                    holders[str(message.get("messageId"))].append(task_id)
            ids = [m.get("messageId") for m in history]
            twice = sorted({str(i) for i in ids if ids.count(i) > 1})
            if twice:
                self.violation("history entry recorded twice", f"{task_id}: {twice}")
            artifact_ids = [a.get("artifactId") for a in task.get("artifacts") or []]
            if len(set(artifact_ids)) != len(artifact_ids):
                self.violation("artifact recorded twice", f"{task_id}: {artifact_ids}")
            first = history[0].get("messageId") if history else None
            if first not in self.sent:
                self.violation("Task nobody sent", f"{task_id} starts with messageId {first!r}")
        for message_id, held in holders.items():
            if len(held) > 1:
                self.violation("one messageId, several Tasks", f"{message_id} in {sorted(held)}")
        for sent in self.sent.values():
            if sent.task_id is None:
                continue
            held = holders.get(sent.message_id, [])
            if held != [sent.task_id]:
                self.violation(
                    "acknowledged send not held by its Task",
                    f"{sent.message_id} ({sent.flow}) acknowledged as {sent.task_id} "
                    f"(answers {sent.answers}); in the database: {held}",
                )

    def check_final_states(self, tasks: dict[str, tuple[str, dict[str, Any]]]) -> dict[str, int]:
        """Check 3 (and 6's counts): final states against the flows; deliveries."""
        delivered = self.rows(
            "SELECT activation_id, task_id, record_json FROM journal WHERE kind = 'WAKE_DELIVERED'"
        )
        by_activation: dict[str, list[int]] = defaultdict(list)
        per_task: Counter[str] = Counter()
        for activation_id, task_id, record in delivered:
            by_activation[activation_id].append(int(json.loads(record).get("delivery", 0)))
            per_task[str(task_id)] += 1
        self.report.deliveries = len(delivered)
        for activation_id, numbers in by_activation.items():
            self.report.max_deliveries = max(self.report.max_deliveries, len(numbers), *numbers)
            if len(numbers) > MAX_DELIVERIES or max(numbers) > MAX_DELIVERIES:
                self.violation(
                    "more than 5 deliveries",
                    f"activation {activation_id}: deliveries {sorted(numbers)}",
                )
            twice = sorted(n for n, k in Counter(numbers).items() if k > 1)
            if twice:
                self.violation(
                    "delivery number recorded twice",
                    f"activation {activation_id}: deliveries {sorted(numbers)}",
                )
        answers = {s.continues: s for s in self.sent.values() if s.continues and s.task_id}
        flows = {s.task_id: s for s in self.sent.values() if s.continues is None and s.task_id}
        for task_id, (state, task) in tasks.items():
            sent = flows.get(task_id)
            if sent is None:
                continue
            expected = self.expect_final.get(task_id)
            if expected is not None and expected != state:
                self.violation(
                    "terminal state changed",
                    f"{task_id} was answered {expected}, the database holds {state}",
                )
            message = json.dumps(task.get("status", {}).get("message"))[:300]
            if state == "TASK_STATE_FAILED":
                if "5 times" in message and per_task[task_id] >= MAX_DELIVERIES:
                    self.report.failed_at_cap += 1
                    self.report.notes.append(f"{task_id} FAILED at the delivery cap: {message}")
                else:
                    self.violation("Task FAILED", f"{task_id} ({sent.flow}): {message}")
                continue
            if task_id in self.cancel_acked and state != "TASK_STATE_CANCELED":
                self.violation(
                    "acknowledged cancel lost", f"{task_id} ends {state} after a 200 cancel"
                )
            elif sent.flow == "ask" and task_id in answers:
                artifacts = json.dumps(task.get("artifacts"))
                if state != "TASK_STATE_COMPLETED" or "You answered" not in artifacts:
                    self.violation(
                        "answered question not completed",
                        f"{task_id} ends {state}; artifacts {artifacts[:200]}",
                    )
            elif sent.flow == "ask" and state not in INTERRUPTED:
                self.violation("unanswered question moved", f"{task_id} ends {state}")
            elif sent.flow in ("plain", "cancel") and state not in (
                "TASK_STATE_COMPLETED",
                "TASK_STATE_CANCELED" if task_id in self.cancel_tried else "",
            ):
                self.violation("Task ended wrongly", f"{task_id} ({sent.flow}) ends {state}")
        return dict(per_task)

    def turns(self) -> list[Turn]:
        """Every turn in every node's log (check 4's intervals)."""
        found: list[Turn] = []
        for node in self.cluster.nodes:
            for life in node.lives:
                turns, problems = life_turns(
                    node.node_id,
                    life.incarnation,
                    life.process.log_events(),
                    life.ended_by,
                    life.ended_at,
                    life.pauses,
                )
                found.extend(turns)
                for problem in problems:
                    self.violation(*problem)
        return found

    def check_turns(self, per_task_deliveries: dict[str, int]) -> None:
        """Checks 4 and 5."""
        turns = self.turns()
        self.report.turns_seen = len(turns)
        by_task: dict[str, list[Turn]] = defaultdict(list)
        for turn in turns:
            by_task[turn.task_id].append(turn)
        for task_id, task_turns in by_task.items():
            if len(task_turns) > per_task_deliveries.get(task_id, 0):
                self.violation(
                    "more turns than deliveries",
                    f"{task_id}: {len(task_turns)} turns in the logs "
                    f"({[(t.node, t.incarnation, t.delivery) for t in task_turns]}), "
                    f"{per_task_deliveries.get(task_id, 0)} WAKE_DELIVERED rows",
                )
        for task_id, acked_at in self.cancel_acked_at.items():
            for turn in by_task.get(task_id, []):
                if turn.stale_from is not None:
                    continue
                if turn.start > acked_at + SLACK_S:
                    self.violation(
                        "turn after an acknowledged cancel",
                        f"{task_id}: cancel answered 200 at {acked_at:.3f}; {_describe(turn)}",
                    )
                elif (
                    turn.start < acked_at and (turn.end or float("inf")) > acked_at + CANCEL_STOP_S
                ):
                    self.violation(
                        "cancel did not stop the running turn",
                        f"{task_id}: cancel answered 200 at {acked_at:.3f}; {_describe(turn)}",
                    )
        problems, windows = judge_overlaps(turns)
        for problem in problems:
            self.violation(*problem)
        self.report.fenced_windows += len(windows)
        self.report.notes.extend(windows)
        self.check_stale_turns(by_task)

    def check_stale_turns(self, by_task: dict[str, list[Turn]]) -> None:
        """A turn that was running when its node was SIGSTOPped, whose Task another
        node took meanwhile, must have been stopped by its lease on the paused node:
        its life logs that it lost or gave up the lease (``STALE_STOP_EVENTS``), or a
        write refused as ``Fenced``, for that Task after the stop."""
        lives = {
            (n.node_id, life.incarnation): life for n in self.cluster.nodes for life in n.lives
        }
        for task_id, task_turns in by_task.items():
            for stale in task_turns:
                if stale.stale_from is None:
                    continue
                taken = any(
                    t.node != stale.node and t.start >= stale.stale_from for t in task_turns
                )
                if not taken:
                    continue
                life = lives[(stale.node, stale.incarnation)]
                stopped = [
                    e
                    for e in life.process.log_events()
                    if e.get("taskId") == task_id
                    and (_ts(e.get("ts")) or 0.0) >= stale.stale_from - SLACK_S
                    and (
                        e.get("event") in STALE_STOP_EVENTS
                        or FENCED.search(f"{e.get('message', '')} {e.get('exception', '')}")
                    )
                ]
                if not stopped:
                    self.violation(
                        "stale turn not stopped by its lease",
                        f"{task_id}: {_describe(stale)} was running when its node was "
                        f"stopped and another node took the Task; its log shows no lost "
                        f"lease, self-fencing or Fenced write for it",
                    )

    async def check_nodes_agree(self, tasks: dict[str, tuple[str, dict[str, Any]]]) -> None:
        """Check 7: ``GET /tasks/{id}`` on every node, equal to each other and the database."""
        limiter = trio.CapacityLimiter(CHECK_CONCURRENCY)
        self.report.tasks_checked = len(tasks)

        async def one(task_id: str) -> None:
            seen: list[tuple[int, Any]] = []
            for node in range(len(self.cluster.nodes)):
                async with limiter:
                    try:
                        response = await self.http(node).get(f"/tasks/{task_id}")
                    except httpx.TransportError as exc:
                        seen.append((node, f"transport error {exc!r}"))
                        continue
                self.report.gets += 1
                if response.status_code != 200:
                    seen.append((node, f"{response.status_code} {response.text[:200]}"))
                else:
                    seen.append((node, response.json()))
            stored = tasks[task_id][1]
            views = {json.dumps(view, sort_keys=True) for _, view in seen}
            if len(views) > 1:
                self.violation(
                    "nodes disagree on a Task",
                    f"{task_id}: "
                    + "; ".join(
                        f"node {n}: {json.dumps(v, sort_keys=True)[:300]}" for n, v in seen
                    ),
                )
            elif isinstance(seen[0][1], dict):
                view = seen[0][1]
                for key in ("status", "history", "artifacts"):
                    if view.get(key) != stored.get(key):
                        self.violation(
                            "node answers other than the database",
                            f"{task_id} {key}: node {json.dumps(view.get(key))[:200]} vs "
                            f"stored {json.dumps(stored.get(key))[:200]}",
                        )
                        break
            else:
                self.violation("Task unreadable on every node", f"{task_id}: {seen[0][1]}")

        async with trio.open_nursery() as nursery:
            for task_id in tasks:
                nursery.start_soon(one, task_id)

    def check_streams(self, tasks: dict[str, tuple[str, dict[str, Any]]]) -> None:
        """Check 8: how every stream ended, judged against the faults in its time."""
        for stream in self.streams:
            ended = stream.ended_at if stream.ended_at is not None else time.time()
            node = self.cluster.nodes[stream.node]
            node_faulted = faulted_during(node, stream.opened_at, ended)
            faulted = node_faulted or any(
                stopped <= ended + SLACK_S and started >= stream.opened_at - SLACK_S
                for stopped, started in self.cluster.database_restarts
            )
            where = f"{stream.kind} on node {stream.node} for {stream.task_id}"
            if stream.after_end:
                self.violation(
                    "frames after a stream's last frame", f"{where}: {stream.after_end} more"
                )
            if stream.end == "terminal":
                final, task = tasks.get(stream.task_id or "", ("?", {}))
                if stream.last_state in TERMINAL and stream.last_state != final:
                    self.violation(
                        "stream ended in another state",
                        f"{where}: last frame {stream.last_state}, the Task ends {final}",
                    )
                committed = _ts(task.get("status", {}).get("timestamp"))
                if stream.last_state in TERMINAL and committed is not None:
                    late = (stream.final_at or ended) - committed
                    self.report.max_live_lag_s = max(self.report.max_live_lag_s, late)
                    if late > LIVE_LATE_S and not faulted:
                        self.violation(
                            "live update late",
                            f"{where}: terminal frame {late:.1f} s after the status "
                            f"({final} at {committed:.3f})",
                        )
            elif stream.end == f"error:{UNAVAILABLE}":
                continue  # the documented end of an interrupted stream
            elif stream.end.startswith("error:"):
                if not faulted or stream.end != "error:500":
                    self.violation("stream ended with an error frame", f"{where}: {stream.detail}")
            elif stream.end.startswith("refused:"):
                # 400: the Task was terminal already; 503: refused while the node or the
                # database was down (the send is sent again).
                if stream.end not in ("refused:400", f"refused:{UNAVAILABLE}"):
                    self.violation("stream refused", f"{where}: {stream.detail}")
            elif not node_faulted:
                # Cut, closed without a last frame, or stalled: only the death or the
                # pause of the stream's own node excuses it (a database outage ends
                # a stream with an error frame, if at all).
                self.violation(
                    f"stream {stream.end} without a fault of its node",
                    f"{where} after {stream.frames} frames ({stream.detail})",
                )

    def check_lives(self) -> None:
        """Count (and note) the lives that ended on their own after getting ready."""
        for node in self.cluster.nodes:
            for life in node.lives:
                if life.ended_by == "exit" and life.ready_at is not None:
                    self.report.unplanned_exits += 1
                    lines = [x for x in life.process.stderr().splitlines() if x.strip()]
                    self.report.notes.append(
                        f"{node.node_id} life {life.incarnation} exited on its own "
                        f"(status {life.process.returncode}): {lines[-1][:400] if lines else ''}"
                    )

    def count_fenced(self) -> None:
        """Fenced writes: log lines (any node, any life) and evidence rows naming them."""
        for node in self.cluster.nodes:
            for life in node.lives:
                for event in life.process.log_events():
                    name = str(event.get("event", "?"))
                    text = f"{event.get('message', '')} {event.get('exception', '')}"
                    if "fenc" in name.lower() or FENCED.search(text):
                        self.report.fenced_log_lines[name] += 1
                    if CLUSTER_EVENTS.search(name):
                        self.report.cluster_events[name] += 1
        found = self.rows(
            "SELECT count(*) FROM evidence WHERE record_type ILIKE %s OR record_json ~ %s",
            ["%fenc%", r"\mFenced\M"],
        )
        self.report.fenced_evidence = int(found[0][0])

    def write_ops(self) -> None:
        with (self.workdir / "ops.jsonl").open("w") as out:
            for entry in self.ops:
                out.write(json.dumps(entry.__dict__) + "\n")
            for stream in self.streams:
                out.write(json.dumps({"stream": stream.__dict__}) + "\n")

    # ---- the whole drill

    async def run(self) -> DrillReport:
        try:
            with trio.move_on_after(self.config.budget_s) as budget:
                await self._run()
            if budget.cancelled_caught:
                self.violation("drill over budget", f"not done in {self.config.budget_s:.0f} s")
        except NodeStartFailed as exc:
            self.violation("node did not start", str(exc))
        finally:
            for client in self.clients:
                with trio.CancelScope(shield=True):
                    await client.aclose()
            gc.collect()  # finalize httpx's interrupted request-body generators now (httpx#3686)
            self.report.elapsed_s = time.monotonic() - self.t0
            self.report.notes.extend(self.cluster.notes)
            self.write_ops()
            (self.workdir / "report.txt").write_text(self.report.failure_text() + "\n")
        return self.report

    async def _run(self) -> None:
        timeout = httpx.Timeout(REQUEST_TIMEOUT_S, connect=CONNECT_TIMEOUT_S)
        self.clients = [
            httpx.AsyncClient(base_url=n.url, headers=self.cluster.auth_headers, timeout=timeout)
            for n in self.cluster.nodes
        ]
        await self.cluster.start_all()
        self.progress(f"{len(self.cluster.nodes)} nodes ready")
        await self.load()
        self.progress("load over")
        await self.cluster.ensure_all_up()
        await self.resolve_unknowns()
        tasks = await self.settle()
        self.progress(f"{len(tasks)} Tasks settled; checking")
        self.check_claims(tasks)
        per_task = self.check_final_states(tasks)
        await self.check_nodes_agree(tasks)
        self.check_turns(per_task)
        self.check_streams(tasks)
        self.check_lives()
        self.count_fenced()


def life_turns(
    node_id: str,
    incarnation: int,
    events: Iterable[dict[str, object]],
    ended_by: str | None,
    ended_at: float | None,
    pauses: Sequence[tuple[float, float | None]],
) -> tuple[list[Turn], list[tuple[str, str]]]:
    """The turns of one node life from its log events (``agent_woken`` starts one,
    ``agent_turn_ended`` ends it), and the problems found: ``(kind, detail)``.

    A turn still open when the life was SIGKILLed (or exited) ends at that death; one
    still open otherwise is a problem ("turn never ended"). A turn running when the
    life was SIGSTOPped is marked stale from that moment (:attr:`Turn.stale_from`).
    """
    found: list[Turn] = []
    problems: list[tuple[str, str]] = []
    open_turns: dict[str, Turn] = {}
    for event in events:
        name, task_id, at = event.get("event"), event.get("taskId"), _ts(event.get("ts"))
        if not isinstance(task_id, str) or at is None:
            continue
        if name == "agent_woken":
            delivery = event.get("delivery")
            number = delivery if isinstance(delivery, int) else None
            turn = Turn(node_id, incarnation, task_id, number, at, None, "open")
            if task_id in open_turns:
                problems.append(
                    (
                        "two turns of one Task on one node",
                        f"{node_id} life {incarnation}: {task_id} woken again at {at:.3f} "
                        f"while its turn from {open_turns[task_id].start:.3f} runs",
                    )
                )
            open_turns[task_id] = turn
            found.append(turn)
        elif name == "agent_turn_ended" and task_id in open_turns:
            turn = open_turns.pop(task_id)
            turn.end, turn.end_kind = at, "logged"
    for turn in open_turns.values():
        if ended_by in ("SIGKILL", "exit") and ended_at is not None:
            # A dead process runs no turn. (An exit on its own is noticed late: its
            # end is an upper bound, which can only make overlaps more likely.)
            turn.end, turn.end_kind = ended_at, "killed" if ended_by == "SIGKILL" else "exited"
        else:
            problems.append(
                (
                    "turn never ended",
                    f"{node_id} life {incarnation}: {turn.task_id} woken at {turn.start:.3f} "
                    f"(delivery {turn.delivery}), no agent_turn_ended",
                )
            )
    for turn in found:
        end = turn.end if turn.end is not None else float("inf")
        for stopped, resumed in pauses:
            if turn.start <= stopped < end:
                turn.stale_from, turn.resumed_at = stopped, resumed
    return found, problems


def judge_overlaps(turns: Iterable[Turn]) -> tuple[list[tuple[str, str]], list[str]]:
    """Check 4 over ``turns``: the overlapping pairs of one Task's turns, as problems
    ``(kind, detail)``, and the *fenced windows* (one line each): a turn that was
    running on a node while it was SIGSTOPped (stale) overlapping, after its resume,
    a turn that started on another node after the stop. Any other overlap is a
    problem, a turn that never ended included."""
    problems: list[tuple[str, str]] = []
    windows: list[str] = []
    by_task: dict[str, list[Turn]] = defaultdict(list)
    all_turns = list(turns)
    for turn in all_turns:
        by_task[turn.task_id].append(turn)
    if all_turns and not any(t.end_kind == "logged" for t in all_turns):
        problems.append(
            (
                "no turn end logged",
                "agent_woken lines but no agent_turn_ended: turn overlap cannot be judged",
            )
        )
    for task_id, task_turns in by_task.items():
        task_turns.sort(key=lambda t: t.start)
        for i, a in enumerate(task_turns):
            a_end = a.end if a.end is not None else float("inf")
            for b in task_turns[i + 1 :]:
                if b.start >= a_end:
                    continue
                window = _fenced_window(a, b)
                if window is not None:
                    windows.append(f"fenced window: {task_id}: {window}")
                else:
                    problems.append(
                        (
                            "two turns of one Task overlapped",
                            f"{task_id}: {_describe(a)} and {_describe(b)}",
                        )
                    )
    return problems, windows


def _describe(t: Turn) -> str:
    end = f"{t.end:.3f}" if t.end is not None else "never"
    return (
        f"{t.node} life {t.incarnation} delivery {t.delivery} [{t.start:.3f}, {end}] ({t.end_kind})"
    )


def _fenced_window(a: Turn, b: Turn) -> str | None:
    """The description of the overlap of ``a`` and ``b`` (``a`` started first) if it
    is a fenced window, else ``None``."""
    for stale, other in ((a, b), (b, a)):
        if (
            stale.stale_from is not None
            and stale.resumed_at is not None
            and stale.end is not None
            and other.node != stale.node
            and other.start >= stale.stale_from
        ):
            after_ms = max(0.0, stale.end - stale.resumed_at) * 1000
            return (
                f"stale {_describe(stale)} ran {after_ms:.0f} ms after its SIGCONT, "
                f"beside {_describe(other)}"
            )
    return None


def faulted_during(node: Node, start: float, end: float) -> bool:
    """Whether ``node`` was anything but up between ``start`` and ``end`` (wall-clock
    seconds): unless one life was ready by ``start``, lived past ``end`` (with
    :data:`SLACK_S`) and was never paused meanwhile, the node was dead, starting or
    stopped for part of the time."""
    for life in node.lives:
        if life.ready_at is None or life.ready_at > start:
            continue
        if life.ended_at is not None and life.ended_at <= end + SLACK_S:
            continue
        paused = any(
            stopped <= end + SLACK_S and (resumed is None or resumed >= start - SLACK_S)
            for stopped, resumed in life.pauses
        )
        return paused
    return True


async def run_drill(
    config: DrillConfig, spawner: Spawner, database: Cluster, store_url: str
) -> DrillReport:
    """Start ``config.nodes`` nodes on ``store_url``, run the drill, stop them."""
    cluster = NodeCluster(
        spawner,
        database,
        store_url,
        nodes=config.nodes,
        lease_ttl_s=config.lease_ttl_s,
        concurrency=config.concurrency,
        extra_env={"A2A_BLOCKING_TIMEOUT_MS": str(BLOCKING_TIMEOUT_MS)},
    )
    try:
        return await Drill(config, cluster, spawner.root).run()
    finally:
        cluster.close()


def grep_logs(cluster: NodeCluster, keys: Iterable[str], limit: int = 40) -> list[str]:
    """Log lines of any life naming one of ``keys`` (for failure evidence)."""
    wanted = list(keys)
    found: list[str] = []
    for node in cluster.nodes:
        for life in node.lives:
            for line in life.process.stderr().splitlines():
                if any(k in line for k in wanted):
                    found.append(f"{node.node_id}/{life.incarnation}: {line[:400]}")
                    if len(found) >= limit:
                        return found
    return found
