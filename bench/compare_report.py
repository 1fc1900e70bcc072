"""Markdown and JSON reports of ``bench/compare.py`` (tables, ratios, targets)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

TITLES = {
    "send-nonblocking": "Non-blocking send (returnImmediately, unique messageIds, no retries)",
    "send-blocking": "Blocking send (reply when the Task is COMPLETED)",
    "get": "GET /tasks/{id}",
    "list": "GET /tasks?pageSize=50 with the seeded Tasks stored",
}


def _cell(m: dict[str, Any] | None) -> str:
    if m is None:
        return "n/a"
    text = f"**{m['ok_per_s']:.0f}**"
    if m["refused_per_s"] >= 0.5:
        text += f" (503: {m['refused_per_s']:.0f})"
    if m["other"] or m["errors"]:
        text += f" (other: {m['other']}, errors: {m['errors']})"
    text += f"<br>{m['p50_ms']:.1f} / {m['p99_ms']:.1f} ms, cpu {m['server_cpu_cores']:.2f}"
    if "db_cpu_cores" in m:  # taskplane on PostgreSQL: the database server's CPU apart
        text += f" + db {m['db_cpu_cores']:.2f}"
    return text


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}" if a is not None and b else "n/a"


def _median(result: dict[str, Any], workload: str, conns: int, server: str) -> Any:
    cell = result["workloads"].get(workload, {}).get(str(conns), {}).get(server)
    return None if cell is None else cell["median"]


def targets(result: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(target, measured, ratio, verdict) for each issue target this run measures."""
    rows: list[tuple[str, str, str, str]] = []
    tp = _median(result, "send-nonblocking", 16, "taskplane")
    mem = _median(result, "send-nonblocking", 16, "sdk-memory")
    sql = _median(result, "send-nonblocking", 16, "sdk-sqlite")

    def verdict(ok: bool) -> str:
        return "met" if ok else "**missed**"

    # Results from before the setting was recorded ran one turn at a time.
    concurrency = result["config"].get("agent_concurrency", 1)
    at = f" (measured at agent concurrency {concurrency})"
    if tp and mem:
        r = tp["ok_per_s"] / mem["ok_per_s"]
        for want, goal in ((1, 0.4), (16, 1.0)):
            rows.append(
                (
                    f"non-blocking c=16, agent concurrency {want}: accepted >= {goal}x sdk-memory",
                    f"{tp['ok_per_s']:.0f} vs {mem['ok_per_s']:.0f}/s",
                    f"{r:.2f}",
                    verdict(r >= goal) if concurrency == want else "not this run" + at,
                )
            )
    if tp and sql:
        r = tp["ok_per_s"] / sql["ok_per_s"]
        rows.append(
            (
                "non-blocking c=16, agent concurrency 16: accepted >= 5x sdk-sqlite",
                f"{tp['ok_per_s']:.0f} vs {sql['ok_per_s']:.0f}/s",
                f"{r:.2f}",
                verdict(r >= 5) if concurrency == 16 else "not this run" + at,
            )
        )
    btp = _median(result, "send-blocking", 16, "taskplane")
    bmem = _median(result, "send-blocking", 16, "sdk-memory")
    if btp and bmem:
        r = btp["p99_ms"] / bmem["p99_ms"]
        rows.append(
            (
                "blocking c=16: p99 <= 0.5x sdk-memory p99",
                f"{btp['p99_ms']:.1f} vs {bmem['p99_ms']:.1f} ms",
                f"{r:.2f}",
                verdict(r <= 0.5),
            )
        )
    for workload in ("send-nonblocking", "send-blocking"):
        sqlite = _median(result, workload, 16, "taskplane")
        pg1 = _median(result, workload, 16, "taskplane-pg")
        pg2 = _median(result, workload, 16, "taskplane-pg2")
        base1 = _median(result, workload, 16, "taskplane-pg-base")
        base2 = _median(result, workload, 16, "taskplane-pg2-base")
        for label, a, b, goal in (
            ("one PostgreSQL node >= 0.6x one SQLite node", pg1, sqlite, 0.6),
            ("two PostgreSQL nodes >= 1.3x one PostgreSQL node", pg2, pg1, 1.3),
            ("baseline: two PostgreSQL nodes >= 1.3x one PostgreSQL node", base2, base1, 1.3),
        ):
            if a and b:
                r = a["ok_per_s"] / b["ok_per_s"]
                rows.append(
                    (
                        f"{workload} c=16: {label}",
                        f"{a['ok_per_s']:.0f} vs {b['ok_per_s']:.0f}/s",
                        f"{r:.2f}",
                        verdict(r >= goal),
                    )
                )
    over = result.get("overload")
    if over and "10x" in over:
        peak = max(
            [over["sustainable_per_s"]]
            + [v["median"]["ok_per_s"] for k, v in over.items() if k.endswith("x")]
        )
        got = over["10x"]["median"]["ok_per_s"]
        rows.append(
            (
                "10x overload, no client retries: accepted >= 80% of peak",
                f"{got:.0f} vs peak {peak:.0f}/s",
                f"{got / peak:.2f}",
                verdict(got >= 0.8 * peak),
            )
        )
    return rows


