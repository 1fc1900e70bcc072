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

The subscribers are raw trio TCP streams parsed with h11 (a dependency of httpx and
hypercorn), lighter than one httpx stream each, split over ``--procs`` client
processes (default 2) so that no single client event loop is the bottleneck: a
subscriber's arrival time is taken with ``time.monotonic()`` (one clock for every
process on the machine) as soon as its socket read returns. The soft open-file limit
is raised (``resource.setrlimit``) to ``2 * subscribers + 256`` when lower; the server
and the client processes inherit it.

Usage: .venv/bin/python bench/sse_fanout.py [--subscribers 1000] [--rounds 3] [--procs 2]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import resource
import time
from collections import Counter, defaultdict
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import h11
import httpx
import trio
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


class Tally:
    """Counts subscribers reaching a milestone; sets ``event`` when all ``total`` have."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.count = 0
        self.event = trio.Event()

    def tick(self) -> None:
        self.count += 1
        if self.count >= self.total:
            self.event.set()


class Sub:
    """One subscriber's outcome."""

    def __init__(self) -> None:
        self.status: int | None = None
        self.error: str | None = None
        self.opened = False
        self.done = False
        self.frames: list[tuple[str, float]] = []  # (label, arrival) after the snapshot


def label_of(frame: dict[str, Any]) -> tuple[str, bool]:
    """A short label for a StreamResponse frame, and whether it ends the stream."""
    if "statusUpdate" in frame:
        state = frame["statusUpdate"]["status"]["state"]
        return "status:" + state.removeprefix("TASK_STATE_"), state in TERMINAL_STATES
    if "artifactUpdate" in frame:
        return "artifact", False
    if "task" in frame:
        state = frame["task"]["status"]["state"]
        return "task:" + state.removeprefix("TASK_STATE_"), state in TERMINAL_STATES
    if "error" in frame:
        return "error:" + str(frame["error"].get("status")), True
    return "other", False


def label_of_line(data: bytes) -> tuple[str, bool]:
    """:func:`label_of` for one ``data:`` payload, parsing only small frames: an
    artifact update (it may hold a large artifact) or a snapshot is told by its first
    key, so the client does not pay a JSON parse per subscriber for large updates."""
    if data.startswith(b'{"artifactUpdate"'):
        return "artifact", False
    if data.startswith(b'{"task"') and len(data) > 4096:
        return "task:?", False  # the first frame: only its arrival matters
    return label_of(json.loads(data))


async def subscriber(
    port: int,
    task_id: str,
    sub: Sub,
    limiter: trio.CapacityLimiter,
    opened: Tally,
    finished: Tally,
) -> None:
    counted = False
    try:
        async with limiter:
            stream = await trio.open_tcp_stream(HOST, port)
        async with stream:
            conn = h11.Connection(h11.CLIENT)
            request = h11.Request(
                method="GET",
                target=f"/tasks/{task_id}:subscribe",
                headers=[
                    ("Host", f"{HOST}:{port}"),
                    ("Authorization", f"Bearer {TOKEN}"),
                    ("Accept", "text/event-stream"),
                ],
            )
            await stream.send_all(conn.send(request) + conn.send(h11.EndOfMessage()))
            buf = b""
            body = b""
            now = time.monotonic()
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    data = await stream.receive_some(65536)
                    now = time.monotonic()
                    conn.receive_data(data)
                    continue
                if isinstance(event, h11.Response):
                    sub.status = event.status_code
                elif isinstance(event, h11.Data):
                    if sub.status != 200:
                        body += bytes(event.data)
                        continue
                    buf += bytes(event.data)
                    while b"\n\n" in buf:
                        raw, buf = buf.split(b"\n\n", 1)
                        for line in raw.split(b"\n"):
                            if not line.startswith(b"data:"):
                                continue  # comments (keep-alives)
                            label, last = label_of_line(line[5:].lstrip())
                            if not sub.opened:
                                sub.opened = True
                                counted = True
                                opened.tick()
                            else:
                                sub.frames.append((label, now))
                            if last:
                                sub.done = not label.startswith("error")
                                if label.startswith("error"):
                                    sub.error = label
                elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                    if sub.status != 200:
                        sub.error = f"HTTP {sub.status}: {body[:160]!r}"
                    elif not sub.done and sub.error is None:
                        sub.error = "stream ended before a terminal status"
                    return
    except (OSError, trio.BrokenResourceError, h11.ProtocolError) as exc:
        sub.error = f"{type(exc).__name__}: {exc}"[:200]
    finally:
        if not counted:
            opened.tick()
        finished.tick()


async def client_process(
    port: int,
    task_id: str,
    n: int,
    parallel: int,
    open_timeout: float,
    round_timeout: float,
    pipe: Connection,
) -> None:
    """One client process: ``n`` subscribers; says when they are open, then reports."""
    subs = [Sub() for _ in range(n)]
    opened, finished = Tally(n), Tally(n)
    limiter = trio.CapacityLimiter(parallel)
    async with trio.open_nursery() as nursery:
        for sub in subs:
            nursery.start_soon(subscriber, port, task_id, sub, limiter, opened, finished)
        with trio.move_on_after(open_timeout):
            await opened.event.wait()
        pipe.send("opened")
        with trio.move_on_after(round_timeout) as scope:
            await finished.event.wait()
        nursery.cancel_scope.cancel()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    pipe.send(
        (
            [(s.status, s.error, s.opened, s.done, s.frames) for s in subs],
            scope.cancelled_caught,
            usage.ru_utime + usage.ru_stime,
        )
    )


def _client_entry(*args: Any) -> None:
    trio.run(client_process, *args)


def one_round(
    port: int,
    n: int,
    parallel: int,
    open_timeout: float,
    round_timeout: float,
    server: Server,
    procs: int,
    text_bytes: int,
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
            args = (port, task_id, count, max(1, parallel // procs), open_timeout, round_timeout)
            worker = ctx.Process(target=_client_entry, args=(*args, theirs))
            worker.start()
            pipes.append(mine)
            workers.append(worker)
        for pipe in pipes:
            if pipe.poll(open_timeout + 30):
                pipe.recv()
        result["open_s"] = time.monotonic() - t_open
        result["server_fds"] = server.open_fds()
        result["rss_delta_kib"] = server.rss_kib()["VmRSS"] - rss_before
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
            for status, error, opened, done, frames in rows:
                sub = Sub()
                sub.status, sub.error, sub.opened, sub.done, sub.frames = (
                    status,
                    error,
                    opened,
                    done,
                    frames,
                )
                subs.append(sub)
        result["server_cpu_s"] = server.cpu_seconds() - cpu0
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
        for lbl, ats in per_round.items():
            spreads[lbl].append(max(ats) - min(ats))
        print(
            f"round {i}: {opened}/{n} subscribers open in {rd['open_s']:.2f}s "
            f"(server fds {rd['server_fds']}, RSS +{rd['rss_delta_kib'] / 1024:.1f} MiB); "
            f"trigger reply {rd['trigger_status']} in {rd['trigger_reply_ms']:.1f}ms; "
            f"{done}/{n} streams ended at COMPLETED"
            + ("; ROUND TIMED OUT" if rd["round_timed_out"] else "")
            + f"; cpu s from trigger to last frame: server {rd['server_cpu_s']:.2f},"
            f" clients {rd['client_cpu_s']:.2f} (whole round)"
        )
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
            f" max {fmt_ms(every[-1])}ms"
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
                    )
                )
                if not server.alive():
                    break
        finally:
            stop_and_report(server)
        report(rounds, args.subscribers)


if __name__ == "__main__":
    main()
