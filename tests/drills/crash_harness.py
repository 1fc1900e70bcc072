"""Crash drills: the real server as a subprocess, SIGKILLed under concurrent sends.

Used by ``tests/drills/test_crash_drills.py`` and ``bench/crash_drill.py``. Nothing
here imports ``taskplane``: the server is a black box reached over HTTP, plus a
read-only look at its SQLite file while it is dead.

One drill (:func:`run_drill`), for ``kills`` cycles::

    start `python -m taskplane serve` on the same store root (a fresh port each time)
    wait until GET /.well-known/agent-card.json answers  -> the restart succeeded
    check the store over HTTP (see :meth:`Drill.check`)
    run ``clients`` concurrent clients of non-blocking sends (new messageIds, retries of
        acknowledged ones, retries of ones whose outcome is unknown)
    SIGKILL the server after a random delay (seeded), wait for it to be reaped
    post-mortem: PRAGMA integrity_check (read-only open), the root LOCK is free

Every ``startup_kill_every``-th cycle instead kills the server while it starts (store
open, wake replay), before it is ready. After the last cycle the server is started
once more, every unknown outcome is resolved by retrying it, the store is checked
exactly, every acknowledged messageId is retried once, and the server is stopped
cleanly (SIGINT) for a last integrity check.

What counts as what:

- *acknowledged*: a 2xx answer to ``POST /message:send`` was received. Its task id
  is the messageId's identity from then on.
- *unknown outcome*: a transport error (connection refused or reset, the server died
  mid-request, timeout) or a 5xx. The send may or may not have been committed; a
  task holding it in the store is fine, a second task is not.
- *violation*: a product failure the drill must report (lost acknowledged send,
  changed task id on retry, duplicated history or task, ``integrity_check`` not
  ``ok``, restart failure, 409/4xx on an identical retry, a task nobody sent).

Every random choice (kill delays, client action mix, texts) comes from RNGs derived
from one seed, so a failing run can be replayed with that seed; the scheduling of
the server and the network is of course not replayed exactly.
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import json
import os
import random
import signal
import socket
import sqlite3
import string
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import trio

REPO_ROOT = Path(__file__).resolve().parents[2]
TOKEN = "t"
PRINCIPAL = "p"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
DATABASE_FILE_NAME = "taskplane.sqlite3"
LOCK_FILE_NAME = "LOCK"
ELICITATION_URI = "https://github.com/ai-outfitter/channels/a2a-extensions/elicitation/v1"

READY_TIMEOUT_S = 30.0
READY_POLL_S = 0.03
REAP_TIMEOUT_S = 10.0
CLEAN_STOP_TIMEOUT_S = 20.0
REQUEST_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_S = 2.0
SETTLE_TIMEOUT_S = 20.0
SETTLE_POLL_S = 0.05
TRAFFIC_DRAIN_S = 15.0
RESOLVE_TIMEOUT_S = 60.0
CHECK_CONCURRENCY = 8
GET_SAMPLE = 16
"""Acknowledged sends from earlier rounds re-read with GET after each restart (the
ones acknowledged since the previous check are all re-read; the final check reads
every one; the listing checks every task's content after every restart)."""
START_ATTEMPTS = 3
"""Starts of one incarnation when a start is spoiled by something outside the product
(its port taken meanwhile, a signal the drill did not send)."""
TERMINAL_STATES = frozenset(
    {
        "TASK_STATE_COMPLETED",
        "TASK_STATE_FAILED",
        "TASK_STATE_CANCELED",
        "TASK_STATE_REJECTED",
    }
)
ACTIVE_STATES = ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING")
_TEXT_ALPHABET = string.ascii_letters + string.digits + " .,-_éßø✓"


# --------------------------------------------------------------------------- helpers


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def integrity_check(database: Path) -> str:
    """``PRAGMA integrity_check`` of ``database``, opened read-only (``"ok"`` when sound).

    Call it only while no server runs. The read-only connection still reads the WAL
    (a crash leaves committed transactions there, not yet checkpointed).
    """
    if not database.exists():
        return f"missing database file {database}"
    try:
        conn = sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=5.0)
    except sqlite3.Error as exc:
        return f"cannot open {database} read-only: {exc}"
    try:
        rows = conn.execute("PRAGMA integrity_check").fetchall()
    except sqlite3.Error as exc:
        return f"integrity_check raised {type(exc).__name__}: {exc}"
    finally:
        conn.close()
    return "\n".join(str(row[0]) for row in rows)


def read_only_rows(database: Path, sql: str, args: Iterable[Any] = ()) -> list[tuple[Any, ...]]:
    """Run one query on ``database`` opened read-only (server dead or stopped)."""
    conn = sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=5.0)
    try:
        return conn.execute(sql, tuple(args)).fetchall()
    finally:
        conn.close()


def lock_is_free(store_root: Path) -> bool:
    """Whether ``<root>/LOCK`` can be flock()ed now (the dead holder's lock is gone)."""
    path = store_root / LOCK_FILE_NAME
    if not path.exists():
        return True
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return True
    finally:
        os.close(fd)


