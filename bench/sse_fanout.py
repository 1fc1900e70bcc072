"""Fan-out delay of ``GET /tasks/{id}:subscribe`` to 1,000 SSE subscribers of one Task.

Per round (``--rounds``, default 3), on one server and a fresh store:

1. a blocking send of ``ask: q`` creates a Task that waits in INPUT_REQUIRED;
2. ``--subscribers`` SSE streams subscribe to it (at most ``--connect-parallel``
   connecting at once); a stream counts as open once its first frame (the
   ``{"task": ...}`` snapshot) has arrived;
3. when every stream is open (or failed), the clock's *trigger* instant is taken and
   a non-blocking follow-up message continues the Task: the scripted agent takes it
   through SUBMITTED, WORKING, an artifact, COMPLETED;
4. each subscriber timestamps every frame as it reads it off its socket; the
   stream must end after the terminal status.

Delay of a subscriber-update = its arrival time minus the trigger instant (so later
updates include the agent's own work before it emits them); the spread of an update
= its last arrival minus its first (the cost of the fan-out itself). Reported: p50,
p99 and max over all subscriber-updates, then per update kind.

The subscribers are a lean meter (``_sse_client.py``): per client process
(``--procs``, default 2) one ``select.epoll`` loop over raw non-blocking sockets that
only reads and timestamps while updates flow (``time.monotonic()``, one clock for
every process on the machine); the HTTP and SSE bytes are decoded with h11 after the
round. On a 2-core machine the client shares the CPU with the server, and a client
that parses as it reads (1,000 trio tasks with h11 each, used before) cost tens of ms
of CPU per update, which showed up in the spread. Per round and update it prints the
arrival shape after the first subscriber (p50/p90/p99/max): a pause inside a fan-out
shows as a jump between two percentiles. ``--py-spy PATH`` profiles the server
(``py-spy record -r 500 -f raw``) from just before each trigger to the round's end.
The soft open-file limit is raised (``resource.setrlimit``) to ``2 * subscribers +
256`` when lower; the server and the client processes inherit it.

Usage: .venv/bin/python bench/sse_fanout.py [--subscribers 1000] [--rounds 3] [--procs 2]
       [--py-spy PATH]
"""

from __future__ import annotations

import argparse
import multiprocessing
import resource
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import httpx
from _common import (
    AUTH,
    HOST,
    REPO,
    TERMINAL_STATES,
    TOKEN,
    Server,
    Workdir,
    fmt_ms,
    fsync_probe,
    machine_info,
    percentile,
    raise_fd_limit,
    send_body,
    stop_and_report,
)
from _sse_client import Row, client_process


class Sub:
    """One subscriber's outcome."""

    def __init__(self, row: Row) -> None:
        self.status, self.error, self.opened, self.done, self.frames = row


def _client_entry(*args: Any) -> None:
    client_process(*args)


