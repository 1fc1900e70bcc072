"""Restart time with a large store: process start to ``/readyz`` 200.

Seeds a fresh store straight through the store's own SQLite modules (fast: one
transaction, no server): ``--tasks`` Tasks (default 100,000), each with
``--activations`` activations (default 2: the first message and one continuation),
each activation with the journal records a finished turn leaves (CLAIM, ACCEPTED,
WOKEN, WAKE_DELIVERED, and a second WAKE_DELIVERED for a retried turn: 5 rows), so
the journal holds ``tasks * activations * 5`` rows (default 1,000,000); plus the
origins and context mappings acceptance writes. Every Task is COMPLETED within the
retention window (nothing is compacted away), except ``--pending`` WORKING ones
whose newest activation is accepted and not yet woken: those are replayed at
startup and run by the scripted agent.

Then starts ``python -m taskplane serve`` on that store ``--repeat`` times (each a
restart of the same store) and measures, on the client's monotonic clock from the
process start, when the Agent Card first answers and when ``GET /readyz`` first
answers 200 (polled every 20 ms). The target: ready <= 5 s.

Usage: .venv/bin/python bench/restart_ready.py [--tasks 100000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import subprocess
import time
import uuid
from pathlib import Path

import httpx
from _common import PRINCIPAL, REPO, Server, Workdir, fsync_probe, machine_info, stop_and_report

ROWS_PER_ACTIVATION = 5
TARGET_S = 5.0


def seed(store: Path, tasks: int, activations: int, pending: int) -> dict[str, float]:
    """Write the store (see the module docstring); return counts and the seconds taken."""
    import attrs

    from taskplane.model.enums import Role, TaskState
    from taskplane.model.lifecycle import new_task
    from taskplane.model.types import Message, Part, TaskStatus
    from taskplane.scope import Scope
    from taskplane.store.records import activation_id, provider_key
    from taskplane.store.sqlite import tasks as task_rows
    from taskplane.store.sqlite.database import Database

    started = time.monotonic()
    db = Database(store)
    conn: sqlite3.Connection = db.conn
    scope = Scope("", PRINCIPAL)
    now = int(time.time() * 1000)
    base = now - 3_600_000  # an hour ago: well within the retention window
    journal: list[tuple[object, ...]] = []
    origins: list[tuple[object, ...]] = []
    contexts: list[tuple[object, ...]] = []
    try:
        conn.execute("BEGIN")
        for i in range(tasks):
            task_id, context_id = str(uuid.uuid4()), str(uuid.uuid4())
            at = base + i
            message = Message(
                message_id=f"seed-{i}", role=Role.ROLE_USER, parts=(Part.from_text("hello"),)
            )
            task = new_task(task_id, context_id, message, at)
            is_pending = i >= tasks - pending
            state = TaskState.TASK_STATE_WORKING if is_pending else TaskState.TASK_STATE_COMPLETED
            status = TaskStatus(state=state, timestamp=task.status.timestamp)
            task_rows.insert(conn, attrs.evolve(task, status=status), scope, "a2a", at)
            contexts.append(("", PRINCIPAL, "a2a", f"ctx-{i}", context_id, at))
            for a in range(activations):
                key = provider_key("", PRINCIPAL, "a2a", f"seed-{i}-{a}")
                activation = activation_id(key)
                origins.append(
                    (
                        f"a2a:{activation}",
                        activation,
                        task_id,
                        "created" if a == 0 else "continued",
                        json.dumps({"source": "a2a", "messageId": f"seed-{i}-{a}"}),
                        at,
                    )
                )
                kinds = ["CLAIM", "ACCEPTED", "WOKEN", "WAKE_DELIVERED", "WAKE_DELIVERED"]
                if is_pending and a == activations - 1:
                    kinds = ["CLAIM", "ACCEPTED"]  # accepted, not yet woken: replayed
                delivery = 0
                for kind in kinds:
                    record: dict[str, object] = {"kind": kind, "activationId": activation}
                    if kind == "WAKE_DELIVERED":
                        delivery += 1
                        record.update({"delivery": delivery, "deliveredAt": at})
                    journal.append(
                        (
                            kind,
                            activation,
                            key if kind == "CLAIM" else None,
                            task_id,
                            json.dumps(record, sort_keys=True),
                            at,
                        )
                    )
        conn.executemany(
            "INSERT INTO journal (kind, activation_id, provider_key, task_id, record_json,"
            " recorded_at_ms) VALUES (?, ?, ?, ?, ?, ?)",
            journal,
        )
        conn.executemany("INSERT INTO origins VALUES (?, ?, ?, ?, ?, ?)", origins)
        conn.executemany("INSERT OR IGNORE INTO contexts VALUES (?, ?, ?, ?, ?, ?)", contexts)
        conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        db.close()
    return {"tasks": tasks, "journal": len(journal), "seconds": time.monotonic() - started}


def restart(
    workdir: Path, store: Path, label: str, timeout_s: float, src: Path
) -> tuple[float, float]:
    """Start the server (the checkout ``src``) on ``store``; seconds from process start
    to the card and to ``/readyz`` 200. Stops it afterwards."""
    server = Server(workdir, store, label=label, cwd=src)
    server.start(ready_timeout_s=timeout_s)
    card_s = server.startup_s
    started_at = time.monotonic() - card_s  # the start() clock, reconstructed
    ready_s = float("nan")
    deadline = time.monotonic() + timeout_s
    try:
        with httpx.Client(timeout=2.0) as client:
            while time.monotonic() < deadline:
                try:
                    r = client.get(f"{server.base_url}/readyz")
                    if r.status_code == 200:
                        ready_s = time.monotonic() - started_at
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.02)
    finally:
        stop_and_report(server)
    return card_s, ready_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--activations", type=int, default=2, help="per Task")
    parser.add_argument("--pending", type=int, default=100, help="WORKING Tasks replayed")
    parser.add_argument("--repeat", type=int, default=3, help="restarts of the seeded store")
    parser.add_argument("--timeout", type=float, default=120.0, help="per restart, s")
    parser.add_argument(
        "--taskplane-src",
        type=Path,
        default=REPO,
        help="checkout whose taskplane serves (default: this one; for before/after)",
    )
    parser.add_argument("--tmp", default=None, help="parent of the temporary directory")
    parser.add_argument("--keep", action="store_true", help="keep the store and logs")
    args = parser.parse_args()

    print(machine_info())
    if args.taskplane_src.resolve() != REPO.resolve():
        rev = subprocess.run(
            ["git", "-C", str(args.taskplane_src), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        print(f"server: taskplane {rev or '?'} (--taskplane-src)")
    with Workdir(args.tmp, keep=args.keep) as workdir:
        print(fsync_probe(workdir))
        store = workdir / "store"
        seeded = seed(store, args.tasks, args.activations, args.pending)
        size_mb = sum(f.stat().st_size for f in store.iterdir()) / 1e6
        print(
            f"seeded {seeded['tasks']:,} Tasks, {seeded['journal']:,} journal rows"
            f" ({args.pending} pending) in {seeded['seconds']:.1f}s; store {size_mb:.0f} MB"
        )
        readies: list[float] = []
        for n in range(args.repeat):
            card_s, ready_s = restart(
                workdir, store, f"restart-{n}", args.timeout, args.taskplane_src
            )
            readies.append(ready_s)
            print(f"restart {n + 1}: card {card_s:.2f}s, /readyz 200 {ready_s:.2f}s")
        best, worst = min(readies), max(readies)
        verdict = "met" if worst <= TARGET_S else "MISSED"
        print(
            f"summary: ready in {best:.2f}-{worst:.2f}s over {args.repeat} restarts"
            f" (target <= {TARGET_S:.0f}s: {verdict})"
        )


if __name__ == "__main__":
    main()