def _default_stop_signals() -> None:
    """In the child before exec: SIGINT/SIGTERM back to their defaults (a background
    job inherits SIGINT ignored, and the clean stop below relies on SIGINT)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def write_credentials(path: Path) -> Path:
    path.write_text(json.dumps({"credentials": [{"token": TOKEN, "principal": PRINCIPAL}]}))
    path.chmod(0o600)
    return path


def send_body(message_id: str, text: str) -> dict[str, Any]:
    """A non-blocking SendMessageRequest for one user text message."""
    return {
        "message": {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": text}]},
        "configuration": {"returnImmediately": True},
    }


MAX_OVERLOAD_RETRIES = 30
"""Times a send refused with ``503`` + ``Retry-After`` is sent again (same messageId)."""


async def post_send(
    http: httpx.AsyncClient, message_id: str, text: str, *, extensions: Iterable[str] = ()
) -> httpx.Response:
    """``POST /message:send`` (non-blocking), activating ``extensions`` if any.

    Behaves as a well-mannered A2A client: a ``503`` with ``Retry-After`` (the agent's
    wake queue is full, nothing was recorded) is sent again after that many seconds,
    with the same messageId, up to :data:`MAX_OVERLOAD_RETRIES` times. The drills
    judge durability and idempotency, not admission, so a refused send is retried
    rather than counted as an answer.
    """
    headers = {"A2A-Extensions": ", ".join(extensions)} if extensions else None
    body = send_body(message_id, text)
    for _ in range(MAX_OVERLOAD_RETRIES):
        response = await http.post("/message:send", json=body, headers=headers)
        retry_after = response.headers.get("Retry-After")
        if response.status_code != 503 or retry_after is None:
            return response
        await trio.sleep(float(retry_after))  # the server's own back-off, not a sync point
    return response


def client_for(base_url: str) -> httpx.AsyncClient:
    """An httpx client for the principal, with bounded timeouts."""
    return httpx.AsyncClient(
        base_url=base_url,
        headers=AUTH,
        verify=False,  # plain HTTP on loopback: skip loading CA certificates (~70 ms each)
        timeout=httpx.Timeout(REQUEST_TIMEOUT_S, connect=CONNECT_TIMEOUT_S),
    )


async def list_tasks(http: httpx.AsyncClient) -> tuple[int, dict[str, dict[str, Any]]]:
    """Every task of the principal, by id (all pages), and the first page's totalSize."""
    tasks: dict[str, dict[str, Any]] = {}
    token = ""
    total: int | None = None
    for _ in range(10_000):
        params: dict[str, Any] = {"pageSize": 100}
        if token:
            params["pageToken"] = token
        response = await http.get("/tasks", params=params)
        response.raise_for_status()
        page = response.json()
        if total is None:
            total = int(page.get("totalSize", 0))
        for task in page.get("tasks", []):
            tasks.setdefault(task["id"], task)
        token = page.get("nextPageToken", "")
        if not token:
            break
    assert total is not None
    return total, tasks


def text_of(message: dict[str, Any]) -> str:
    return "".join(p.get("text", "") for p in message.get("parts", []))


def history_problems(task: dict[str, Any], message_id: str, text: str) -> list[str]:
    """What is wrong with ``task`` as the store of the send (``message_id``, ``text``)."""
    problems: list[str] = []
    history = task.get("history") or []
    if not history:
        return ["empty history"]
    first = history[0]
    if first.get("messageId") != message_id:
        problems.append(f"history[0].messageId is {first.get('messageId')!r}")
    if first.get("role") != "ROLE_USER":
        problems.append(f"history[0].role is {first.get('role')!r}")
    if text_of(first) != text:
        problems.append(f"history[0] text is {text_of(first)!r}, sent {text!r}")
    ids = [m.get("messageId") for m in history]
    dupes = sorted({i for i in ids if ids.count(i) > 1}, key=str)
    if dupes:
        problems.append(f"duplicated history messageIds {dupes} in {ids}")
    users = [m.get("messageId") for m in history if m.get("role") == "ROLE_USER"]
    if len(users) != 1:
        problems.append(f"{len(users)} user entries in history (one send, no continuation)")
    return problems


# --------------------------------------------------------------------------- the server