def start_py_spy(out: Path, pid: int) -> subprocess.Popen[bytes]:
    """``py-spy record`` (500 Hz, raw folded stacks into ``out``) on the server,
    started once the streams are open and given 1 s to attach before the trigger."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    cmd = [spy, "record", "-p", str(pid), "-r", "500", "-f", "raw", "--nonblocking", "-o"]
    proc = subprocess.Popen([*cmd, str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    time.sleep(1.0)
    return proc


def stop_py_spy(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGINT)
    proc.wait(30)


def one_round(
    port: int,
    n: int,
    parallel: int,
    open_timeout: float,
    round_timeout: float,
    server: Server,
    procs: int,
    text_bytes: int,
    py_spy: Path | None = None,
) -> dict[str, Any]:
    base = f"http://{HOST}:{port}"
    with httpx.Client(base_url=base, headers=AUTH, timeout=60) as client:
        r = client.post("/message:send", json=send_body("ask: q", immediate=False))
        r.raise_for_status()
        task = r.json()["task"]
        assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", task["status"]
        task_id = task["id"]
        rss_before = server.rss_kib()["VmRSS"]

        result: dict[str, Any] = {}
        ctx = multiprocessing.get_context("fork")
        pipes: list[Connection] = []
        workers = []
        t_open = time.monotonic()
        for i in range(procs):
            count = n // procs + (1 if i < n % procs else 0)
            mine, theirs = ctx.Pipe()
            each = max(1, parallel // procs)
            args = (HOST, port, TOKEN, task_id, count, each, open_timeout, round_timeout)
            worker = ctx.Process(target=_client_entry, args=(*args, TERMINAL_STATES, theirs))
            worker.start()
            pipes.append(mine)
            workers.append(worker)
        for pipe in pipes:
            if pipe.poll(open_timeout + 30):
                pipe.recv()
        result["open_s"] = time.monotonic() - t_open
        result["server_fds"] = server.open_fds()
        result["rss_delta_kib"] = server.rss_kib()["VmRSS"] - rss_before
        spy = start_py_spy(py_spy, server.pid) if py_spy is not None else None
        cpu0 = server.cpu_seconds()
        t0 = time.monotonic()
        follow = send_body("x" * text_bytes, immediate=True, task_id=task_id)
        r = client.post("/message:send", json=follow)
        result["trigger_reply_ms"] = (time.monotonic() - t0) * 1000
        result["trigger_status"] = r.status_code
        result["t0"] = t0
        subs: list[Sub] = []
        result["round_timed_out"] = False
        result["client_cpu_s"] = 0.0
        for pipe in pipes:
            if not pipe.poll(round_timeout + 60):
                result["round_timed_out"] = True
                continue
            rows, timed_out, cpu = pipe.recv()
            result["round_timed_out"] |= timed_out
            result["client_cpu_s"] += cpu
            subs.extend(Sub(row) for row in rows)
        result["server_cpu_s"] = server.cpu_seconds() - cpu0
        if spy is not None:
            stop_py_spy(spy)
        for worker in workers:
            worker.join(30)
        result["subs"] = subs
    return result


def report(rounds: list[dict[str, Any]], n: int) -> None:
    all_delays: list[float] = []
    by_label: dict[str, list[float]] = defaultdict(list)
    spreads: dict[str, list[float]] = defaultdict(list)
    for i, rd in enumerate(rounds):
        subs: list[Sub] = rd["subs"]
        opened = sum(s.opened for s in subs)
        done = sum(s.done for s in subs)
        errors = Counter(s.error for s in subs if s.error)
        sequences = Counter(tuple(lbl for lbl, _ in s.frames) for s in subs if s.opened)
        per_round: dict[str, list[float]] = defaultdict(list)
        for s in subs:
            for lbl, at in s.frames:
                d = at - rd["t0"]
                all_delays.append(d)
                by_label[lbl].append(d)
                per_round[lbl].append(at)
        shape = []
        for lbl, ats in per_round.items():
            spreads[lbl].append(max(ats) - min(ats))
            ats.sort()
            offsets = [fmt_ms(percentile(ats, q) - ats[0]) for q in (50, 90, 99)]
            shape.append(f"{lbl} +{'/+'.join(offsets)}/+{fmt_ms(ats[-1] - ats[0])}ms")
        print(
            f"round {i}: {opened}/{n} subscribers open in {rd['open_s']:.2f}s "
            f"(server fds {rd['server_fds']}, RSS +{rd['rss_delta_kib'] / 1024:.1f} MiB); "
            f"trigger reply {rd['trigger_status']} in {rd['trigger_reply_ms']:.1f}ms; "
            f"{done}/{n} streams ended at COMPLETED"
            + ("; ROUND TIMED OUT" if rd["round_timed_out"] else "")
            + f"; cpu s from trigger to last frame: server {rd['server_cpu_s']:.2f},"
            f" clients {rd['client_cpu_s']:.2f}"
        )
        print("  arrival after the first subscriber, p50/p90/p99/max: " + "; ".join(shape))
        for seq, count in sequences.most_common(3):
            print(f"  {count} subscribers saw: {' > '.join(seq) or '(nothing)'}")
        for err, count in errors.most_common(5):
            print(f"  FAILED x{count}: {err}")
    d = sorted(all_delays)
    print(
        f"ALL      {len(d)} subscriber-updates: delay p50 {fmt_ms(percentile(d, 50))}ms "
        f"p99 {fmt_ms(percentile(d, 99))}ms max {fmt_ms(d[-1] if d else float('nan'))}ms"
    )
    order = sorted(by_label, key=lambda k: percentile(sorted(by_label[k]), 50))
    for lbl in order:
        v = sorted(by_label[lbl])
        sp = sorted(spreads[lbl])
        print(
            f"{lbl:<18} n={len(v):<5} delay p50 {fmt_ms(percentile(v, 50))}ms "
            f"p99 {fmt_ms(percentile(v, 99))}ms max {fmt_ms(v[-1])}ms; "
            f"spread first->last subscriber (median of rounds) "
            f"{fmt_ms(sp[len(sp) // 2])}ms, max {fmt_ms(sp[-1])}ms"
        )
    every = sorted(x for v in spreads.values() for x in v)
    if every:
        print(
            f"spread over all {len(every)} update-rounds: median {fmt_ms(every[len(every) // 2])}ms"
            f" p99 {fmt_ms(percentile(every, 99))}ms max {fmt_ms(every[-1])}ms"
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--subscribers", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=3, help="Tasks, one after the other")
    p.add_argument("--connect-parallel", type=int, default=50, help="connects at once")
    p.add_argument("--open-timeout", type=float, default=120.0, help="s to open all streams")
    p.add_argument("--round-timeout", type=float, default=60.0, help="s for all to complete")
    p.add_argument("--procs", type=int, default=2, help="client processes")
    p.add_argument(
        "--text-bytes",
        type=int,
        default=1,
        help="size of the follow-up text, at most about 30000 (echoed into the artifact)",
    )
    p.add_argument(
        "--taskplane-src",
        type=Path,
        default=REPO,
        help="checkout whose taskplane package the server runs (to compare revisions)",
    )
    p.add_argument("--tmp", default=None)
    p.add_argument("--keep", action="store_true")
    p.add_argument(
        "--py-spy",
        type=Path,
        default=None,
        metavar="PATH",
        help="profile the server during each fan-out into PATH.round<N> (py-spy raw)",
    )
    args = p.parse_args()

    soft0, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    soft, hard = raise_fd_limit(2 * args.subscribers + 256)
    print(machine_info())
    with Workdir(args.tmp, keep=args.keep) as work:
        print(fsync_probe(work))
        server = Server(work, work / "store", label="server", cwd=args.taskplane_src).start()
        print(
            f"open files limit (ulimit -n): client soft {soft0} -> {soft}, hard {hard}; "
            f"server soft/hard {server.fd_limit()}"
        )
        rounds: list[dict[str, Any]] = []
        try:
            for _ in range(args.rounds):
                rounds.append(
                    one_round(
                        server.port,
                        args.subscribers,
                        args.connect_parallel,
                        args.open_timeout,
                        args.round_timeout,
                        server,
                        args.procs,
                        args.text_bytes,
                        None
                        if args.py_spy is None
                        else args.py_spy.with_name(f"{args.py_spy.name}.round{len(rounds)}"),
                    )
                )
                if not server.alive():
                    break
        finally:
            stop_and_report(server)
        report(rounds, args.subscribers)


if __name__ == "__main__":
    main()
