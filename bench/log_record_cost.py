"""CPU per log record, on the logging thread and in the whole process, per revision.

In-process and single-purpose, so other load on the machine disturbs it far less
than a server benchmark (``bench/log_cost.py``): a child process per checkout
configures that checkout's ``taskplane.logging_setup`` onto a file, then logs what one
non-blocking send logs at INFO (``a2a_send_accepted``, ``http_request``, two
``task_state_changed``, ``agent_woken``: the same fields) ``--sends`` times, pausing
0.5 ms every 10 sends as the event loop waits for I/O (the writer thread of a
queueing handler runs then). It reports, per record, the CPU of the logging thread
(the event loop's share) and of the whole process until every line is written.
Children alternate (order rotating), median of ``--repeat``.

``--src LABEL=CHECKOUT`` (repeatable; default this checkout) names the revisions.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, default_python, machine_info
from compare import loadavg, revision_of

TASK_ID = "9d32ab0c-eb98-4b36-bcc4-e26ab756f89f"
CONTEXT_ID = "3bbad006-1078-4e62-a4c9-9dcc89aadad9"


def child(checkout: Path, sends: int, out: Path) -> None:
    sys.path.insert(0, str(checkout))
    import logging

    from taskplane import logging_setup

    stream = out.open("w")
    saved, sys.stderr = sys.stderr, stream
    handler = logging_setup.configure("INFO")
    sys.stderr = saved
    http = logging.getLogger("taskplane.http")
    owner = logging.getLogger("taskplane.actors.owner")
    wake = logging.getLogger("taskplane.actors.wake")

    def one_send() -> None:
        http.info(
            "send %s",
            "created",
            extra={
                "event": "a2a_send_accepted",
                "disposition": "created",
                "taskId": TASK_ID,
                "contextId": CONTEXT_ID,
                "state": "TASK_STATE_SUBMITTED",
            },
        )
        http.log(
            logging.INFO,
            "%s %s %d",
            "POST",
            "/message:send",
            200,
            extra={
                "event": "http_request",
                "method": "POST",
                "route": "/message:send",
                "status": 200,
                "durationMs": 4.63,
                "principal": "bench",
                "taskId": TASK_ID,
                "reason": None,
            },
        )
        for before, after in (("SUBMITTED", "WORKING"), ("WORKING", "COMPLETED")):
            owner.info(
                "task %s: %s -> %s",
                TASK_ID,
                f"TASK_STATE_{before}",
                f"TASK_STATE_{after}",
                extra={
                    "event": "task_state_changed",
                    "taskId": TASK_ID,
                    "contextId": CONTEXT_ID,
                    "from": f"TASK_STATE_{before}",
                    "to": f"TASK_STATE_{after}",
                },
            )
            if before == "SUBMITTED":
                wake.info(
                    "agent woken for task %s",
                    TASK_ID,
                    extra={
                        "event": "agent_woken",
                        "taskId": TASK_ID,
                        "sessionId": "task-7d430fd6",
                        "delivery": 1,
                    },
                )

    thread0, process0 = time.thread_time(), time.process_time()
    for n in range(sends):
        one_send()
        if n % 10 == 0:
            time.sleep(0.0005)
    thread1 = time.thread_time()
    logging.shutdown()  # what the process does at exit: every line written
    process1 = time.process_time()
    stream.close()
    records = sends * 5
    lines = sum(1 for _ in out.open())
    dropped = handler.statistics().dropped if hasattr(handler, "statistics") else None
    print(
        json.dumps(
            {
                "loop_us_per_record": (thread1 - thread0) / records * 1e6,
                "process_us_per_record": (process1 - process0) / records * 1e6,
                "lines": lines,
                "records": records,
                "dropped": dropped,
            }
        )
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--src", action="append", default=[], help="LABEL=CHECKOUT (repeatable)")
    p.add_argument("--sends", type=int, default=4000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    p.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--child-out", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args.child, args.sends, args.child_out)
        return
    sources: dict[str, Path] = {}
    for spec in args.src or [f"this={REPO}"]:
        label, _, path = spec.partition("=")
        sources[label] = Path(path).resolve()
    runs: dict[str, list[dict[str, float]]] = {label: [] for label in sources}
    loads = []
    with tempfile.TemporaryDirectory(prefix="tp-logrecord-") as tmp:
        labels = list(sources)
        for rep in range(args.repeat):
            for label in labels[rep % len(labels) :] + labels[: rep % len(labels)]:
                loads.append(loadavg())
                cmd = [default_python(), __file__, "--child", str(sources[label])]
                cmd += ["--sends", str(args.sends), "--child-out", f"{tmp}/{label}.log"]
                env = {**os.environ, "PYTHONPATH": str(sources[label])}
                done = subprocess.run(
                    cmd, capture_output=True, text=True, check=True, cwd=sources[label], env=env
                )
                runs[label].append(json.loads(done.stdout.splitlines()[-1]))
    started = time.strftime("%Y%m%dT%H%MZ", time.gmtime())
    lines = [
        "# log_record_cost.py: CPU per log record (what one non-blocking send logs at INFO)",
        "",
        f"- {machine_info()}",
        f"- load average before each child: {'; '.join(loads)}",
        f"- {args.sends} sends x 5 records per child, median of {args.repeat}, alternated",
        "- sources: "
        + ", ".join(
            f"`{label}` = "
            + ("this checkout" if path == REPO else revision_of(path).replace("?", "not git"))
            for label, path in sources.items()
        ),
        "",
        "| source | logging thread, us per record | whole process, us per record"
        " | lines written / records | dropped |",
        "| --- | --- | --- | --- | --- |",
    ]
    for label, rs in runs.items():
        loop = statistics.median(r["loop_us_per_record"] for r in rs)
        proc = statistics.median(r["process_us_per_record"] for r in rs)
        lines.append(
            f"| {label} | **{loop:.2f}** | {proc:.2f} | {rs[-1]['lines']} / {rs[-1]['records']}"
            f" | {rs[-1]['dropped'] if rs[-1]['dropped'] is not None else '-'} |"
        )
    args.out.mkdir(parents=True, exist_ok=True)
    md = args.out / f"log-record-cost-{started}.md"
    md.write_text("\n".join(lines) + "\n")
    md.with_suffix(".json").write_text(json.dumps({"runs": runs, "loads": loads}, indent=2))
    print(md.read_text())
    print(f"wrote {md}")


if __name__ == "__main__":
    main()
