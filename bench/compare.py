"""taskplane side by side with the a2a-sdk reference server and our stack's ceiling.

One command (see bench/README.md, "compare.py"). On this machine, in one run:

- ``taskplane``: ``python -m taskplane serve`` (scripted agent, durable SQLite store);
- ``taskplane-pg`` / ``taskplane-pg2``: the same on PostgreSQL, one node / two nodes
  on one database of a throwaway PostgreSQL server started for the run
  (``bench/_cluster.py``); wrk's connections are spread over the nodes (one wrk per
  node, counts summed);
- ``sdk-memory`` / ``sdk-sqlite``: the a2a-sdk 1.3.0 reference REST server
  (``DefaultRequestHandler``, echo executor) with ``InMemoryTaskStore`` / its SQLite
  ``DatabaseTaskStore`` (``bench/sdk_reference_server.py``);
- ``ceiling``: a bare ASGI app on hypercorn's trio worker answering a fixed Task
  (``bench/ceiling_server.py``): the most our HTTP stack can do.

Load comes from ``wrk`` (installed with ``apt-get install -y wrk`` if missing) with
``bench/compare.lua``: non-blocking send (a unique messageId per request), blocking
send, ``GET /tasks/{id}``, and ``GET /tasks?pageSize=50`` with 100,000 Tasks stored
(seeded directly through each store before the server starts). No client retries.
Only 2xx count as throughput; 503s are reported apart. Per workload every server
starts fresh; cells run at 1, 16 and 64 connections, servers alternated (the order
rotates each repeat), median of 3. Then ``overload``: taskplane only, non-blocking
sends offered at 1x, 2x and 10x its sustainable rate (its blocking-send rate at 16
connections, when the agent always has work and nothing is refused) from 64
connections pacing themselves (wrk ``delay``), clients ignoring ``Retry-After``.

Writes ``bench/results/compare-<UTC time>.md`` and ``.json`` (machine description,
load average before and after, every run). Everything listens on 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _cluster import (
    Nodes,
    postgres_cpu_seconds,
    postgres_version,
    seed_postgres,
    throwaway_postgres,
)
from _common import (
    HOST,
    PRINCIPAL,
    REPO,
    TOKEN,
    Server,
    Workdir,
    default_python,
    free_port,
    fsync_probe,
    machine_info,
    raise_fd_limit,
)

BENCH = Path(__file__).resolve().parent
LUA = BENCH / "compare.lua"
SERVERS = ("taskplane", "taskplane-pg", "taskplane-pg2", "sdk-memory", "sdk-sqlite", "ceiling")
PG_NODES = {"taskplane-pg": 1, "taskplane-pg2": 2, "taskplane-pg-base": 1, "taskplane-pg2-base": 2}
"""The taskplane servers on PostgreSQL, and how many nodes each runs on one database
(``taskplane-pg-base`` / ``taskplane-pg2-base``: ``--baseline-src``'s, beside
``taskplane-pg`` / ``taskplane-pg2``)."""
BASELINES = ("taskplane-base", "taskplane-pg-base", "taskplane-pg2-base")
TASKPLANES = ("taskplane", "taskplane-base", *PG_NODES)
"""Servers that are taskplane: this checkout (on SQLite, on PostgreSQL), and
``--baseline-src`` when given."""
WORKLOADS = ("send-nonblocking", "send-blocking", "get", "list")
LIST_PATH = "/tasks?pageSize=50"


class Proc:
    """A benchmark server subprocess other than taskplane (SDK reference, ceiling)."""

    def __init__(self, label: str, argv: list[str], workdir: Path) -> None:
        self.label = label
        self.argv = argv
        self.log_path = workdir / f"{label}.log"
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def start(self, *, ready_timeout_s: float = 600.0) -> Proc:
        self.port = free_port()
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [*self.argv, "--port", str(self.port)],
                cwd=REPO,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + ready_timeout_s
        with httpx.Client(timeout=2.0) as client:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    break
                try:
                    if client.get(f"{self.base_url}/.well-known/agent-card.json").is_success:
                        return self
                except httpx.HTTPError:
                    pass
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"{self.label} did not start: {self.log_path.read_text()[-1500:]}")

    def cpu_seconds(self) -> float:
        assert self.proc is not None
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> int | None:
        proc = self.proc
        if proc is None:
            return None
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
            if proc.poll() is not None:
                break
            proc.send_signal(sig)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                continue
        return proc.poll()


def seed_taskplane(store: Path, count: int) -> float:
    """Insert ``count`` COMPLETED Tasks of the bench principal straight into the store."""
    import attrs

    from taskplane.model.enums import Role, TaskState
    from taskplane.model.lifecycle import new_task
    from taskplane.model.types import Message, Part, TaskStatus
    from taskplane.scope import Scope
    from taskplane.store.sqlite import tasks
    from taskplane.store.sqlite.database import Database

    started = time.monotonic()
    db = Database(store)
    try:
        now = int(time.time() * 1000)
        scope = Scope("", PRINCIPAL)
        db.conn.execute("BEGIN")
        for i in range(count):
            message = Message(
                message_id=f"seed-{i}", role=Role.ROLE_USER, parts=(Part.from_text("hello"),)
            )
            task = new_task(str(uuid.uuid4()), str(uuid.uuid4()), message, now - count + i)
            done = TaskStatus(state=TaskState.TASK_STATE_COMPLETED, timestamp=task.status.timestamp)
            tasks.insert(db.conn, attrs.evolve(task, status=done), scope, "a2a", now)
        db.conn.execute("COMMIT")
    finally:
        db.close()
    return time.monotonic() - started


def make_server(name: str, workdir: Path, seed: int, args: argparse.Namespace) -> Any:
    """``taskplane`` runs ``--taskplane-src``; ``taskplane-base`` runs ``--baseline-src``;
    ``taskplane-pg*`` run ``--taskplane-src`` (``taskplane-pg-base``: ``--baseline-src``)
    on a fresh database of ``args.postgres``."""
    home = workdir / name
    home.mkdir()
    python = default_python()
    if name in PG_NODES:
        url = args.postgres.fresh_store_url()
        if seed:
            started = time.monotonic()
            seed_postgres(url, seed, PRINCIPAL)
            print(f"  seeding {name} with {seed} Tasks: {time.monotonic() - started:.1f}s")
        data = args.postgres.root / "data"
        count = PG_NODES[name]
        cwd = args.baseline_src if name in BASELINES else args.taskplane_src
        return Nodes(home, url, count, label=name, cwd=cwd, data_dir=data)
    if name in TASKPLANES:
        cwd = args.baseline_src if name in BASELINES else args.taskplane_src
        store = home / "store"
        if seed:
            print(f"  seeding taskplane with {seed} Tasks: {seed_taskplane(store, seed):.1f}s")
        return Server(home, store, label=name, cwd=cwd)
    if name == "ceiling":
        return Proc(name, [python, str(BENCH / "ceiling_server.py")], home)
    argv = [python, str(BENCH / "sdk_reference_server.py"), "--seed", str(seed)]
    if name == "sdk-sqlite":
        argv += ["--store", "sqlite", "--db", str(home / "sdk.db")]
    return Proc(name, argv, home)


def one_task(server: Any, token: str | None) -> str:
    """Create one Task with a blocking send; its ID (for the GET workload)."""
    headers = {"A2A-Version": "1.0"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    body = {
        "message": {
            "messageId": str(uuid.uuid4()),
            "role": "ROLE_USER",
            "parts": [{"text": "hello"}],
        }
    }
    r = httpx.post(f"{server.base_url}/message:send", json=body, headers=headers, timeout=30)
    r.raise_for_status()
    return str(r.json()["task"]["id"])


def wrk(
    server: Any,
    mode: str,
    path: str,
    *,
    immediate: bool,
    token: str | None,
    conns: int,
    duration_s: float,
    delay_ms: int = 0,
    rate: float = 0.0,
) -> dict[str, Any]:
    """One wrk run; its counts, rates (per second) and latency (ms).

    ``rate`` > 0: requests/s offered on a fixed schedule (open loop, spread over wrk's
    threads), whatever the server's latency, as long as a connection is free.

    A server of several nodes (``base_urls``) gets one wrk per node, all at once, the
    connections (and the rate) split evenly over the first ``min(nodes, conns)``
    nodes; counts and rates are summed, p50 is the mean of the nodes' p50s weighted by
    their responses and p99 the highest node's p99 (an upper bound of the whole's).
    """
    urls = list(getattr(server, "base_urls", [server.base_url]))[: max(1, conns)]
    shares = [conns // len(urls) + (1 if i < conns % len(urls) else 0) for i in range(len(urls))]
    procs = []
    pg_cpu0 = postgres_cpu_seconds(server)
    cpu0 = server.cpu_seconds()
    for url, share in zip(urls, shares, strict=True):
        threads = 1 if share == 1 else 2
        cmd = [
            "wrk",
            "-t",
            str(threads),
            "-c",
            str(share),
            "-d",
            f"{max(1, round(duration_s))}s",
            "--timeout",
            "30s",
            "-s",
            str(LUA),
            url,
            "--",
            mode,
            path,
            "1" if immediate else "0",
            token or "-",
            str(delay_ms),
            uuid.uuid4().hex[:12],
            f"{rate * share / conns / threads:.3f}",
        ]
        procs.append(
            subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        )
    outs = [proc.communicate(timeout=duration_s + 120) for proc in procs]
    cpu1 = server.cpu_seconds()
    pg_cpu1 = postgres_cpu_seconds(server)
    raws = []
    for stdout, stderr in outs:
        line = next((ln for ln in stdout.splitlines() if ln.startswith("WRKJSON ")), None)
        if line is None:
            raise RuntimeError(f"wrk printed no result: {stdout[-800:]} {stderr[-800:]}")
        raws.append(json.loads(line[len("WRKJSON ") :]))
    raw = raws[0] if len(raws) == 1 else _summed(raws)
    secs = raw["duration_us"] / 1e6
    out = {
        "ok_per_s": raw["ok"] / secs,
        "refused_per_s": raw["refused"] / secs,
        "responses_per_s": raw["responses"] / secs,
        "other_per_s": raw["other"] / secs,
        "late": raw.get("late", 0),
        "p50_ms": raw["p50_us"] / 1000,
        "p99_ms": raw["p99_us"] / 1000,
        "server_cpu_cores": (cpu1 - cpu0) / secs,
        "raw": raw,
    }
    if pg_cpu0 is not None and pg_cpu1 is not None:
        out["db_cpu_cores"] = (pg_cpu1 - pg_cpu0) / secs
    if len(raws) > 1:
        out["nodes"] = raws
    return out


def _summed(raws: list[dict[str, Any]]) -> dict[str, Any]:
    """One wrk result of several run at once (see :func:`wrk` for the latencies)."""
    counted = (
        "ok",
        "refused",
        "responses",
        "other",
        "late",
        "connect_errors",
        "read_errors",
        "write_errors",
        "timeouts",
    )
    out: dict[str, Any] = {k: sum(r.get(k, 0) for r in raws) for k in counted}
    out["duration_us"] = max(r["duration_us"] for r in raws)
    answered = sum(r["responses"] for r in raws) or 1
    out["p50_us"] = sum(r["p50_us"] * r["responses"] for r in raws) / answered
    out["p99_us"] = max(r["p99_us"] for r in raws)
    return out


def median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    keys = (
        "ok_per_s",
        "refused_per_s",
        "responses_per_s",
        "other_per_s",
        "p50_ms",
        "p99_ms",
        "server_cpu_cores",
    )
    out = {k: statistics.median(r[k] for r in runs) for k in keys}
    if all("db_cpu_cores" in r for r in runs):
        out["db_cpu_cores"] = statistics.median(r["db_cpu_cores"] for r in runs)
    out["other"] = sum(r["raw"]["other"] for r in runs)
    out["late"] = sum(r["raw"].get("late", 0) for r in runs)
    out["errors"] = sum(
        r["raw"][k]
        for r in runs
        for k in ("connect_errors", "read_errors", "write_errors", "timeouts")
    )
    return out


def ensure_wrk() -> str:
    found = shutil.which("wrk")
    if found:
        return found
    print("wrk not found: apt-get install -y wrk")
    install = ["apt-get", "install", "-y", "wrk"]
    if subprocess.run(install, capture_output=True).returncode != 0:
        subprocess.run(["apt-get", "update"], capture_output=True, check=False)
        subprocess.run(install, capture_output=True, check=True)
    found = shutil.which("wrk")
    if not found:
        raise SystemExit("compare.py needs wrk (apt-get install -y wrk)")
    return found


def check_sdk() -> None:
    code = "import a2a, uvicorn, sqlalchemy, aiosqlite, starlette, sse_starlette"
    if subprocess.run([default_python(), "-c", code], capture_output=True).returncode != 0:
        raise SystemExit('the reference servers need the bench extra: pip install -e ".[bench]"')


def run_workload(workload: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    seed = args.seed_tasks if workload == "list" else 0
    home = workdir / workload
    home.mkdir()
    servers = {name: make_server(name, home, seed, args) for name in args.servers}
    cells: dict[str, Any] = {}
    try:
        for server in servers.values():
            server.start(ready_timeout_s=900)
        tokens = {name: (TOKEN if name in TASKPLANES else None) for name in servers}
        paths = {}
        for name, server in servers.items():
            if workload == "get":
                paths[name] = "/tasks/" + (
                    one_task(server, tokens[name]) if name != "ceiling" else "x"
                )
            elif workload == "list":
                paths[name] = LIST_PATH
            else:
                paths[name] = "/message:send"
        mode = "send" if workload.startswith("send") else "get"
        immediate = workload == "send-nonblocking"
        names = list(servers)
        for name in names:  # warm-up
            wrk(
                servers[name],
                mode,
                paths[name],
                immediate=immediate,
                token=tokens[name],
                conns=16,
                duration_s=args.warmup,
            )
        for conns in args.connections:
            runs: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
            for rep in range(args.repeat):
                order = names[rep % len(names) :] + names[: rep % len(names)]
                for name in order:
                    time.sleep(args.settle)
                    kw = dict(immediate=immediate, token=tokens[name], conns=conns)
                    if mode == "send":  # the queue reaches its steady state first
                        wrk(servers[name], mode, paths[name], duration_s=args.warmup, **kw)
                    runs[name].append(
                        wrk(servers[name], mode, paths[name], duration_s=args.duration, **kw)
                    )
            cells[str(conns)] = {
                name: {"median": median_of(r), "runs": r} for name, r in runs.items()
            }
            print(
                f"  {workload} c={conns}: "
                + "; ".join(
                    f"{n} {cells[str(conns)][n]['median']['ok_per_s']:.0f}/s"
                    f" (503 {cells[str(conns)][n]['median']['refused_per_s']:.0f}/s,"
                    f" p99 {cells[str(conns)][n]['median']['p99_ms']:.1f} ms)"
                    for n in names
                ),
                flush=True,
            )
    finally:
        for server in servers.values():
            server.stop()
    return cells


def overload_connections(rate: float, args: argparse.Namespace) -> int:
    """Connections for an open-loop ``rate``: enough that every request may take
    ``--overload-window`` seconds before the schedule runs out of free connections."""
    return max(args.overload_connections, math.ceil(rate * args.overload_window))


def run_overload(args: argparse.Namespace, workdir: Path, sustainable: float) -> dict[str, Any]:
    """Non-blocking sends to taskplane offered at k x ``sustainable`` Tasks/s (open loop:
    a fixed schedule, whatever the latency; no retries, ``Retry-After`` ignored).

    With ``--baseline-src`` the baseline runs beside it, the two taking turns within
    each level (same run, alternated); its levels are under ``"baseline"``."""
    home = workdir / "overload"
    home.mkdir()
    names = ["taskplane"] + (["taskplane-base"] if args.baseline_src else [])
    servers = {name: make_server(name, home, 0, args) for name in names}
    out: dict[str, Any] = {
        "sustainable_per_s": sustainable,
        "window_s": args.overload_window,
        "open_loop": True,
    }
    levels: dict[str, dict[str, Any]] = {name: {} for name in names}
    try:
        for server in servers.values():
            server.start()
        for factor in args.overload_factors:
            rate = factor * sustainable
            conns = overload_connections(rate, args)
            kw = dict(immediate=True, token=TOKEN, conns=conns, rate=rate)
            runs: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
            for name in names:
                time.sleep(args.settle)
                wrk(servers[name], "send", "/message:send", duration_s=args.warmup * 2, **kw)
            for rep in range(args.repeat):
                order = names[rep % len(names) :] + names[: rep % len(names)]
                for name in order:
                    time.sleep(args.settle)
                    runs[name].append(
                        wrk(servers[name], "send", "/message:send", duration_s=args.duration, **kw)
                    )
            for name in names:
                med = median_of(runs[name])
                levels[name][f"{factor:g}x"] = {
                    "target_per_s": rate,
                    "connections": conns,
                    "median": med,
                    "runs": runs[name],
                }
                print(
                    f"  overload {name} {factor:g}x ({rate:.0f}/s from {conns} connections):"
                    f" offered {med['responses_per_s']:.0f}/s, accepted {med['ok_per_s']:.0f}/s,"
                    f" 503 {med['refused_per_s']:.0f}/s, other {med['other_per_s']:.0f}/s,"
                    f" errors {med['errors']}, late {med['late']},"
                    f" p50 {med['p50_ms']:.1f} ms, p99 {med['p99_ms']:.1f} ms,"
                    f" server cpu {med['server_cpu_cores']:.2f}",
                    flush=True,
                )
    finally:
        for server in servers.values():
            server.stop()
    out.update(levels["taskplane"])
    if args.baseline_src:
        out["baseline"] = levels["taskplane-base"]
    return out


def revision_of(checkout: Path) -> str:
    out = subprocess.run(
        ["git", "-C", str(checkout), "describe", "--always", "--dirty"],
        capture_output=True,
        text=True,
        check=False,
    )
    return out.stdout.strip() or "?"


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--quick", action="store_true", help="smoke run: 1 s cells, 1 repeat, 2,000 seeded Tasks"
    )
    p.add_argument("--duration", type=float, default=5.0, help="seconds measured per cell")
    p.add_argument(
        "--warmup", type=float, default=1.0, help="seconds of load before each send cell"
    )
    p.add_argument("--settle", type=float, default=1.0, help="idle seconds before each cell")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--connections", default="1,16,64")
    p.add_argument("--servers", default=",".join(SERVERS))
    p.add_argument("--workloads", default=",".join((*WORKLOADS, "overload")))
    p.add_argument("--seed-tasks", type=int, default=100_000)
    p.add_argument("--overload-factors", default="1,2,10")
    p.add_argument(
        "--overload-connections",
        type=int,
        default=64,
        help="fewest wrk connections of an overload level",
    )
    p.add_argument(
        "--overload-window",
        type=float,
        default=0.5,
        help="seconds of latency the open-loop schedule absorbs: each level opens"
        " max(--overload-connections, rate x window) connections",
    )
    p.add_argument(
        "--sustainable",
        type=float,
        default=0.0,
        help="Tasks/s taken as 1x for the overload workload (default: measured)",
    )
    p.add_argument(
        "--taskplane-src",
        type=Path,
        default=REPO,
        help="checkout whose taskplane package runs (to compare revisions)",
    )
    p.add_argument(
        "--baseline-src",
        type=Path,
        default=None,
        help="a second checkout run beside this one as server taskplane-base (and"
        " taskplane-pg-base, taskplane-pg2-base beside taskplane-pg, taskplane-pg2; same run,"
        " alternated: to compare revisions)",
    )
    p.add_argument("--out", type=Path, default=BENCH / "results")
    p.add_argument("--tmp", default=None)
    p.add_argument("--keep", action="store_true")
    args = p.parse_args()
    if args.quick:
        args.duration, args.warmup, args.settle, args.repeat = 1.0, 1.0, 0.2, 1
        args.seed_tasks = min(args.seed_tasks, 2000)
    args.connections = [int(c) for c in args.connections.split(",")]
    args.servers = [s for s in args.servers.split(",") if s]
    if args.baseline_src:  # each baseline beside the server it is the baseline of
        for server, base in (
            ("taskplane", "taskplane-base"),
            ("taskplane-pg", "taskplane-pg-base"),
            ("taskplane-pg2", "taskplane-pg2-base"),
        ):
            if server in args.servers and base not in args.servers:
                args.servers.insert(args.servers.index(server) + 1, base)
        if not any(b in args.servers for b in BASELINES):
            args.servers.insert(1, "taskplane-base")
    args.overload_factors = [float(f) for f in args.overload_factors.split(",")]
    workloads = [w for w in args.workloads.split(",") if w]
    ensure_wrk()
    raise_fd_limit(16_384)  # wrk and the server inherit it (open-loop overload)
    if any(s.startswith("sdk") for s in args.servers):
        check_sdk()
    started = _dt.datetime.now(_dt.UTC)
    result: dict[str, Any] = {
        "machine": machine_info(),
        "load_before": loadavg(),
        "started": started.isoformat(timespec="seconds"),
        # no machine paths in the results: the checkout is named by its revision
        "config": {
            **{k: v for k, v in vars(args).items() if not isinstance(v, Path) and k != "tmp"},
            # the server inherits the environment: the agent's turns at once
            "agent_concurrency": int(os.environ.get("A2A_AGENT_CONCURRENCY") or 1),
            "taskplane_src": "this checkout"
            if args.taskplane_src == REPO
            else revision_of(args.taskplane_src),
            "baseline_src": revision_of(args.baseline_src) if args.baseline_src else None,
        },
        "workloads": {},
    }
    print(result["machine"], flush=True)
    with ExitStack() as stack, Workdir(args.tmp, keep=args.keep, prefix="tp-compare-") as workdir:
        args.postgres = None  # one throwaway PostgreSQL server for the whole run
        if any(s in PG_NODES for s in args.servers):
            args.postgres = stack.enter_context(throwaway_postgres())
            result["postgres"] = postgres_version(args.postgres)
            print(f"PostgreSQL: {result['postgres']}", flush=True)
        result["fsync"] = fsync_probe(workdir)
        print(result["fsync"], flush=True)
        for workload in workloads:
            if workload != "overload":
                result["workloads"][workload] = run_workload(workload, args, workdir)
        if "overload" in workloads:
            blocking = result["workloads"].get("send-blocking", {}).get("16", {}).get("taskplane")
            if args.sustainable:
                blocking = {"median": {"ok_per_s": args.sustainable}}
            if blocking is None:  # measure the sustainable rate now
                sub = argparse.Namespace(
                    **{**vars(args), "servers": ["taskplane"], "connections": [16]}
                )
                calibrate = workdir / "calibrate"
                calibrate.mkdir()
                blocking = run_workload("send-blocking", sub, calibrate)["16"]["taskplane"]
            result["overload"] = run_overload(args, workdir, blocking["median"]["ok_per_s"])
    result["load_after"] = loadavg()
    result["finished"] = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    from compare_report import write_reports

    stamp = started.strftime("%Y%m%dT%H%MZ") + f"-c{result['config']['agent_concurrency']}"
    md_path = write_reports(result, args.out, stamp, quick=args.quick)
    print(f"wrote {md_path} and {md_path.with_suffix('.json')}")


if __name__ == "__main__":
    main()