def markdown(result: dict[str, Any], *, quick: bool) -> str:
    cfg = result["config"]
    lines = [
        "# compare.py: taskplane, a2a-sdk reference server, our stack's ceiling",
        "",
        "**QUICK (smoke) RUN: durations too short for figures.**" if quick else "",
        f"- {result['machine']}",
        f"- {result['fsync']}",
        f"- load average before {result['load_before']}, after {result['load_after']}"
        f" ({result['started']} to {result['finished']})",
        f"- {cfg['duration']:g} s per cell after {cfg['warmup']:g} s of warm-up load (send"
        f" workloads), median of {cfg['repeat']}, servers alternated; wrk, no client retries;"
        f" list workload with {cfg['seed_tasks']} seeded Tasks",
        f"- taskplane's agent runs {cfg.get('agent_concurrency', 1)} turn(s) at once"
        " (`A2A_AGENT_CONCURRENCY`)",
        "- each cell: **2xx/s** (503/s apart), then p50 / p99 latency of all responses and"
        " the server's CPU (cores) while measured",
    ]
    if result.get("postgres"):
        lines.append(
            f"- taskplane-pg / taskplane-pg2: 1 / 2 nodes on one database of a throwaway"
            f" {result['postgres']} server on this machine (unix socket, default durability);"
            " one wrk per node, connections split evenly, counts summed, p50 weighted, p99"
            " the highest node's; `+ db`: the database server's CPU (cores)"
        )
    lines.append("")
    servers = cfg["servers"]
    for workload, cells in result["workloads"].items():
        lines += [f"## {TITLES.get(workload, workload)}", ""]
        head = ["connections", *servers]
        if "taskplane" in servers:
            head += [f"taskplane / {s}" for s in servers if s != "taskplane"]
        lines += ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
        for conns, by_server in cells.items():
            row = [conns] + [_cell(by_server.get(s, {}).get("median")) for s in servers]
            if "taskplane" in servers:
                tp = by_server["taskplane"]["median"]["ok_per_s"]
                row += [
                    _ratio(tp, by_server[s]["median"]["ok_per_s"])
                    for s in servers
                    if s != "taskplane"
                ]
            lines.append("| " + " | ".join(row) + " |")
        lines.append("")
    over = result.get("overload")
    if over:
        lines += _overload_lines(over)
        if over.get("baseline"):  # --baseline-src: the same levels, same run, alternated
            base = {k: v for k, v in over.items() if not k.endswith("x") and k != "baseline"}
            lines += ["### The baseline checkout at the same levels", ""]
            lines += _overload_lines({**base, **over["baseline"]})[2:]
    rows = targets(result)
    if rows:
        lines += [
            "## Targets",
            "",
            "| target | measured | ratio | verdict |",
            "| --- | --- | --- | --- |",
        ]
        lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows]
        lines.append("")
    return "\n".join(line for line in lines if line is not None)


def write_reports(result: dict[str, Any], out: Path, stamp: str, *, quick: bool) -> Path:
    """Write ``compare-<stamp>[-quick].md`` and ``.json`` under ``out``; the .md path."""
    out.mkdir(parents=True, exist_ok=True)
    base = out / f"compare-{stamp}{'-quick' if quick else ''}"
    base.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    md = base.with_suffix(".md")
    md.write_text(markdown(result, quick=quick))
    return md


def _overload_lines(over: dict[str, Any]) -> list[str]:
    """The goodput-under-overload table (open-loop levels; older closed-loop results
    have ``delay_ms`` instead of a target rate)."""
    sustainable = over["sustainable_per_s"]
    if not over.get("open_loop"):
        head = (
            f"Sustainable rate: {sustainable:.0f} Tasks/s (blocking sends at 16 connections)."
            f" Closed loop: {over.get('connections')} connections, each pausing `delay` ms"
            " before each request."
        )
    else:
        head = (
            f"Sustainable rate (1x): {sustainable:.0f} Tasks/s (blocking sends at 16"
            " connections). Open loop: each level offers its target rate on a fixed"
            " schedule whatever the latency, from max(64, target x"
            f" {over['window_s']:g} s) connections; `late`: sends more than 10 ms past"
            " due because every connection still waited for its answer, so offered/s"
            " below target means the server held the connections (pushed back), with"
            " the generator keeping its schedule wherever a connection was free."
        )
    lines = [
        "## Goodput under overload (taskplane, non-blocking sends, no retries)",
        "",
        head,
        "",
        "| load | target/s | connections | offered/s | accepted/s | accepted / sustainable"
        " | 503/s | other/s | errors | late | p50 / p99 ms | server cpu |",
        "|" + " --- |" * 12,
    ]
    for key, v in over.items():
        if not key.endswith("x"):
            continue
        m = v["median"]
        target = v.get("target_per_s")
        lines.append(
            f"| {key} | {f'{target:.0f}' if target else '-'} |"
            f" {v.get('connections', over.get('connections'))} |"
            f" {m['responses_per_s']:.0f} | **{m['ok_per_s']:.0f}** |"
            f" {m['ok_per_s'] / sustainable:.2f} | {m['refused_per_s']:.0f} |"
            f" {m.get('other_per_s', 0):.0f} | {m.get('errors', 0)} | {m.get('late', '-')} |"
            f" {m['p50_ms']:.1f} / {m['p99_ms']:.1f} | {m['server_cpu_cores']:.2f} |"
        )
    lines.append("")
    return lines
