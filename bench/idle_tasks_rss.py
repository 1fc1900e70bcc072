"""Server RSS with an empty store versus a store holding 100,000 idle Tasks.

1. empty: a fresh server on an empty store; VmRSS ``--settle`` seconds after the
   Agent Card answers, then again after one ``GET /tasks`` list and a few
   ``GET /tasks/{id}`` (unknown ids: 404).
2. create: a server on a second fresh store gets ``--tasks`` sends of ``ask: q``
   (the scripted agent answers INPUT_REQUIRED: an idle, non-terminal Task waiting for
   its user). The default ``--create-mode blocking`` sends with ``--concurrency``
   connections and each reply comes once the Task is INPUT_REQUIRED, so no more than
   that many wakes ever wait (the wake queue holds 128; beyond that a Task is
   accepted but never run, see README). Progress is printed; the phase stops at
   ``--create-deadline`` seconds whatever the count.
3. full: that server is stopped and a new one started on the same store; VmRSS is
   read the same way (after startup, then after a list and ``GET`` of a few Tasks).

Prints the store size, both RSS figures, the difference and the difference per
Task. ``--reuse-store DIR`` skips step 2 and measures an existing store (a copy of
the store root kept with ``--keep``).

Usage: .venv/bin/python bench/idle_tasks_rss.py [--tasks 100000] [--concurrency 64]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import time
import uuid
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
    stop_and_report,
)
from send_latency import Result, RetryPolicy, run_load

STATES = (
    "TASK_STATE_SUBMITTED",
    "TASK_STATE_WORKING",
    "TASK_STATE_INPUT_REQUIRED",
    "TASK_STATE_COMPLETED",
    "TASK_STATE_FAILED",
    "TASK_STATE_CANCELED",
    "TASK_STATE_REJECTED",
    "TASK_STATE_AUTH_REQUIRED",
)


def dir_size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


async def state_counts(base_url: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    async with httpx.AsyncClient(base_url=base_url, headers=AUTH, timeout=120) as client:
        for state in STATES:
            r = await client.get("/tasks", params={"status": state, "pageSize": 1})
            r.raise_for_status()
            n = int(r.json().get("totalSize", 0))
            if n:
                counts[state.removeprefix("TASK_STATE_")] = n
    return counts


async def wait_settled(base_url: str, timeout_s: float) -> tuple[float, dict[str, int]]:
    start = trio.current_time()
    counts: dict[str, int] = {}
    with trio.move_on_after(timeout_s):
        while True:
            counts = await state_counts(base_url)
            if not counts.get("SUBMITTED") and not counts.get("WORKING"):
                break
            await trio.sleep(1.0)
    return trio.current_time() - start, counts


async def reads(base_url: str, count: int) -> dict[str, Any]:
    """One list (pageSize ``count``), ``GET`` of each listed Task (or of unknown ids
    when the store is empty), then one list of 100. Returns statuses and timings."""
    out: dict[str, Any] = {"get_status": [], "ms": {}}
    async with httpx.AsyncClient(base_url=base_url, headers=AUTH, timeout=120) as client:
        t0 = time.perf_counter()
        r = await client.get("/tasks", params={"pageSize": count})
        out["ms"]["list"] = (time.perf_counter() - t0) * 1000
        out["list_status"] = r.status_code
        body = r.json()
        out["total"] = body.get("totalSize")
        ids = [t["id"] for t in body.get("tasks", [])]
        if not ids:
            ids = [str(uuid.uuid4()) for _ in range(count)]
        times = []
        for task_id in ids:
            t0 = time.perf_counter()
            g = await client.get(f"/tasks/{task_id}")
            times.append((time.perf_counter() - t0) * 1000)
            out["get_status"].append(g.status_code)
        out["ms"]["get_max"] = max(times)
        t0 = time.perf_counter()
        r = await client.get("/tasks", params={"pageSize": 100})
        out["ms"]["list100"] = (time.perf_counter() - t0) * 1000
        out["list100_status"] = r.status_code
    return out


def measure(server: Server, settle_s: float, reads_n: int) -> dict[str, Any]:
    time.sleep(settle_s)
    after_start = server.rss_kib()
    info = trio.run(partial(reads, server.base_url, reads_n))
    time.sleep(settle_s)
    after_reads = server.rss_kib()
    return {"start": after_start, "reads": after_reads, "info": info}


def show(label: str, server: Server, m: dict[str, Any]) -> None:
    s, r, info = m["start"], m["reads"], m["info"]
    print(
        f"{label:<6} ready in {server.startup_s:.2f}s; "
        f"RSS after startup {s['VmRSS'] / 1024:.1f} MiB"
        f" (peak {s['VmHWM'] / 1024:.1f}), after reads {r['VmRSS'] / 1024:.1f} MiB"
        f" (peak {r['VmHWM'] / 1024:.1f}); threads {r.get('Threads')}; "
        f"list total={info['total']} status={info['list_status']} "
        f"{info['ms']['list']:.1f}ms, GET statuses {info['get_status']} "
        f"max {info['ms']['get_max']:.1f}ms, list of 100 {info['ms']['list100']:.1f}ms"
    )


async def count_tasks(base_url: str) -> int:
    async with httpx.AsyncClient(base_url=base_url, headers=AUTH, timeout=120) as client:
        r = await client.get("/tasks", params={"pageSize": 1})
        r.raise_for_status()
        return int(r.json().get("totalSize", 0))


def create(args: argparse.Namespace, work: Path, store: Path) -> None:
    """Fill ``store`` with ``args.tasks`` Tasks and wait until the agent has settled them.

    If the server is killed from outside (seen on shared machines: a broad ``pkill``),
    the kill is reported, a new server is started on the same store and creation goes
    on with the Tasks still missing (the store's ``totalSize`` is the count).
    """
    print(
        f"creating {args.tasks} Tasks ({args.create_mode} sends of {args.text!r}, "
        f"{args.concurrency} connections) ...",
        flush=True,
    )
    res = Result()
    began = time.monotonic()
    server_cpu = 0.0
    cpu0 = cpu_seconds_self()
    created = 0
    for attempt in range(4):
        creator = Server(work, store, label=f"create{attempt}").start(ready_timeout_s=600)
        mark = creator.log_size()
        scpu0 = creator.cpu_seconds()
        try:
            created = trio.run(partial(count_tasks, creator.base_url))
            left = args.create_deadline - (time.monotonic() - began)
            if created < args.tasks and left > 0:
                trio.run(
                    partial(
                        run_load,
                        creator.base_url,
                        total=args.tasks - created,
                        concurrency=args.concurrency,
                        immediate=args.create_mode == "nonblocking",
                        text=args.text,
                        timeout_s=120.0,
                        deadline_s=left,
                        result=res,
                        progress_every=max(1, args.tasks // 20),
                        stop_on_connect_error=True,
                        # a non-blocking send beyond the agent's 128 waiting Tasks is 503
                        retry=RetryPolicy() if args.create_mode == "nonblocking" else None,
                    )
                )
            if creator.alive():
                server_cpu += creator.cpu_seconds() - scpu0
                created = trio.run(partial(count_tasks, creator.base_url))
                elapsed = time.monotonic() - began
                lat = sorted(res.latencies)
                print(
                    f"created {created} Tasks in {elapsed:.1f}s ({created / elapsed:.0f}/s); "
                    f"send errors {sum(res.errors.values())}; "
                    f"reply p50 {fmt_ms(percentile(lat, 50))}ms "
                    f"p99 {fmt_ms(percentile(lat, 99))}ms; reply states {dict(res.states)}; "
                    f"cpu s: server {server_cpu:.0f}, client {cpu_seconds_self() - cpu0:.0f}"
                    + ("; CREATION DEADLINE HIT" if created < args.tasks else "")
                )
                for err, n in res.errors.most_common(5):
                    print(f"  ERROR x{n}: {err}")
                settle_s, counts = trio.run(
                    partial(wait_settled, creator.base_url, args.settle_timeout)
                )
                rss = creator.rss_kib()
                print(
                    f"settled {settle_s:.1f}s after the last reply: states {counts}; "
                    f"creating server RSS {rss['VmRSS'] / 1024:.1f} MiB "
                    f"(peak {rss['VmHWM'] / 1024:.1f})",
                    flush=True,
                )
                return
        except httpx.TransportError as exc:
            try:  # a server told to stop by someone else finishes its shutdown first
                assert creator.proc is not None
                creator.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                raise exc from None
            print(f"  {type(exc).__name__}: the server went away", flush=True)
        finally:
            code = stop_and_report(creator, start=mark)
        print(
            f"  the creating server was killed from outside this script (exit {code}; "
            f"{len(res.latencies)} replies so far); restarting it on the same store",
            flush=True,
        )
    print("  CREATION ABANDONED after 4 outside kills")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--tasks", type=int, default=100_000)
    p.add_argument("--concurrency", type=int, default=64, help="connections while creating")
    p.add_argument("--create-mode", choices=("blocking", "nonblocking"), default="blocking")
    p.add_argument("--text", default="ask: q", help="message text of each created Task")
    p.add_argument("--create-deadline", type=float, default=3600.0, help="s, creation phase")
    p.add_argument("--settle-timeout", type=float, default=600.0, help="s, wait for turns")
    p.add_argument("--settle", type=float, default=3.0, help="s before each RSS reading")
    p.add_argument("--reads", type=int, default=5, help="Tasks to GET")
    p.add_argument("--reuse-store", default=None, help="measure this existing store root")
    p.add_argument("--tmp", default=None)
    p.add_argument("--keep", action="store_true", help="keep the work dir (and the store)")
    args = p.parse_args()

    print(machine_info())
    with Workdir(args.tmp, keep=args.keep) as work:
        print(fsync_probe(work))
        empty = Server(work, work / "store-empty", label="empty").start()
        try:
            m_empty = measure(empty, args.settle, args.reads)
        finally:
            stop_and_report(empty)
        show("empty", empty, m_empty)

        if args.reuse_store:
            store = Path(args.reuse_store)
            print(f"reusing {store} ({dir_size(store) / 2**20:.1f} MiB); no creation phase")
        else:
            store = work / "store-full"
            create(args, work, store)
        print(f"store on disk: {dir_size(store) / 2**20:.1f} MiB")

        full = Server(work, store, label="full").start(ready_timeout_s=600)
        try:
            m_full = measure(full, args.settle, args.reads)
        finally:
            stop_and_report(full)
        show("full", full, m_full)

        n = m_full["info"]["total"] or 0
        for phase in ("start", "reads"):
            diff = m_full[phase]["VmRSS"] - m_empty[phase]["VmRSS"]
            per = f", {diff * 1024 / n:.0f} B per Task" if n else ""
            print(
                f"RSS difference ({'after startup' if phase == 'start' else 'after reads'}): "
                f"{diff / 1024:+.1f} MiB for {n} Tasks{per}"
            )
        if args.keep and not args.reuse_store:
            print(f"store kept at {store} (rerun with --reuse-store {store})")
        elif not args.keep and not args.reuse_store:
            shutil.rmtree(store, ignore_errors=True)


if __name__ == "__main__":
    main()