@dataclass
class ServerProcess:
    """One incarnation of ``python -m taskplane serve`` on ``store_root``."""

    incarnation: int
    store_root: Path
    credentials: Path
    log_path: Path
    port: int = 0
    process: trio.Process | None = None
    started_at: float = 0.0
    ready_after_s: float | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("A2A_", "CHANNELS_", "TASKPLANE_"))
        }
        env.update(
            A2A_SERVER="1",
            A2A_CREDENTIALS_PATH=str(self.credentials),
            A2A_HOST="127.0.0.1",
            A2A_PORT=str(self.port),
            CHANNELS_TASK_STORE_PATH=str(self.store_root),
            PYTHONUNBUFFERED="1",
        )
        return env

    async def start(self) -> None:
        self.port = free_port()
        with self.log_path.open("ab") as log:
            log.write(f"### harness: incarnation {self.incarnation} port {self.port}\n".encode())
            log.flush()
            self.process = await trio.lowlevel.open_process(
                [sys.executable, "-m", "taskplane", "serve"],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=self.env(),
                cwd=str(REPO_ROOT),
                preexec_fn=_default_stop_signals,
            )
        self.started_at = time.monotonic()

    async def wait_ready(self) -> str | None:
        """Poll the Agent Card until it answers: ``None``, or why the start failed."""
        assert self.process is not None
        deadline = time.monotonic() + READY_TIMEOUT_S
        async with httpx.AsyncClient(base_url=self.base_url, timeout=1.0, verify=False) as http:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    return f"the server exited with code {self.process.returncode} while starting"
                with contextlib.suppress(httpx.TransportError):
                    response = await http.get("/.well-known/agent-card.json")
                    if response.status_code == 200:
                        self.ready_after_s = time.monotonic() - self.started_at
                        return None
                await trio.sleep(READY_POLL_S)
        return f"the server was not ready after {READY_TIMEOUT_S:.0f} s"

    def external_signal(self) -> str | None:
        """The signal, not sent by the drill, that ended the process while starting."""
        code = self.process.returncode if self.process is not None else None
        if code is not None and code < 0 and -code != signal.SIGKILL:
            return signal.Signals(-code).name
        return None

    def address_in_use(self) -> bool:
        tail = self.log_tail(20)
        return "Address already in use" in tail or "Errno 98" in tail

    def sigkill(self) -> None:
        """Send SIGKILL (no checkpoint: nothing else runs between the decision and it)."""
        assert self.process is not None
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signal.SIGKILL)

    async def kill(self) -> int | None:
        """SIGKILL and reap; the exit code (``None`` if it could not be reaped)."""
        self.sigkill()
        return await self.reap()

    async def reap(self, within_s: float = REAP_TIMEOUT_S) -> int | None:
        """Wait for the process to end; its exit code, ``None`` if it did not."""
        assert self.process is not None
        with trio.move_on_after(within_s):
            return await self.process.wait()
        return None

    async def stop(self) -> int | None:
        """Clean stop: SIGINT (graceful shutdown), then reap; the exit code or ``None``."""
        assert self.process is not None
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signal.SIGINT)
        return await self.reap(CLEAN_STOP_TIMEOUT_S)

    async def ensure_dead(self) -> None:
        """Kill and reap if still running (cleanup path; shielded and bounded)."""
        if self.process is None or self.process.returncode is not None:
            return
        with trio.CancelScope(shield=True):
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGKILL)
            with trio.move_on_after(REAP_TIMEOUT_S):
                await self.process.wait()

    def log_tail(self, lines: int) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


# --------------------------------------------------------------------------- the ledger


@dataclass
class Sent:
    """What the clients know about one messageId."""

    message_id: str
    text: str
    task_id: str | None = None
    acked_cycle: int | None = None
    unknown_attempts: int = 0
    seen_task_id: str | None = None
    attempts: list[str] = field(default_factory=list)

    def note(self, line: str) -> None:
        if len(self.attempts) < 40:
            self.attempts.append(line)


@dataclass
class Violation:
    cycle: int
    kind: str
    detail: str
    message_ids: tuple[str, ...] = ()
    task_ids: tuple[str, ...] = ()


@dataclass
class DrillConfig:
    """Knobs of one drill. Delays in seconds."""

    kills: int = 20
    seed: int = 0
    clients: int = 8
    min_kill_delay_s: float = 0.02
    max_kill_delay_s: float = 0.6
    startup_kill_every: int = 0
    """Every n-th cycle kills the server while it starts (0: never)."""
    p_retry_acked: float = 0.3
    p_retry_unknown: float = 0.2
    budget_s: float = 600.0
    progress: Callable[[str], None] | None = None
    """Called with one line per cycle (the bench's ``--verbose``)."""
    tamper: Callable[[Path, int], None] | None = None
    """Self-test hook: called in a thread with (database path, cycle) after each
    post-mortem, while no server runs (the harness self-test damages the store with it
    to prove that the checks notice)."""


