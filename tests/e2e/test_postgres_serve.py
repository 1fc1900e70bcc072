"""End to end: ``taskplane serve`` on a PostgreSQL store (``TASKPLANE_STORE_URL``).

A send is answered from PostgreSQL (no SQLite file appears in the store root), a
second node with the id of a live one, or with another public URL, is refused at
startup, a node with another id serves the same Task, a restart on the same
database serves the earlier Task, and the operator commands use
the configured PostgreSQL store instead of an empty store root.
"""

from __future__ import annotations

import signal
import time
from typing import Any

import httpx
import psycopg

from tests.e2e._support import post_text, read_task
from tests.e2e.taskplane_proc import (
    EXIT_DEADLINE_S,
    RunningServer,
    Spawner,
    TaskplaneProcess,
    free_port,
)
from tests.support.pg import Cluster

PUBLIC_URL = "http://agents.example"
LEASE_TTL_S = 6.0


def list_tasks(server: RunningServer, **query: str) -> dict[str, Any]:
    """``GET /tasks`` with ``query``; asserts 200."""
    response = httpx.get(
        f"{server.url}/tasks", params=query, headers=server.auth_headers(), timeout=10.0
    )
    assert response.status_code == 200, response.text
    page: dict[str, Any] = response.json()
    return page


def test_serve_keeps_its_tasks_in_postgresql_and_nodes_share_the_database(
    spawn: Spawner, pg_cluster: Cluster
) -> None:
    url = pg_cluster.fresh_store_url()
    env = {
        "TASKPLANE_STORE_URL": url,
        "A2A_PUBLIC_URL": PUBLIC_URL,
        "TASKPLANE_NODE_ID": "node-a",
        # One lease length for every node of the database; short (not 15 s), so node-b's
        # restart below waits LEASE_TTL_S / 3 + 1 s, not 6 s (its row, renewed every
        # LEASE_TTL_S / 3, is still young when the restart looks)
        "TASKPLANE_LEASE_TTL_S": f"{LEASE_TTL_S:g}",
    }
    first = spawn.serve(store=spawn.root / "store-a", env=env)
    banner = first.process.stdout()
    assert "  store        : PostgreSQL " in banner and ", node node-a" in banner, banner
    assert f"  store root   : {spawn.root / 'store-a'}" in banner, banner
    task = post_text(first, "hello")
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", task
    assert not (first.store / "taskplane.sqlite3").exists()
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT state FROM tasks WHERE task_id = %s", (task["id"],)).fetchone()
    assert row == ("TASK_STATE_COMPLETED",)

    def start(store: str, **overrides: str) -> TaskplaneProcess:
        return spawn.start(
            ("serve",),
            spawn.env(
                A2A_SERVER="1",
                A2A_CREDENTIALS_PATH=str(first.credentials),
                A2A_HOST="127.0.0.1",
                A2A_PORT=str(free_port()),
                CHANNELS_TASK_STORE_PATH=str(spawn.root / store),
                **{**env, **overrides},
            ),
        )

    duplicate = start("store-b")  # the id of a live node
    assert duplicate.wait_exit() == 2, duplicate.describe()
    message = duplicate.stderr()
    assert "node id node-a is in use by a live taskplane node" in message, duplicate.describe()
    assert "Traceback" not in message, duplicate.describe()
    elsewhere = start("store-c", TASKPLANE_NODE_ID="node-c", A2A_PUBLIC_URL="http://other.example")
    assert elsewhere.wait_exit() == 2, elsewhere.describe()
    assert f"the live node node-a of this database advertises {PUBLIC_URL}" in elsewhere.stderr()

    second = spawn.serve(store=spawn.root / "store-d", env={**env, "TASKPLANE_NODE_ID": "node-b"})
    assert read_task(second, task["id"])["status"]["state"] == "TASK_STATE_COMPLETED"
    # page 2 of GET /tasks asked of the other node: both sign with the database's key
    more = [post_text(first, f"more {n}")["id"] for n in range(2)]
    page = list_tasks(first, pageSize="2")
    assert page["nextPageToken"], page
    rest = list_tasks(second, pageSize="2", pageToken=page["nextPageToken"])
    listed = [t["id"] for t in page["tasks"] + rest["tasks"]]
    assert sorted(listed) == sorted([task["id"], *more]) and rest["nextPageToken"] == ""
    assert first.process.returncode is None, first.process.describe()
    with psycopg.connect(url, autocommit=True) as conn:
        nodes = conn.execute("SELECT node_id FROM nodes ORDER BY node_id").fetchall()
    assert nodes == [("node-a",), ("node-b",)]

    # node-b killed and restarted at once with its id: the database ended the dead
    # process's sessions, so its fresh registry row keeps the restart out only until
    # the row would have been renewed (a third of the lease length and 1 s)
    second.process.signal_and_wait(signal.SIGKILL, deadline_s=EXIT_DEADLINE_S)
    started = time.monotonic()
    revived = spawn.serve(store=spawn.root / "store-d", env={**env, "TASKPLANE_NODE_ID": "node-b"})
    assert time.monotonic() - started >= LEASE_TTL_S / 3 + 1  # it waited for the renewal
    assert read_task(revived, task["id"])["status"]["state"] == "TASK_STATE_COMPLETED"

    first.process.signal_and_wait(signal.SIGTERM, deadline_s=EXIT_DEADLINE_S)
    again = spawn.serve(store=spawn.root / "store-e", env=env)  # its id is free again
    restored = read_task(again, task["id"])
    assert (restored["history"], restored["artifacts"]) == (task["history"], task["artifacts"])


def test_the_operator_commands_use_the_postgresql_store_when_it_is_configured(
    spawn: Spawner,
) -> None:
    env = spawn.env(TASKPLANE_STORE_URL="postgresql:///taskplane?host=/nowhere")
    process = spawn.start(("tasks", "list"), env)
    assert process.wait_exit() == 1, process.describe()
    message = process.stderr()
    assert "cannot connect to the task store at dbname=taskplane host=/nowhere" in message
    assert "Traceback" not in message, process.describe()
    process = spawn.start(("store", "backup", str(spawn.root / "copy.sqlite3")), env)
    assert process.wait_exit() == 1, process.describe()
    message = process.stderr()
    assert "PostgreSQL database dbname=taskplane host=/nowhere" in message, process.describe()
    assert "pg_dump" in message and "Traceback" not in message, process.describe()
    assert not (spawn.root / "copy.sqlite3").exists()
