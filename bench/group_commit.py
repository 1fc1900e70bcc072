"""Durable non-blocking sends per second, with and without group commit.

For each concurrency level (default 1, 16, 64 connections) and each setting of
``TASKPLANE_GROUP_COMMIT`` (1: the store actor batches every waiting op into one
transaction and one fsync; 0: one op per transaction), a fresh server on a fresh
store gets ``--warmup`` sends (not counted), then ``--requests`` non-blocking sends
(``returnImmediately``). Each reply comes after the COMMIT holding the accepted
Task, so replies/s is durable sends/s. The scripted agent's turns for those Tasks
run in the background on the same store and compete with the sends, as in real use.

Configurations run interleaved (c=1 on, c=1 off, c=16 on, ...) so that drift in the
machine's load hits both settings alike; ``--repeat`` runs the whole table again and
reports the median throughput of the repeats.

Usage: .venv/bin/python bench/group_commit.py [--requests 2000] [--levels 1,16,64]
"""

from __future__ import annotations

import argparse
import statistics
from collections import Counter
from functools import partial
from pathlib import Path

import trio
from _common import (
    Server,
    Workdir,
    cpu_seconds_self,
    fmt_ms,
    fsync_probe,
    machine_info,
    percentile,
    stop_and_report,
)
from send_latency import Result, run_load, wait_drained


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--requests", type=int, default=2000, help="measured sends per configuration")
    p.add_argument("--levels", default="1,16,64", help="concurrent connections, comma-separated")
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--repeat", type=int, default=1, help="run the table this many times")
    p.add_argument("--text", default="hello")
    p.add_argument("--timeout", type=float, default=60.0, help="per-request timeout, s")
    p.add_argument("--deadline", type=float, default=300.0, help="max seconds per configuration")
    p.add_argument("--tmp", default=None)
    p.add_argument("--keep", action="store_true")
    args = p.parse_args()
    levels = [int(x) for x in args.levels.split(",")]

    print(machine_info())
    rates: dict[tuple[int, int], list[float]] = {}
    detail: dict[tuple[int, int], list[Result]] = {}
    overflow: Counter[tuple[int, int]] = Counter()
    with Workdir(args.tmp, keep=args.keep) as work:
        print(fsync_probe(work))
        for rep in range(args.repeat):
            for conc in levels:
                for gc in (1, 0):
                    label = f"gc{gc}-c{conc}-r{rep}"
                    server = Server(
                        work, Path(work) / f"store-{label}", group_commit=bool(gc), label=label
                    ).start()
                    mark = 0
                    try:
                        load = partial(
                            run_load,
                            server.base_url,
                            concurrency=conc,
                            immediate=True,
                            text=args.text,
                            timeout_s=args.timeout,
                            deadline_s=args.deadline,
                        )
                        trio.run(partial(load, total=args.warmup, result=None))
                        trio.run(partial(wait_drained, server.base_url, timeout_s=60))
                        mark = server.log_size()
                        res = Result()
                        cpu0, scpu0 = cpu_seconds_self(), server.cpu_seconds()
                        trio.run(partial(load, total=args.requests, result=res))
                        res.client_cpu = cpu_seconds_self() - cpu0
                        res.server_cpu = server.cpu_seconds() - scpu0
                        ok = len(res.latencies)
                        rate = ok / res.elapsed if res.elapsed else float("nan")
                        rates.setdefault((conc, gc), []).append(rate)
                        detail.setdefault((conc, gc), []).append(res)
                        lat = sorted(res.latencies)
                        print(
                            f"group_commit={gc} c={conc:<3} rep={rep} ok={ok} "
                            f"errors={sum(res.errors.values())} {rate:.0f} sends/s "
                            f"p50={fmt_ms(percentile(lat, 50))}ms "
                            f"p99={fmt_ms(percentile(lat, 99))}ms "
                            f"(wall {res.elapsed:.2f}s; cpu s: server {res.server_cpu:.1f}, "
                            f"client {res.client_cpu:.1f})"
                            + ("  DEADLINE HIT" if res.timed_out else "")
                        )
                        for err, n in res.errors.most_common(5):
                            print(f"  ERROR x{n}: {err}")
                    finally:
                        stop_and_report(server, start=mark)
                        events, _ = server.log_problems(start=mark)
                        overflow[(conc, gc)] += events.get("warning:a2a_wake_overflow", 0)

    print()
    print(f"durable non-blocking sends/s, {args.requests} sends per cell, median of {args.repeat}:")
    print(
        f"{'connections':>11} | {'grouped (=1)':>12} | {'ungrouped (=0)':>14} | {'ratio':>5} | "
        f"{'p50 ms on/off':>13} | {'p99 ms on/off':>15} | errors on/off"
    )
    for conc in levels:
        on, off = rates.get((conc, 1), []), rates.get((conc, 0), [])
        r_on = statistics.median(on) if on else float("nan")
        r_off = statistics.median(off) if off else float("nan")

        def pct(gc: int, q: float, conc: int = conc) -> str:
            vals = [percentile(sorted(r.latencies), q) for r in detail.get((conc, gc), [])]
            return fmt_ms(statistics.median(vals)) if vals else "nan"

        errs = [sum(sum(r.errors.values()) for r in detail.get((conc, gc), [])) for gc in (1, 0)]
        print(
            f"{conc:>11} | {r_on:>12.0f} | {r_off:>14.0f} | {r_on / r_off:>5.2f} | "
            f"{pct(1, 50) + '/' + pct(0, 50):>13} | {pct(1, 99) + '/' + pct(0, 99):>15} | "
            f"{errs[0]}/{errs[1]}"
        )
    if any(overflow.values()):
        print(
            "wake-queue overflows (Tasks accepted but never run by the agent; "
            "stay SUBMITTED): "
            + ", ".join(f"c={c} gc={g}: {n}" for (c, g), n in sorted(overflow.items()) if n)
        )


if __name__ == "__main__":
    main()
