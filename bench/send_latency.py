"""Latency and throughput of ``POST /message:send``, non-blocking and blocking.

Per mode, a fresh server on a fresh store; ``--warmup`` sends (not counted), then
``--requests`` sends spread over ``--concurrency`` workers, each with its own HTTP/1.1
keep-alive connection. Latency is per request (send to full response body), on
the client's monotonic clock.

* nonblocking: ``configuration.returnImmediately``: answered once the Task is
  durably accepted (one COMMIT); the scripted agent then works in the background.
* blocking: no configuration: answered when the scripted agent has completed the
  Task (text ``hello``: echoed into an artifact, COMPLETED).

After the non-blocking run the script also waits (bounded by ``--drain-timeout``)
until the agent has completed every Task, and reports how long that took.

Usage: .venv/bin/python bench/send_latency.py [--requests 2000] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import json
import ssl
from collections import Counter
from contextlib import AsyncExitStack
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import trio
from _common import (
    AUTH,
    Server,
    Workdir,
    cpu_seconds_self,
    fmt_ms,
    fsync_probe,
    machine_info,
    percentile,
    report_server_log,
    send_body,
    stop_and_report,
)


class Result:
    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.errors: Counter[str] = Counter()
        self.states: Counter[str] = Counter()
        self.task_ids: list[str] = []
        self.elapsed = 0.0
        self.timed_out = False
        self.client_cpu = 0.0
        self.server_cpu = 0.0


async def run_load(
    base_url: str,
    *,
    total: int,
    concurrency: int,
    immediate: bool,
    text: str,
    timeout_s: float,
    deadline_s: float,
    result: Result | None,
    progress_every: int = 0,
    stop_on_connect_error: bool = False,
) -> None:
    """``total`` sends over ``concurrency`` connections; record into ``result``.

    The clients are created and connected (one GET of the Agent Card each) before
    the clock starts, so the measured window holds only the sends.
    """
    counter = iter(range(total))
    start = trio.current_time()
    stop = trio.CancelScope()
    ssl_context = ssl.create_default_context()  # unused (plain HTTP); built once, not per client

    async def worker(client: httpx.AsyncClient) -> None:
        for _ in counter:
            body = json.dumps(send_body(text, immediate=immediate)).encode()
            t0 = trio.current_time()
            try:
                r = await client.post(
                    "/message:send", content=body, headers={"Content-Type": "application/json"}
                )
            except httpx.HTTPError as exc:
                if result is not None:
                    result.errors[type(exc).__name__] += 1
                if stop_on_connect_error and isinstance(exc, httpx.ConnectError):
                    stop.cancel()  # the server is gone: let the caller look
                continue
            dt = trio.current_time() - t0
            if result is None:
                continue
            if r.status_code != 200:
                result.errors[f"HTTP {r.status_code}: {r.text[:160]}"] += 1
                continue
            payload: dict[str, Any] = r.json()
            task = payload.get("task")
            if task is None:
                result.errors["no task in reply"] += 1
                continue
            result.latencies.append(dt)
            result.states[task["status"]["state"]] += 1
            result.task_ids.append(task["id"])
            done = len(result.latencies)
            if progress_every and done % progress_every == 0:
                spent = trio.current_time() - start
                print(
                    f"  progress: {done} replies in {spent:.0f}s ({done / spent:.0f}/s), "
                    f"errors {sum(result.errors.values())}",
                    flush=True,
                )

    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    async with AsyncExitStack() as stack:
        clients = []
        for _ in range(concurrency):
            client = httpx.AsyncClient(
                base_url=base_url,
                headers=AUTH,
                limits=limits,
                timeout=timeout_s,
                verify=ssl_context,
            )
            clients.append(await stack.enter_async_context(client))
        async with trio.open_nursery() as nursery:
            for client in clients:
                nursery.start_soon(client.get, "/.well-known/agent-card.json")
        start = trio.current_time()
        with trio.move_on_after(deadline_s) as scope, trio.CancelScope() as stop:
            async with trio.open_nursery() as nursery:
                for client in clients:
                    nursery.start_soon(worker, client)
        if result is not None:
            result.elapsed = trio.current_time() - start
            result.timed_out = scope.cancelled_caught


async def wait_drained(
    base_url: str, *, timeout_s: float, stall_s: float = 10.0
) -> tuple[float, int]:
    """Wait until no Task is SUBMITTED or WORKING, at most ``timeout_s``, and give up
    early when that count has not moved for ``stall_s`` (Tasks that will never run).

    Returns the seconds waited and the Tasks still SUBMITTED or WORKING.
    """
    start = trio.current_time()
    left, last_change, previous = -1, start, -2
    async with httpx.AsyncClient(base_url=base_url, headers=AUTH, timeout=30) as client:
        with trio.move_on_after(timeout_s):
            while True:
                left = 0
                for state in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING"):
                    r = await client.get("/tasks", params={"status": state, "pageSize": 1})
                    r.raise_for_status()
                    left += int(r.json().get("totalSize", 0))
                now = trio.current_time()
                if left != previous:
                    previous, last_change = left, now
                if left == 0 or now - last_change >= stall_s:
                    break
                await trio.sleep(0.2)
    return trio.current_time() - start, left


def summarize(mode: str, res: Result, concurrency: int) -> str:
    lat = sorted(res.latencies)
    ok = len(lat)
    rate = ok / res.elapsed if res.elapsed > 0 else float("nan")
    line = (
        f"{mode:<12} c={concurrency:<3} ok={ok:<5} errors={sum(res.errors.values()):<3} "
        f"p50={fmt_ms(percentile(lat, 50))}ms p90={fmt_ms(percentile(lat, 90))}ms "
        f"p99={fmt_ms(percentile(lat, 99))}ms max={fmt_ms(lat[-1] if lat else float('nan'))}ms "
        f"throughput={rate:.0f} req/s  (wall {res.elapsed:.2f}s; "
        f"cpu s: server {res.server_cpu:.1f}, client {res.client_cpu:.1f})"
    )
    if res.timed_out:
        line += "  DEADLINE HIT (hang?)"
    return line


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--requests", type=int, default=2000, help="measured sends per mode")
    p.add_argument("--concurrency", type=int, default=16, help="connections (both modes)")
    p.add_argument(
        "--blocking-concurrency", type=int, default=None, help="override for blocking mode"
    )
    p.add_argument("--warmup", type=int, default=200, help="unmeasured sends first")
    p.add_argument("--text", default="hello", help="message text for the scripted agent")
    p.add_argument("--modes", default="nonblocking,blocking")
    p.add_argument("--timeout", type=float, default=60.0, help="per-request timeout, s")
    p.add_argument("--deadline", type=float, default=300.0, help="max seconds per mode")
    p.add_argument("--drain-timeout", type=float, default=120.0)
    p.add_argument("--group-commit", type=int, choices=(0, 1), default=1)
    p.add_argument("--tmp", default=None, help="parent dir of the temporary store")
    p.add_argument("--keep", action="store_true", help="keep the store and server logs")
    args = p.parse_args()

    print(machine_info())
    lines: list[str] = []
    with Workdir(args.tmp, keep=args.keep) as work:
        print(f"{fsync_probe(work)}; group commit={args.group_commit}")
        for mode in args.modes.split(","):
            immediate = mode == "nonblocking"
            conc = args.concurrency
            if not immediate and args.blocking_concurrency:
                conc = args.blocking_concurrency
            server = Server(
                work,
                Path(work) / f"store-{mode}",
                group_commit=bool(args.group_commit),
                label=f"server-{mode}",
            ).start()
            try:
                common = dict(
                    concurrency=conc,
                    immediate=immediate,
                    text=args.text,
                    timeout_s=args.timeout,
                    deadline_s=args.deadline,
                )
                load = partial(run_load, server.base_url, **common)
                drain = partial(wait_drained, server.base_url, timeout_s=args.drain_timeout)
                trio.run(partial(load, total=args.warmup, result=None))
                if immediate:  # let the warm-up's background turns finish first
                    trio.run(drain)
                res = Result()
                mark = server.log_size()
                cpu0, scpu0 = cpu_seconds_self(), server.cpu_seconds()
                trio.run(partial(load, total=args.requests, result=res))
                res.client_cpu = cpu_seconds_self() - cpu0
                res.server_cpu = server.cpu_seconds() - scpu0
                end = server.log_size()
                line = summarize(mode, res, conc)
                print(line)
                lines.append(line)
                print(f"  reply states: {dict(res.states)}")
                for err, n in res.errors.most_common(5):
                    print(f"  ERROR x{n}: {err}")
                report_server_log(server, start=mark, end=end, what="while measuring")
                if immediate:
                    drain_s, left = trio.run(drain)
                    if left == 0:
                        print(f"  agent backlog: all Tasks completed {drain_s:.1f}s after the end")
                    else:
                        print(
                            f"  agent backlog: {left} Tasks (warm-up included) still "
                            f"SUBMITTED/WORKING {drain_s:.0f}s after the end, no progress "
                            f"for the last 10s: never to run"
                        )
            finally:
                stop_and_report(server)
    print("summary:")
    for line in lines:
        print("  " + line)


if __name__ == "__main__":
    main()
