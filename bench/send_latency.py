"""Latency and throughput of ``POST /message:send``, non-blocking and blocking.

Per mode, a fresh server on a fresh store; ``--warmup`` sends (not counted), then
``--requests`` sends spread over ``--concurrency`` workers, each with its own HTTP/1.1
keep-alive connection. Latency is per request (send to full response body), on
the client's monotonic clock.

* nonblocking: ``configuration.returnImmediately``: answered once the Task is
  durably accepted (one COMMIT); the scripted agent then works in the background,
  one turn at a time. At most 128 Tasks wait behind the running turn; beyond that the
  server refuses new work at intake with ``503 UNAVAILABLE`` and ``Retry-After: 1``
  (nothing recorded). The client here behaves like a well-mannered A2A client: on a
  503 it waits ``Retry-After`` seconds (capped by ``--max-retry-wait``; without a
  usable header, a capped exponential backoff 0.1, 0.2, 0.4 ... s) and sends the SAME
  request again (same body, same ``messageId``: idempotent), at most
  ``--max-retries`` times per send. Reported: latency of each attempt answered 200,
  end-to-end latency per send (first attempt to its 200, waits and retries
  included), the 503s, and sends/s. So sustained non-blocking creation runs at the
  agent's turn rate, plus the 128 it can buffer.
* blocking: no configuration: answered when the scripted agent has completed the
  Task (text ``hello``: echoed into an artifact, COMPLETED). No retries (a 503 is an
  error), as before; at ``--concurrency`` <= 128 no blocking send can be refused.

After the non-blocking run the script waits (bounded by ``--drain-timeout``) until
the agent has run every Task, then counts the store's Tasks per state: every
accepted Task (warm-up included) must be COMPLETED, and each send must have got its
own Task. It also re-sends a sample of the measured requests (``--replay``) and
checks that each gets its prior answer (same Task), and reads every measured Task's
COMPLETED timestamp to show how busy the agent was: gaps of more than 50 ms between
successive completions are time the agent had nothing to run (with ``Retry-After: 1``
honoured, the 128 waiting Tasks can run out before the refused clients come back).

Usage: .venv/bin/python bench/send_latency.py [--requests 2000] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import random
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

ALL_STATES = (
    "TASK_STATE_SUBMITTED",
    "TASK_STATE_WORKING",
    "TASK_STATE_COMPLETED",
    "TASK_STATE_FAILED",
    "TASK_STATE_CANCELED",
    "TASK_STATE_INPUT_REQUIRED",
    "TASK_STATE_REJECTED",
    "TASK_STATE_AUTH_REQUIRED",
)


class RetryPolicy:
    """What a client does with a 503: wait ``Retry-After`` (delay-seconds, capped at
    ``max_wait_s``) or, without a usable header, ``0.1 * 2**(n-1)`` s (same cap),
    then resend the same request; at most ``max_retries`` retries per send."""

    def __init__(self, *, max_retries: int = 100, max_wait_s: float = 5.0) -> None:
        self.max_retries = max_retries
        self.max_wait_s = max_wait_s

    def delay(self, retry_after: str | None, retry: int) -> float:
        if retry_after is not None and retry_after.strip().isdigit():
            return min(float(retry_after.strip()), self.max_wait_s)
        return min(0.1 * 2.0 ** (retry - 1), self.max_wait_s)


class Result:
    def __init__(self) -> None:
        self.latencies: list[float] = []  # each attempt answered 200
        self.e2e: list[float] = []  # each send answered 200: first attempt to its 200
        self.refused: list[float] = []  # each attempt answered 503
        self.refusals: Counter[str] = Counter()  # 503s by error message
        self.retry_after: Counter[str] = Counter()  # Retry-After values seen on 503s
        self.retried_sends = 0  # sends refused at least once
        self.max_attempts = 0
        self.gave_up = 0  # sends still refused after max_retries
        self.waited_s = 0.0  # seconds spent waiting before retries, summed over sends
        self.errors: Counter[str] = Counter()
        self.states: Counter[str] = Counter()
        self.kinds: Counter[str] = Counter()  # "task" or "message" replies
        self.task_ids: list[str] = []
        self.answered: list[tuple[bytes, str]] = []  # (request body, Task/Message id)
        self.elapsed = 0.0
        self.timed_out = False
        self.client_cpu = 0.0
        self.server_cpu = 0.0

    @property
    def ok(self) -> int:
        return len(self.e2e)


def _error_message(r: httpx.Response) -> str:
    try:
        return str(r.json()["error"]["message"])[:80]
    except (ValueError, KeyError, TypeError):
        return r.text[:80]


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
    retry: RetryPolicy | None = None,
) -> None:
    """``total`` sends over ``concurrency`` connections; record into ``result``.

    With ``retry``, a 503 is waited out and the same request sent again (see
    :class:`RetryPolicy`); without, a 503 is an error like any other non-200.

    The clients are created and connected (one GET of the Agent Card each) before
    the clock starts, so the measured window holds only the sends.
    """
    counter = iter(range(total))
    start = trio.current_time()
    stop = trio.CancelScope()
    ssl_context = ssl.create_default_context()  # unused (plain HTTP); built once, not per client
    res = result if result is not None else Result()  # the warm-up's is thrown away

    async def worker(client: httpx.AsyncClient) -> None:
        for _ in counter:
            body = json.dumps(send_body(text, immediate=immediate)).encode()
            first = trio.current_time()
            attempts = 0
            r: httpx.Response | None = None
            while True:
                attempts += 1
                t0 = trio.current_time()
                try:
                    resp = await client.post(
                        "/message:send",
                        content=body,
                        headers={"Content-Type": "application/json"},
                    )
                except httpx.HTTPError as exc:
                    res.errors[type(exc).__name__] += 1
                    if stop_on_connect_error and isinstance(exc, httpx.ConnectError):
                        stop.cancel()  # the server is gone: let the caller look
                    r = None
                    break
                r, dt = resp, trio.current_time() - t0
                if resp.status_code != 503 or retry is None:
                    break
                res.refused.append(dt)
                res.refusals[_error_message(resp)] += 1
                header = resp.headers.get("Retry-After")
                res.retry_after[header if header is not None else "(none)"] += 1
                if attempts > retry.max_retries:
                    res.gave_up += 1
                    break
                wait = retry.delay(header, attempts)
                res.waited_s += wait
                await trio.sleep(wait)
            res.max_attempts = max(res.max_attempts, attempts)
            if attempts > 1:
                res.retried_sends += 1
            if r is None:
                continue
            if r.status_code != 200:
                if r.status_code != 503 or retry is None:
                    res.errors[f"HTTP {r.status_code}: {r.text[:160]}"] += 1
                continue
            end = trio.current_time()
            payload: dict[str, Any] = r.json()
            task, msg = payload.get("task"), payload.get("message")
            if task is not None:
                res.kinds["task"] += 1
                res.states[task["status"]["state"]] += 1
                res.task_ids.append(task["id"])
                res.answered.append((body, task["id"]))
            elif msg is not None:
                res.kinds["message"] += 1
                res.answered.append((body, msg["messageId"]))
            else:
                res.errors["neither task nor message in reply"] += 1
                continue
            res.latencies.append(dt)
            res.e2e.append(end - first)
            done = res.ok
            if progress_every and done % progress_every == 0:
                spent = trio.current_time() - start
                print(
                    f"  progress: {done} replies in {spent:.0f}s ({done / spent:.0f}/s), "
                    f"errors {sum(res.errors.values())}, 503s {len(res.refused)}",
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


async def completion_times(base_url: str, task_ids: set[str]) -> list[float]:
    """The COMPLETED ``status.timestamp`` (server clock, epoch seconds) of each of
    ``task_ids``, sorted: every Task of the store, 100 a page."""
    times: list[float] = []
    token: str | None = None
    async with httpx.AsyncClient(base_url=base_url, headers=AUTH, timeout=30) as client:
        while True:
            params: dict[str, str | int] = {"pageSize": 100, "historyLength": 0}
            if token:
                params["pageToken"] = token
            r = await client.get("/tasks", params=params)
            r.raise_for_status()
            page = r.json()
            for task in page.get("tasks", []):
                status = task["status"]
                if task["id"] in task_ids and status["state"] == "TASK_STATE_COMPLETED":
                    stamp = status["timestamp"].replace("Z", "+00:00")
                    times.append(dt.datetime.fromisoformat(stamp).timestamp())
            token = page.get("nextPageToken") or None
            if token is None:
                return sorted(times)


def agent_activity(times: list[float], *, idle_gap_s: float = 0.05) -> str:
    """How busy the agent was: its completions' span, the gaps between successive
    completions longer than ``idle_gap_s`` (the agent had nothing to run), and its
    rate outside those gaps."""
    if len(times) < 2:
        return "agent: too few completions to tell"
    gaps = [b - a for a, b in itertools.pairwise(times)]
    idle = [g for g in gaps if g > idle_gap_s]
    span = times[-1] - times[0]
    busy = span - sum(idle)
    busy_rate = (len(gaps) - len(idle)) / busy if busy > 0 else float("nan")
    return (
        f"agent: {len(times)} measured Tasks completed over {span:.1f}s "
        f"({len(times) / span:.0f}/s); idle {sum(idle):.1f}s of it in {len(idle)} gaps "
        f"> {idle_gap_s * 1000:.0f} ms between completions; ~{busy_rate:.0f} Tasks/s "
        f"while busy"
    )


async def count_states(base_url: str) -> tuple[int, dict[str, int]]:
    """The store's Task count (``totalSize`` of an unfiltered list) and the non-zero
    counts per state."""
    counts: dict[str, int] = {}
    async with httpx.AsyncClient(base_url=base_url, headers=AUTH, timeout=30) as client:
        r = await client.get("/tasks", params={"pageSize": 1})
        r.raise_for_status()
        total = int(r.json().get("totalSize", 0))
        for state in ALL_STATES:
            r = await client.get("/tasks", params={"status": state, "pageSize": 1})
            r.raise_for_status()
            n = int(r.json().get("totalSize", 0))
            if n:
                counts[state.removeprefix("TASK_STATE_")] = n
    return total, counts


async def replay(
    base_url: str, answered: list[tuple[bytes, str]], *, sample: int, timeout_s: float = 30
) -> tuple[int, int, Counter[str]]:
    """Send ``sample`` of the ``answered`` requests again (same body, same messageId).

    Returns (sent, answered with the same Task/Message id, other outcomes by kind).
    """
    picked = random.Random(0).sample(answered, min(sample, len(answered)))
    same, other = 0, Counter[str]()
    async with httpx.AsyncClient(base_url=base_url, headers=AUTH, timeout=timeout_s) as client:
        for body, reply_id in picked:
            r = await client.post(
                "/message:send", content=body, headers={"Content-Type": "application/json"}
            )
            if r.status_code != 200:
                other[f"HTTP {r.status_code}"] += 1
                continue
            payload = r.json()
            got = (payload.get("task") or {}).get("id") or (payload.get("message") or {}).get(
                "messageId"
            )
            if got == reply_id:
                same += 1
            else:
                other["a different answer"] += 1
    return len(picked), same, other


def _pcts(values: list[float]) -> str:
    lat = sorted(values)
    return (
        f"p50={fmt_ms(percentile(lat, 50))} p90={fmt_ms(percentile(lat, 90))} "
        f"p99={fmt_ms(percentile(lat, 99))} max={fmt_ms(lat[-1] if lat else float('nan'))} ms"
    )


def summarize(mode: str, res: Result, concurrency: int) -> list[str]:
    lat = sorted(res.latencies)
    ok = len(lat)
    rate = ok / res.elapsed if res.elapsed > 0 else float("nan")
    cpu = f"cpu s: server {res.server_cpu:.1f}, client {res.client_cpu:.1f}"
    if mode != "nonblocking":  # the blocking line, unchanged
        line = (
            f"{mode:<12} c={concurrency:<3} ok={ok:<5} errors={sum(res.errors.values()):<3} "
            f"p50={fmt_ms(percentile(lat, 50))}ms p90={fmt_ms(percentile(lat, 90))}ms "
            f"p99={fmt_ms(percentile(lat, 99))}ms max={fmt_ms(lat[-1] if lat else float('nan'))}ms "
            f"throughput={rate:.0f} req/s  (wall {res.elapsed:.2f}s; {cpu})"
        )
        if res.timed_out:
            line += "  DEADLINE HIT (hang?)"
        return [line]
    attempts = ok + len(res.refused) + sum(res.errors.values())
    lines = [
        f"{mode:<12} c={concurrency:<3} sends ok={ok} errors={sum(res.errors.values())} "
        f"gave up={res.gave_up}; throughput={rate:.0f} sends/s "
        f"({attempts / res.elapsed if res.elapsed > 0 else float('nan'):.0f} attempts/s; "
        f"wall {res.elapsed:.2f}s; {cpu})" + ("  DEADLINE HIT (hang?)" if res.timed_out else ""),
        f"  each 200 attempt:        {_pcts(res.latencies)}",
        f"  per send, retries incl.: {_pcts(res.e2e)}",
        f"  503s: {len(res.refused)} ({res.retried_sends} sends retried, at most "
        f"{res.max_attempts} attempts for one send; {res.waited_s:.0f} s waited in all; "
        f"503 reply p50={fmt_ms(percentile(sorted(res.refused), 50))} ms; Retry-After "
        f"{dict(res.retry_after) or '-'})",
    ]
    return lines


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
    p.add_argument(
        "--max-retries", type=int, default=100, help="nonblocking: retries per send after 503s"
    )
    p.add_argument(
        "--max-retry-wait", type=float, default=5.0, help="nonblocking: cap on one wait, s"
    )
    p.add_argument(
        "--replay", type=int, default=50, help="nonblocking: measured sends re-sent at the end"
    )
    p.add_argument("--group-commit", type=int, choices=(0, 1), default=1)
    p.add_argument("--tmp", default=None, help="parent dir of the temporary store")
    p.add_argument("--keep", action="store_true", help="keep the store and server logs")
    args = p.parse_args()
    policy = RetryPolicy(max_retries=args.max_retries, max_wait_s=args.max_retry_wait)

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
                    retry=policy if immediate else None,
                )
                load = partial(run_load, server.base_url, **common)
                drain = partial(wait_drained, server.base_url, timeout_s=args.drain_timeout)
                warm = Result()
                trio.run(partial(load, total=args.warmup, result=warm))
                if immediate:  # let the warm-up's background turns finish first
                    trio.run(drain)
                    print(
                        f"  warm-up: {warm.ok} Tasks, {len(warm.refused)} 503s, "
                        f"{sum(warm.errors.values())} errors"
                    )
                res = Result()
                mark = server.log_size()
                cpu0, scpu0 = cpu_seconds_self(), server.cpu_seconds()
                trio.run(partial(load, total=args.requests, result=res))
                res.client_cpu = cpu_seconds_self() - cpu0
                res.server_cpu = server.cpu_seconds() - scpu0
                end = server.log_size()
                summary = summarize(mode, res, conc)
                print("\n".join(summary))
                print(f"  reply states: {dict(res.states)}")
                for err, n in res.errors.most_common(5):
                    print(f"  ERROR x{n}: {err}")
                for why, n in res.refusals.most_common(5):
                    print(f"  503 x{n}: {why}")
                report_server_log(server, start=mark, end=end, what="while measuring")
                if immediate:
                    drain_s, left = trio.run(drain)
                    total, counts = trio.run(partial(count_states, server.base_url))
                    accepted = warm.ok + res.ok
                    distinct = len(set(warm.task_ids + res.task_ids))
                    all_done = (
                        left == 0
                        and total == accepted == distinct
                        and counts == {"COMPLETED": accepted}
                    )
                    verdict = (
                        f"every Task completed: {'YES' if all_done else 'NO'} "
                        f"({accepted} sends answered 200, {distinct} distinct Tasks, "
                        f"{total} in the store, by state {counts}; "
                        f"drained {drain_s:.1f}s after the last reply"
                        + (f", {left} still SUBMITTED/WORKING, no progress for 10s" if left else "")
                        + ")"
                    )
                    sent, same, other = trio.run(
                        partial(replay, server.base_url, res.answered, sample=args.replay)
                    )
                    replayed = f"re-sent {sent} measured sends: {same} got their prior Task" + (
                        f", other: {dict(other)}" if other else ""
                    )
                    times = trio.run(partial(completion_times, server.base_url, set(res.task_ids)))
                    agent = agent_activity(times)
                    for extra in (verdict, replayed, agent):
                        print(f"  {extra}")
                        summary.append(f"  {extra}")
                lines += summary
            finally:
                stop_and_report(server)
    print("summary:")
    for line in lines:
        print("  " + line)


if __name__ == "__main__":
    main()