@dataclass
class DrillReport:
    config: DrillConfig
    workdir: Path
    kills: int = 0
    traffic_kills: int = 0
    startup_kills: int = 0
    restarts_ok: int = 0
    acknowledged: int = 0
    acked_first_try: int = 0
    acked_after_unknown: int = 0
    retries_checked: int = 0
    unknown_outcomes: int = 0
    unknown_ids: int = 0
    unknown_found_committed: int = 0
    refused_5xx: int = 0
    in_flight_at_kill: int = 0
    external_signals: int = 0
    integrity_ok: int = 0
    integrity_checks: int = 0
    checks: int = 0
    gets_checked: int = 0
    final_total_size: int | None = None
    elapsed_s: float = 0.0
    notes: list[str] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    evidence: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations

    def reproduce(self) -> str:
        c = self.config
        return (
            f".venv/bin/python bench/crash_drill.py --kills {c.kills} --seed {c.seed} "
            f"--clients {c.clients} --startup-kill-every {c.startup_kill_every} "
            f"--max-kill-delay {c.max_kill_delay_s}  (pytest: CRASH_DRILL_SEED={c.seed})"
        )

    def summary(self) -> str:
        outside = f", outside signals={self.external_signals}" if self.external_signals else ""
        return (
            f"crash drill seed={self.config.seed} clients={self.config.clients}: "
            f"kills={self.kills} (under traffic {self.traffic_kills}, during startup "
            f"{self.startup_kills}), restarts ok={self.restarts_ok}, "
            f"acknowledged sends={self.acknowledged} "
            f"(first try {self.acked_first_try}, after an unknown outcome "
            f"{self.acked_after_unknown}), retries checked={self.retries_checked}, "
            f"unknown outcomes={self.unknown_outcomes} attempts on {self.unknown_ids} "
            f"messageIds ({self.unknown_found_committed} found committed after the crash; "
            f"5xx {self.refused_5xx}; in flight at a kill {self.in_flight_at_kill}), "
            f"integrity checks ok={self.integrity_ok}/{self.integrity_checks}, "
            f"store checks={self.checks}, GETs={self.gets_checked}, "
            f"final totalSize={self.final_total_size}{outside}, elapsed={self.elapsed_s:.1f} s"
        )

    def failure_text(self) -> str:
        lines = [
            f"CRASH DRILL FOUND {len(self.violations)} VIOLATION(S) -- seed {self.config.seed}",
            f"reproduce: {self.reproduce()}",
            f"workdir (store, server logs): {self.workdir}",
            self.summary(),
        ]
        by_kind: dict[str, list[Violation]] = {}
        for v in self.violations:
            by_kind.setdefault(v.kind, []).append(v)
        for kind, found in by_kind.items():
            lines.append(f"* {kind} ({len(found)}):")
            lines.extend(f"  - cycle {v.cycle}: {v.detail}" for v in found[:5])
            if len(found) > 5:
                lines.append(f"  - ... and {len(found) - 5} more")
        lines.extend(self.evidence)
        lines.extend(f"note: {n}" for n in self.notes)
        return "\n".join(lines)


# --------------------------------------------------------------------------- the drill


