"""What the default log level costs: non-blocking sends at INFO versus WARNING.

At ``TASKPLANE_LOG_LEVEL=INFO`` (the default) every request writes an ``http_request``
line and every Task state change a ``task_state_changed`` line; at ``WARNING`` neither
is written. This script starts one ``taskplane serve`` per checkout and level, drives
each with the same ``wrk`` load as ``bench/compare.py``'s non-blocking send workload
(``returnImmediately``, a unique ``messageId`` per send, no retries; only 2xx count),
servers alternated with the order rotating each repeat, and reports per checkout the
INFO/WARNING ratio of accepted sends per second (median of ``--repeat``), and the
server's CPU per accepted send, all threads and the event loop's thread alone (CPU
time is less disturbed than throughput by other load on the machine).

``--src LABEL=CHECKOUT`` (repeatable) compares revisions in the same run (default: this
checkout, labelled ``this``); a second checkout of an older revision can be made with
``git archive REV | tar -x -C DIR``. The load average is recorded before every cell;
on a shared machine the figures are indicative only.

Writes ``bench/results/log-cost-<UTC time>.md`` and ``.json``. Everything listens on
127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import AUTH, REPO, TOKEN, Server, Workdir, machine_info, raise_fd_limit
from compare import ensure_wrk, loadavg, median_of, revision_of, wrk

BENCH = Path(__file__).resolve().parent
DROPPED_METRIC = "taskplane_log_records_dropped_total"


def _sources(specs: list[str]) -> dict[str, Path]:
    if not specs:
        return {"this": REPO}
    out: dict[str, Path] = {}
    for spec in specs:
        label, sep, path = spec.partition("=")
        if not sep or not label or not path:
            raise SystemExit(f"--src takes LABEL=CHECKOUT, not {spec!r}")
        out[label] = Path(path).resolve()
    return out


def _dropped(server: Server) -> float | None:
    """The server's dropped-log-record counter (None when it has none: older builds)."""
    r = httpx.get(f"{server.base_url}/metrics", headers=AUTH, timeout=10)
    for line in r.text.splitlines():
        if line.startswith(DROPPED_METRIC + " "):
            return float(line.split()[1])
    return None


def _loop_cpu_s(server: Server) -> float:
    """CPU seconds of the server's main thread (the trio event loop) so far."""
    stat = Path(f"/proc/{server.pid}/task/{server.pid}/stat").read_text()
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _log_lines(server: Server) -> int:
    try:
        with server.log_path.open("rb") as f:
            return sum(1 for _ in f)
    except OSError:
        return 0


def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    sources = _sources(args.src)
    servers: dict[str, Server] = {}
    for label, checkout in sources.items():
        for level in args.levels:
            name = f"{label}-{level}"
            home = workdir / name
            home.mkdir()
            servers[name] = Server(
                home,
                home / "store",
                label=name,
                cwd=checkout,
                extra_env={"TASKPLANE_LOG_LEVEL": level},
            )
    cells: dict[str, list[dict[str, Any]]] = {name: [] for name in servers}
    kw: dict[str, Any] = dict(immediate=True, conns=args.connections)
    try:
        for server in servers.values():
            server.start()
        names = list(servers)
        for name in names:  # warm-up: every store and wake queue in its steady state
            wrk(servers[name], "send", "/message:send", token=TOKEN, duration_s=args.warmup, **kw)
        for rep in range(args.repeat):
            order = names[rep % len(names) :] + names[: rep % len(names)]
            for name in order:
                time.sleep(args.settle)
                server = servers[name]
                wrk(server, "send", "/message:send", token=TOKEN, duration_s=args.warmup, **kw)
                load = loadavg()
                lines_before = _log_lines(server)
                loop_before = _loop_cpu_s(server)
                run_ = wrk(
                    server, "send", "/message:send", token=TOKEN, duration_s=args.duration, **kw
                )
                run_["loop_cpu_s"] = _loop_cpu_s(server) - loop_before
                run_["load_before"] = load
                run_["log_lines"] = _log_lines(server) - lines_before
                cells[name].append(run_)
                print(
                    f"  repeat {rep + 1} {name}: {run_['ok_per_s']:.0f}/s"
                    f" (p99 {run_['p99_ms']:.1f} ms, cpu {run_['server_cpu_cores']:.2f},"
                    f" load {load})",
                    flush=True,
                )
        dropped = {name: _dropped(server) for name, server in servers.items()}
    finally:
        for server in servers.values():
            server.stop()
    out: dict[str, Any] = {
        "sources": {
            label: (
                "this checkout"
                if path == REPO
                else revision_of(path).replace("?", "not a git checkout")
            )
            for label, path in sources.items()
        },
        "cells": {},
    }
    for name, runs in cells.items():
        med = median_of(runs)
        med["log_lines_per_s"] = statistics.median(r["log_lines"] / args.duration for r in runs)
        # CPU per accepted send: less sensitive than 2xx/s to other load on the machine
        med["cpu_ms_per_send"] = statistics.median(
            1000 * r["server_cpu_cores"] / r["ok_per_s"] for r in runs if r["ok_per_s"]
        )
        med["loop_cpu_ms_per_send"] = statistics.median(
            1000 * r["loop_cpu_s"] / r["raw"]["ok"] for r in runs if r["raw"]["ok"]
        )
        out["cells"][name] = {"median": med, "runs": runs, "log_records_dropped": dropped[name]}
    return out


