"""Durable acceptances per second, with and without group commit.

For each concurrency level (default 1, 16, 64 connections) and each setting of
``TASKPLANE_GROUP_COMMIT`` (1: the store actor batches every waiting op into one
transaction and one fsync; 0: one op per transaction), a fresh server on a fresh
store gets ``--warmup`` sends (not counted), then ``--requests`` measured sends.

Workloads (``--workload``):

* ``ping`` (default): text ``ping``, each send with its own ``messageId``. The
  scripted agent's triage answers ``ping`` with a direct Message (``pong``): intake
  records the dedupe outcome (CLAIM + ACCEPTED, one transaction) and the 200 comes
  after its COMMIT. No Task, no wake, no agent turn: the agent's one-turn-at-a-time
  rate does not enter, so replies/s is the server's durable acceptance rate. After
  each cell ``--replay`` of the measured sends are re-sent (same body) and must get
  their prior answer (the same reply ``messageId``): the outcome was recorded.
* ``tasks``: text ``hello`` with ``returnImmediately``: each accepted send creates a
  Task whose turn the agent runs in the background. At most 128 Tasks wait for the
  agent; beyond that the server answers ``503`` + ``Retry-After: 1`` and the client
  waits and re-sends the same request (``send_latency.RetryPolicy``). Throughput is
  then bounded by the agent's turn rate, whatever the commit setting; after each
  cell the script checks that every Task completed.

Configurations run interleaved (c=1 on, c=1 off, c=16 on, ...) so that drift in the
machine's load hits both settings alike; ``--repeat`` runs the whole table again and
reports the median throughput (and the median of each percentile) of the repeats.

Usage: .venv/bin/python bench/group_commit.py [--repeat 3] [--levels 1,16,64]
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
from send_latency import (
    Result,
    RetryPolicy,
    agent_activity,
    completion_times,
    count_states,
    replay,
    run_load,
    wait_drained,
)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--workload", choices=("ping", "tasks"), default="ping")
    p.add_argument("--requests", type=int, default=2000, help="measured sends per configuration")
    p.add_argument("--levels", default="1,16,64", help="concurrent connections, comma-separated")
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--repeat", type=int, default=1, help="run the table this many times")
    p.add_argument("--timeout", type=float, default=60.0, help="per-request timeout, s")
    p.add_argument("--deadline", type=float, default=300.0, help="max seconds per configuration")
    p.add_argument("--replay", type=int, default=50, help="measured sends re-sent per cell")
    p.add_argument("--max-retries", type=int, default=100, help="tasks: retries per send")
    p.add_argument("--max-retry-wait", type=float, default=5.0, help="tasks: cap on one wait, s")
    p.add_argument("--tmp", default=None)
    p.add_argument("--keep", action="store_true")
    args = p.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    tasks = args.workload == "tasks"
    text = "hello" if tasks else "ping"
    policy = RetryPolicy(max_retries=args.max_retries, max_wait_s=args.max_retry_wait)

    print(machine_info())
    print(f"workload {args.workload}: text {text!r}" + (", returnImmediately" if tasks else ""))
    rates: dict[tuple[int, int], list[float]] = {}
    detail: dict[tuple[int, int], list[Result]] = {}
    problems: Counter[tuple[int, int]] = Counter()  # server warnings/errors per cell
    checks_failed: list[str] = []
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
                            immediate=tasks,
                            text=text,
                            timeout_s=args.timeout,
                            deadline_s=args.deadline,
                            retry=policy if tasks else None,
                        )
                        warm = Result()
                        trio.run(partial(load, total=args.warmup, result=warm))
                        if tasks:
                            trio.run(partial(wait_drained, server.base_url, timeout_s=60))
                        mark = server.log_size()
                        res = Result()
                        cpu0, scpu0 = cpu_seconds_self(), server.cpu_seconds()
                        trio.run(partial(load, total=args.requests, result=res))
                        res.client_cpu = cpu_seconds_self() - cpu0
                        res.server_cpu = server.cpu_seconds() - scpu0
                        ok = res.ok
                        rate = ok / res.elapsed if res.elapsed else float("nan")
                        rates.setdefault((conc, gc), []).append(rate)
                        detail.setdefault((conc, gc), []).append(res)
                        lat = sorted(res.latencies)
                        print(
                            f"group_commit={gc} c={conc:<3} rep={rep} ok={ok} "
                            f"errors={sum(res.errors.values())} {rate:.0f} sends/s "
                            f"p50={fmt_ms(percentile(lat, 50))}ms "
                            f"p99={fmt_ms(percentile(lat, 99))}ms "
                            f"replies {dict(res.kinds)}"
                            + (f" 503s={len(res.refused)}" if tasks else "")
                            + f" (wall {res.elapsed:.2f}s; cpu s: server {res.server_cpu:.1f}, "
                            f"client {res.client_cpu:.1f})"
                            + ("  DEADLINE HIT" if res.timed_out else ""),
                            flush=True,
                        )
                        for err, n in res.errors.most_common(5):
                            print(f"  ERROR x{n}: {err}")
                        want = "task" if tasks else "message"
                        if res.kinds != Counter({want: ok}):
                            checks_failed.append(f"{label}: replies {dict(res.kinds)}")
                        sent, same, other = trio.run(
                            partial(replay, server.base_url, res.answered, sample=args.replay)
                        )
                        if same != sent:
                            checks_failed.append(f"{label}: replay {same}/{sent}, {dict(other)}")
                        check = f"  re-sent {sent}: {same} got their prior answer"
                        if tasks:
                            _, left = trio.run(
                                partial(wait_drained, server.base_url, timeout_s=120)
                            )
                            total, counts = trio.run(partial(count_states, server.base_url))
                            accepted = warm.ok + ok
                            if left or total != accepted or counts != {"COMPLETED": accepted}:
                                checks_failed.append(
                                    f"{label}: {accepted} accepted, store {total} {counts}"
                                )
                            check += f"; store: {total} Tasks {counts}"
                            times = trio.run(
                                partial(completion_times, server.base_url, set(res.task_ids))
                            )
                            check += "\n  " + agent_activity(times)
                        print(check, flush=True)
                    finally:
                        stop_and_report(server, start=mark)
                        events, other_lines = server.log_problems(start=mark)
                        problems[(conc, gc)] += sum(events.values()) + len(other_lines)

    print()
    what = (
        "durable Task-creating non-blocking sends/s (503s waited out and retried)"
        if tasks
        else "durable acceptances/s (ping: direct Message, CLAIM + ACCEPTED committed)"
    )
    print(f"{what}, {args.requests} sends per cell, median of {args.repeat}:")
    header = (
        f"{'connections':>11} | {'grouped (=1)':>12} | {'ungrouped (=0)':>14} | {'ratio':>5} | "
        f"{'p50 ms on/off':>13} | {'p99 ms on/off':>15} | errors on/off"
    )
    print(header + (" | 503s on/off | e2e p99 ms on/off" if tasks else ""))
    for conc in levels:
        on, off = rates.get((conc, 1), []), rates.get((conc, 0), [])
        r_on = statistics.median(on) if on else float("nan")
        r_off = statistics.median(off) if off else float("nan")

        def pct(gc: int, q: float, conc: int = conc, e2e: bool = False) -> str:
            vals = [
                percentile(sorted(r.e2e if e2e else r.latencies), q)
                for r in detail.get((conc, gc), [])
            ]
            return fmt_ms(statistics.median(vals)) if vals else "nan"

        errs = [sum(sum(r.errors.values()) for r in detail.get((conc, gc), [])) for gc in (1, 0)]
        row = (
            f"{conc:>11} | {r_on:>12.0f} | {r_off:>14.0f} | {r_on / r_off:>5.2f} | "
            f"{pct(1, 50) + '/' + pct(0, 50):>13} | {pct(1, 99) + '/' + pct(0, 99):>15} | "
            f"{errs[0]}/{errs[1]}"
        )
        if tasks:
            refused = [
                statistics.median(len(r.refused) for r in detail.get((conc, gc), [])) or 0
                for gc in (1, 0)
            ]
            row += (
                f" | {refused[0]:.0f}/{refused[1]:.0f} | "
                f"{pct(1, 99, e2e=True)}/{pct(0, 99, e2e=True)}"
            )
        print(row)
    for conc in levels:
        reps = [", ".join(f"{r:.0f}" for r in rates.get((conc, gc), [])) for gc in (1, 0)]
        print(f"  repeats c={conc}: grouped {reps[0]}; ungrouped {reps[1]}")
    if any(problems.values()):
        print(
            "server warnings/errors while measuring: "
            + ", ".join(f"c={c} gc={g}: {n}" for (c, g), n in sorted(problems.items()) if n)
        )
    else:
        print("server warnings/errors while measuring: none")
    verdict = "all passed" if not checks_failed else "FAILED: " + "; ".join(checks_failed)
    print(f"checks: {verdict}")


if __name__ == "__main__":
    main()