class Drill:
    """State of one drill run; see the module docstring."""

    def __init__(self, config: DrillConfig, workdir: Path) -> None:
        if config.startup_kill_every == 1:
            raise ValueError("startup_kill_every must be 0 or >= 2 (cycle 1 runs traffic)")
        self.config = config
        self.workdir = workdir
        self.store_root = workdir / "store"
        self.logs = workdir / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.credentials = write_credentials(workdir / "credentials.json")
        self.database = self.store_root / DATABASE_FILE_NAME
        self.report = DrillReport(config, workdir)
        self.sent: dict[str, Sent] = {}
        self.acked_order: list[str] = []
        self.pending: dict[str, None] = {}  # issued, never acknowledged (ordered set)
        self.checked_upto = 0  # acked_order index already re-read with GET
        self.cycle = 0
        self.in_flight = 0
        self.server: ServerProcess | None = None
        self.servers: list[ServerProcess] = []
        self.last_ready_s = 1.0
        self.t0 = time.monotonic()

    # ---- bookkeeping

    def violation(
        self,
        kind: str,
        detail: str,
        message_ids: Iterable[str] = (),
        task_ids: Iterable[str | None] = (),
    ) -> None:
        self.report.violations.append(
            Violation(self.cycle, kind, detail, tuple(message_ids), tuple(t for t in task_ids if t))
        )

    def progress(self, line: str) -> None:
        if self.config.progress is not None:
            self.config.progress(f"t+{time.monotonic() - self.t0:7.2f}s {line}")

    def stamp(self) -> str:
        inc = self.server.incarnation if self.server else -1
        return f"cycle {self.cycle} inc {inc} t+{time.monotonic() - self.t0:.3f}s"

    def new_sent(self, client: int, n: int, rng: random.Random) -> Sent:
        message_id = f"s{self.config.seed}-k{self.cycle}-c{client}-{n}"
        body = "".join(rng.choice(_TEXT_ALPHABET) for _ in range(rng.randint(4, 160)))
        sent = Sent(message_id, f"drill {message_id} {body}".strip())
        self.sent[message_id] = sent
        self.pending[message_id] = None
        return sent

    def record_answer(self, sent: Sent, response: httpx.Response, why: str) -> None:
        """Book one HTTP answer to a send of ``sent``."""
        status = response.status_code
        if status >= 500:
            self.report.refused_5xx += 1
            self._unknown(sent, f"{why} -> {status} {response.text[:120]}")
            return
        if status != 200:
            sent.note(f"{self.stamp()} {why} -> {status}")
            self.violation(
                "identical send refused",
                f"{why} of {sent.message_id} answered {status}: {response.text[:300]}",
                [sent.message_id],
                [sent.task_id],
            )
            return
        try:
            body = response.json()
        except ValueError:
            body = {"unparseable": response.text[:300]}
        task = body.get("task") if isinstance(body, dict) else None
        if not isinstance(task, dict):
            self.violation(
                "send answered without a task",
                f"{sent.message_id}: {str(body)[:300]}",
                [sent.message_id],
            )
            return
        task_id = task.get("id")
        sent.note(f"{self.stamp()} {why} -> 200 task {task_id}")
        problems = history_problems(task, sent.message_id, sent.text)
        if problems:
            self.violation(
                "send answer has wrong content",
                f"{sent.message_id} task {task_id}: {'; '.join(problems)}",
                [sent.message_id],
                [task_id],
            )
        if sent.task_id is None:
            if sent.seen_task_id is not None and sent.seen_task_id != task_id:
                self.violation(
                    "retry minted a second task",
                    f"{sent.message_id} was committed as task {sent.seen_task_id} (seen in the "
                    f"store after a crash) but its retry returned task {task_id}",
                    [sent.message_id],
                    [sent.seen_task_id, task_id],
                )
            sent.task_id = task_id
            sent.acked_cycle = self.cycle
            self.acked_order.append(sent.message_id)
            self.pending.pop(sent.message_id, None)
            self.report.acknowledged += 1
            if sent.unknown_attempts:
                self.report.acked_after_unknown += 1
            else:
                self.report.acked_first_try += 1
            return
        self.report.retries_checked += 1
        if task_id != sent.task_id:
            self.violation(
                "retry changed the task id",
                f"{sent.message_id} was acknowledged as task {sent.task_id} in cycle "
                f"{sent.acked_cycle}; {why} returned task {task_id}",
                [sent.message_id],
                [sent.task_id, task_id],
            )

    def _unknown(self, sent: Sent, line: str) -> None:
        sent.note(f"{self.stamp()} {line}")
        if sent.task_id is None:
            if sent.unknown_attempts == 0:
                self.report.unknown_ids += 1
            sent.unknown_attempts += 1
            self.report.unknown_outcomes += 1

    async def send(self, http: httpx.AsyncClient, sent: Sent, why: str) -> httpx.Response | None:
        """POST one send of ``sent``; book its outcome; the response if one came back."""
        self.in_flight += 1
        try:
            response = await http.post("/message:send", json=send_body(sent.message_id, sent.text))
        except httpx.TransportError as exc:
            self._unknown(sent, f"{why} -> {type(exc).__name__}")
            return None
        finally:
            self.in_flight -= 1
        self.record_answer(sent, response, why)
        return response

    def http(self, base_url: str) -> httpx.AsyncClient:
        return client_for(base_url)

    # ---- server lifecycle

    async def start_server(self) -> ServerProcess:
        incarnation = len(self.servers)
        server = ServerProcess(
            incarnation,
            self.store_root,
            self.credentials,
            self.logs / f"inc-{incarnation:03d}.log",
        )
        self.servers.append(server)
        self.server = server
        await server.start()
        return server

    async def start_and_wait_ready(self) -> bool:
        """Start an incarnation and wait until it serves; a violation if it cannot."""
        for _ in range(START_ATTEMPTS):
            server = await self.start_server()
            failure = await server.wait_ready()
            if failure is None:
                assert server.ready_after_s is not None
                self.last_ready_s = server.ready_after_s
                self.report.restarts_ok += 1
                return True
            await server.ensure_dead()
            outside = server.external_signal()
            if outside is not None:
                # Not a restart failure: something outside the drill signalled the process
                # (seen on shared machines: a broad pkill / process-group signal).
                self.report.external_signals += 1
                self.report.notes.append(
                    f"incarnation {server.incarnation} was ended by {outside} from outside the "
                    "drill while starting; started again"
                )
                continue
            if not server.address_in_use():
                break
            self.report.notes.append(f"port {server.port} was taken; retried on another port")
        self.violation(
            "restart failed",
            f"incarnation {server.incarnation}: {failure}; its stderr ends with:\n"
            + _indent(server.log_tail(25)),
        )
        return False

    async def postmortem(self, server: ServerProcess, how: str) -> None:
        """After the process is gone: integrity_check read-only, then the root lock."""
        self.report.integrity_checks += 1
        verdict = await trio.to_thread.run_sync(integrity_check, self.database)
        if verdict == "ok":
            self.report.integrity_ok += 1
        else:
            self.violation(
                "integrity_check failed",
                f"after {how} of incarnation {server.incarnation}: {verdict[:500]}",
            )
        if not await trio.to_thread.run_sync(lock_is_free, self.store_root):
            self.violation(
                "store lock not released",
                f"{self.store_root / LOCK_FILE_NAME} still locked after {how} of incarnation "
                f"{server.incarnation}",
            )

    # ---- traffic

    async def client(
        self, client: int, base_url: str, stop: trio.Event, rng: random.Random
    ) -> None:
        n = 0
        async with self.http(base_url) as http:
            while not stop.is_set():
                sent, why = self.pick(client, n, rng)
                if why == "new":
                    n += 1
                await self.send(http, sent, why)
                await trio.lowlevel.checkpoint()

    def pick(self, client: int, n: int, rng: random.Random) -> tuple[Sent, str]:
        """The next send of a client: a retry of an unknown, of an acked one, or new."""
        r = rng.random()
        if self.pending and r < self.config.p_retry_unknown:
            candidates = [m for m in self.pending if self.sent[m].unknown_attempts]
            if candidates:
                return self.sent[rng.choice(candidates)], "retry-unknown"
        if self.acked_order and r > 1 - self.config.p_retry_acked:
            recent = self.acked_order[self.checked_upto :]
            pool = recent if recent and rng.random() < 0.5 else self.acked_order
            return self.sent[rng.choice(pool)], "retry-acked"
        return self.new_sent(client, n, rng), "new"

    async def traffic_then_kill(self, server: ServerProcess) -> None:
        rng = random.Random(f"{self.config.seed}:kill:{self.cycle}")
        delay = rng.uniform(self.config.min_kill_delay_s, self.config.max_kill_delay_s)
        stop = trio.Event()
        code: int | None = None
        with trio.move_on_after(delay + TRAFFIC_DRAIN_S) as drain:
            async with trio.open_nursery() as nursery:
                for c in range(self.config.clients):
                    client_rng = random.Random(f"{self.config.seed}:client:{self.cycle}:{c}")
                    nursery.start_soon(self.client, c, server.base_url, stop, client_rng)
                await trio.sleep(delay)
                self.report.in_flight_at_kill += self.in_flight
                server.sigkill()
                stop.set()  # before any checkpoint: no client starts a send to a dead server
                code = await server.reap()
        self.report.kills += 1
        self.report.traffic_kills += 1
        self.progress(
            f"cycle {self.cycle}: ready after {server.ready_after_s or 0:.2f} s, "
            f"killed after {delay:.3f} s of traffic; acknowledged so far "
            f"{len(self.acked_order)}, unresolved {len(self.pending)}"
        )
        if code is not None and code != -signal.SIGKILL:
            self.report.external_signals += 1
            self.report.notes.append(
                f"cycle {self.cycle}: incarnation {server.incarnation} ended with code {code} "
                "before the drill's SIGKILL (a signal from outside the drill?)"
            )
        if drain.cancelled_caught:
            self.violation(
                "traffic did not drain",
                f"clients still busy {TRAFFIC_DRAIN_S:.0f} s after the kill",
            )
        elif code is None:
            self.violation("kill failed", f"incarnation {server.incarnation} was not reaped")

    async def kill_during_startup(self, server: ServerProcess) -> None:
        rng = random.Random(f"{self.config.seed}:startup:{self.cycle}")
        await trio.sleep(rng.uniform(0.5, 1.05) * self.last_ready_s)
        code = await server.kill()
        self.report.kills += 1
        self.report.startup_kills += 1
        if code is None:
            self.violation("kill failed", f"incarnation {server.incarnation} was not reaped")

    # ---- checks

    async def settle(self, http: httpx.AsyncClient) -> bool:
        """Wait (bounded) until no task is SUBMITTED or WORKING; whether that happened."""
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while True:
            active = 0
            for state in ACTIVE_STATES:
                response = await http.get("/tasks", params={"status": state, "pageSize": 1})
                response.raise_for_status()
                active += int(response.json().get("totalSize", 0))
            if active == 0:
                return True
            if time.monotonic() > deadline:
                self.report.notes.append(
                    f"cycle {self.cycle}: {active} task(s) still SUBMITTED/WORKING "
                    f"{SETTLE_TIMEOUT_S:.0f} s after the restart"
                )
                return False
            await trio.sleep(SETTLE_POLL_S)

    async def check(self, base_url: str, *, final: bool = False) -> None:
        """The store, over HTTP, against what the clients know (no client traffic).

        1. Settle: wait (bounded) until no task is SUBMITTED or WORKING (replayed wakes
           finish), so the listing's order is stable while it is paged.
        2. List every task. Each task's history[0] is a send some client issued, with
           the text sent; history messageIds are unique, one user entry per task; no
           two tasks hold one messageId; every acknowledged messageId is listed under
           its acknowledged task id; a task once seen for an unacknowledged messageId
           stays; ``acknowledged <= totalSize <= acknowledged + unknown`` (``final``:
           ``totalSize == acknowledged`` and nothing unresolved).
        3. GET every send acknowledged since the previous check, plus a seeded sample
           of older ones (``final``: every acknowledged send): 200, same id, same
           content.
        """
        self.report.checks += 1
        try:
            await self._check(base_url, final=final)
        except (httpx.HTTPError, ValueError, KeyError) as exc:
            self.violation("store check failed", f"{type(exc).__name__}: {exc}")

    async def _check(self, base_url: str, *, final: bool) -> None:
        async with self.http(base_url) as http:
            settled = await self.settle(http)
            total, tasks = await list_tasks(http)
            if settled and total != len(tasks):
                total, tasks = await list_tasks(http)
                if total != len(tasks):
                    self.violation(
                        "listing inconsistent",
                        f"totalSize {total} but the pages held {len(tasks)} distinct tasks",
                    )
            self.check_listing(total, tasks, final=final)
            await self.check_gets(http, final=final)

    def check_listing(self, total: int, tasks: dict[str, dict[str, Any]], *, final: bool) -> None:
        by_message: dict[str, list[str]] = {}
        for task_id, task in tasks.items():
            history = task.get("history") or []
            first = history[0].get("messageId") if history else None
            if first is None:
                self.violation("task without history", f"task {task_id}", task_ids=[task_id])
                continue
            by_message.setdefault(first, []).append(task_id)
            sent = self.sent.get(first)
            if sent is None:
                self.violation(
                    "task nobody sent",
                    f"task {task_id} holds messageId {first!r}, never sent by a client",
                    [first],
                    [task_id],
                )
                continue
            problems = history_problems(task, sent.message_id, sent.text)
            if problems:
                self.violation(
                    "stored task has wrong content",
                    f"{first} task {task_id}: {'; '.join(problems)}",
                    [first],
                    [task_id],
                )
        for message_id, task_ids in by_message.items():
            if len(task_ids) > 1:
                self.violation(
                    "one messageId, several tasks",
                    f"{message_id} is held by tasks {sorted(task_ids)}",
                    [message_id],
                    task_ids,
                )
        for sent in self.sent.values():
            held = by_message.get(sent.message_id, [])
            if sent.task_id is not None:
                if sent.task_id not in held:
                    self.violation(
                        "acknowledged send missing from the listing",
                        f"{sent.message_id} (acknowledged as task {sent.task_id} in cycle "
                        f"{sent.acked_cycle}) is not listed; listed under it: {held}",
                        [sent.message_id],
                        [sent.task_id],
                    )
            elif held:
                if sent.seen_task_id is None:
                    self.report.unknown_found_committed += 1
                    sent.seen_task_id = held[0]
                    sent.note(f"{self.stamp()} found committed in the store as task {held[0]}")
                elif sent.seen_task_id not in held:
                    self.violation(
                        "committed task changed",
                        f"{sent.message_id} was in the store as task {sent.seen_task_id}, "
                        f"now as {held}",
                        [sent.message_id],
                        [sent.seen_task_id, *held],
                    )
            elif sent.seen_task_id is not None:
                self.violation(
                    "committed task vanished",
                    f"{sent.message_id} was in the store as task {sent.seen_task_id}; now gone",
                    [sent.message_id],
                    [sent.seen_task_id],
                )
        acked = len(self.acked_order)
        upper = acked + len(self.pending)
        if final:
            self.report.final_total_size = total
            if total != acked or self.pending:
                self.violation(
                    "totalSize differs from the distinct acknowledged messageIds",
                    f"totalSize {total}, acknowledged {acked}, unresolved {len(self.pending)}",
                )
        elif not acked <= total <= upper:
            self.violation(
                "totalSize out of bounds",
                f"totalSize {total}, acknowledged {acked}, acknowledged + unknown {upper}",
            )

    async def check_gets(self, http: httpx.AsyncClient, *, final: bool) -> None:
        rng = random.Random(f"{self.config.seed}:sample:{self.cycle}")
        older = self.acked_order[: self.checked_upto]
        chosen = list(self.acked_order[self.checked_upto :])
        if final:
            chosen = list(self.acked_order)
        elif older:
            chosen.extend(rng.sample(older, min(GET_SAMPLE, len(older))))
        self.checked_upto = len(self.acked_order)
        limiter = trio.CapacityLimiter(CHECK_CONCURRENCY)

        async def get_one(message_id: str) -> None:
            async with limiter:
                sent = self.sent[message_id]
                response = await http.get(f"/tasks/{sent.task_id}")
            self.report.gets_checked += 1
            if response.status_code != 200:
                self.violation(
                    "acknowledged send not readable",
                    f"{message_id} (task {sent.task_id}, acknowledged in cycle "
                    f"{sent.acked_cycle}): GET answered {response.status_code} "
                    f"{response.text[:200]}",
                    [message_id],
                    [sent.task_id],
                )
                return
            task = response.json()
            problems = history_problems(task, message_id, sent.text)
            if task.get("id") != sent.task_id:
                problems.append(f"GET returned task {task.get('id')}")
            if problems:
                self.violation(
                    "acknowledged send read back wrong",
                    f"{message_id} task {sent.task_id}: {'; '.join(problems)}",
                    [message_id],
                    [sent.task_id],
                )

        async with trio.open_nursery() as nursery:
            for message_id in chosen:
                nursery.start_soon(get_one, message_id)

    async def resolve_unknowns(self, base_url: str) -> None:
        """Retry every never-acknowledged messageId until it is acknowledged (bounded)."""
        deadline = time.monotonic() + RESOLVE_TIMEOUT_S
        limiter = trio.CapacityLimiter(CHECK_CONCURRENCY)

        async def resolve(http: httpx.AsyncClient, sent: Sent) -> None:
            async with limiter:
                while sent.task_id is None and time.monotonic() < deadline:
                    response = await self.send(http, sent, "final retry")
                    if response is not None and response.status_code < 500:
                        return
                    await trio.sleep(0.1)

        async with self.http(base_url) as http, trio.open_nursery() as nursery:
            for message_id in list(self.pending):
                nursery.start_soon(resolve, http, self.sent[message_id])

    async def retry_all_acked(self, base_url: str) -> None:
        limiter = trio.CapacityLimiter(CHECK_CONCURRENCY)

        async def retry(http: httpx.AsyncClient, sent: Sent) -> None:
            async with limiter:
                await self.send(http, sent, "final retry of acked")

        async with self.http(base_url) as http, trio.open_nursery() as nursery:
            for message_id in self.acked_order:
                nursery.start_soon(retry, http, self.sent[message_id])

    # ---- the whole drill

    async def run(self) -> DrillReport:
        try:
            with trio.move_on_after(self.config.budget_s) as budget:
                await self._run()
            if budget.cancelled_caught:
                self.violation(
                    "drill over budget", f"not finished within {self.config.budget_s:.0f} s"
                )
        finally:
            if self.server is not None:
                await self.server.ensure_dead()
            gc.collect()  # finalize httpx's interrupted request-body generators now (httpx#3686)
            self.report.elapsed_s = time.monotonic() - self.t0
            if self.report.violations:
                self.collect_evidence()
        return self.report

    async def _run(self) -> None:
        if not await self.start_and_wait_ready():
            return
        await self.check(self._base())
        for cycle in range(1, self.config.kills + 1):
            self.cycle = cycle
            every = self.config.startup_kill_every
            if every and cycle % every == 0:
                server = await self.start_server()
                await self.kill_during_startup(server)
                await self.postmortem(server, "a SIGKILL during startup")
            else:
                if cycle > 1:
                    if not await self.start_and_wait_ready():
                        return
                    await self.check(self._base())
                    if self.report.violations:
                        return
                server = self._current()
                await self.traffic_then_kill(server)
                await self.postmortem(server, "a SIGKILL under traffic")
            if self.config.tamper is not None:
                await trio.to_thread.run_sync(self.config.tamper, self.database, cycle)
            if self.report.violations:
                return
        self.cycle = self.config.kills + 1
        if not await self.start_and_wait_ready():
            return
        base = self._base()
        await self.check(base)
        if self.report.violations:
            return
        await self.resolve_unknowns(base)
        await self.check(base, final=True)
        await self.retry_all_acked(base)
        server = self._current()
        code = await server.stop()
        if code is None:
            self.violation(
                "clean stop hung", f"SIGINT did not stop incarnation {server.incarnation}"
            )
            await server.ensure_dead()
        elif code != 0:
            self.violation(
                "clean stop failed",
                f"SIGINT: incarnation {server.incarnation} exited with code {code}; its "
                "stderr ends with:\n" + _indent(server.log_tail(25)),
            )
        await self.postmortem(server, "a clean stop")

    def _current(self) -> ServerProcess:
        assert self.server is not None
        return self.server

    def _base(self) -> str:
        return self._current().base_url

    # ---- failure evidence

    def collect_evidence(self) -> None:
        """Attempt logs and server stderr lines for the messageIds and tasks involved."""
        ev = self.report.evidence
        seen: set[str] = set()
        firsts: dict[str, Violation] = {}
        for v in self.report.violations:
            firsts.setdefault(v.kind, v)
        for v in list(firsts.values())[:5]:  # the first violation of each kind
            for message_id in v.message_ids:
                if message_id in seen or message_id not in self.sent:
                    continue
                seen.add(message_id)
                ev.append(f"attempts of {message_id}:")
                ev.extend(f"    {line}" for line in self.sent[message_id].attempts)
            keys = [*v.message_ids, *v.task_ids]
            if keys:
                ev.append(f"server stderr lines naming {keys[:4]}:")
                ev.extend(f"    {line}" for line in self._grep_logs(keys, limit=30))
        for server in self.servers[-3:]:
            ev.append(f"tail of {server.log_path.name}:")
            ev.append(_indent(server.log_tail(12)))

    def _grep_logs(self, keys: list[str], limit: int) -> Iterator[str]:
        found = 0
        for server in self.servers:
            try:
                text = server.log_path.read_text(errors="replace")
            except OSError:
                continue
            for line in text.splitlines():
                if any(k in line for k in keys):
                    yield f"{server.log_path.name}: {line[:400]}"
                    found += 1
                    if found >= limit:
                        return


def _indent(text: str) -> str:
    return "\n".join(f"    {line}" for line in text.splitlines())


async def run_drill(config: DrillConfig, workdir: Path) -> DrillReport:
    """Run one crash drill in ``workdir`` (store, logs, credentials) and report it."""
    return await Drill(config, workdir).run()