def write_report(result: dict[str, Any], out_dir: Path, stamp: str) -> Path:
    cfg = result["config"]
    levels = cfg["levels"]
    lines = [
        "# log_cost.py: non-blocking sends at INFO versus WARNING",
        "",
        f"- {result['machine']}",
        f"- load average before {result['load_before']}, after {result['load_after']}"
        f" ({result['started']} to {result['finished']}); before each cell: see the runs",
        f"- {cfg['duration']:g} s per cell after {cfg['warmup']:g} s of warm-up load,"
        f" {cfg['connections']} connections, median of {cfg['repeat']}, servers alternated"
        f" (order rotating); agent concurrency {cfg['agent_concurrency']}"
        " (`A2A_AGENT_CONCURRENCY`)",
        "- sources: " + ", ".join(f"`{label}` = {rev}" for label, rev in result["sources"].items()),
        "- a shared machine: the figures are indicative",
        "",
        "| source | level | 2xx/s | p50 / p99 ms | server CPU | CPU ms per send"
        " (all threads / event loop) | log lines/s | records dropped |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for label in result["sources"]:
        for level in levels:
            cell = result["cells"][f"{label}-{level}"]
            med = cell["median"]
            dropped = cell["log_records_dropped"]
            lines.append(
                f"| {label} | {level} | **{med['ok_per_s']:.0f}** |"
                f" {med['p50_ms']:.1f} / {med['p99_ms']:.1f} | {med['server_cpu_cores']:.2f} |"
                f" {med['cpu_ms_per_send']:.3f} / {med['loop_cpu_ms_per_send']:.3f} |"
                f" {med['log_lines_per_s']:.0f} | {'-' if dropped is None else f'{dropped:g}'} |"
            )
    if len(levels) == 2:
        lines += [
            "",
            f"| source | {levels[0]} / {levels[1]}: 2xx/s | {levels[0]} - {levels[1]}:"
            " CPU ms per send, all threads | the same, event loop |",
            "| --- | --- | --- | --- |",
        ]
        for label in result["sources"]:
            a, b = (result["cells"][f"{label}-{lv}"]["median"] for lv in levels)
            lines.append(
                f"| {label} | **{a['ok_per_s'] / b['ok_per_s']:.2f}** |"
                f" {a['cpu_ms_per_send'] - b['cpu_ms_per_send']:+.3f} |"
                f" {a['loop_cpu_ms_per_send'] - b['loop_cpu_ms_per_send']:+.3f} |"
            )
    lines += ["", "Runs (2xx/s, load average before the cell):", ""]
    for name, cell in result["cells"].items():
        runs = ", ".join(f"{r['ok_per_s']:.0f} ({r['load_before']})" for r in cell["runs"])
        lines.append(f"- {name}: {runs}")
    out_dir.mkdir(parents=True, exist_ok=True)
    md = out_dir / f"log-cost-{stamp}.md"
    md.write_text("\n".join(lines) + "\n")
    md.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    return md


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--src", action="append", default=[], help="LABEL=CHECKOUT (repeatable)")
    p.add_argument("--levels", default="INFO,WARNING")
    p.add_argument("--duration", type=float, default=5.0, help="seconds measured per cell")
    p.add_argument("--warmup", type=float, default=1.0, help="seconds of load before each cell")
    p.add_argument("--settle", type=float, default=1.0, help="idle seconds before each cell")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--connections", type=int, default=16)
    p.add_argument("--out", type=Path, default=BENCH / "results")
    p.add_argument("--tmp", default=None)
    p.add_argument("--keep", action="store_true")
    args = p.parse_args()
    args.levels = [lv.strip().upper() for lv in args.levels.split(",") if lv.strip()]
    ensure_wrk()
    raise_fd_limit(4096)
    started = _dt.datetime.now(_dt.UTC)
    result: dict[str, Any] = {
        "machine": machine_info(),
        "load_before": loadavg(),
        "started": started.isoformat(timespec="seconds"),
        "config": {
            "levels": args.levels,
            "duration": args.duration,
            "warmup": args.warmup,
            "settle": args.settle,
            "repeat": args.repeat,
            "connections": args.connections,
            "agent_concurrency": int(os.environ.get("A2A_AGENT_CONCURRENCY") or 1),
        },
    }
    print(result["machine"], flush=True)
    with Workdir(args.tmp, keep=args.keep, prefix="tp-logcost-") as workdir:
        result.update(run(args, workdir))
    result["load_after"] = loadavg()
    result["finished"] = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    md = write_report(result, args.out, started.strftime("%Y%m%dT%H%MZ"))
    print(md.read_text())
    print(f"wrote {md} and {md.with_suffix('.json')}")


if __name__ == "__main__":
    main()
