"""End to end: the operator commands on a PostgreSQL store while its node runs.

``tasks``, ``store check|compact|stats`` and ``deliveries`` read and write the
database beside a running ``taskplane serve`` (registered as a node throughout;
the commands never register or wait for one);
``store backup`` says how to back PostgreSQL up; a password in the URL never shows
in what a command prints.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import psycopg

from taskplane.store.postgres import deliveries
from taskplane.store.records import Delivery, DeliveryState
from tests.e2e._support import HTTP_TIMEOUT_S, post_text, read_task
from tests.e2e.taskplane_proc import RunningServer, Spawner
from tests.support.pg import Cluster

SUMMARY_KEYS = {
    "id",
    "contextId",
    "state",
    "tenant",
    "principal",
    "source",
    "statusTimestamp",
    "createdAtMs",
    "updatedAtMs",
}
RECORD_KEYS = {"tenant", "principal", "source", "version", "updatedAtMs", "task"}
STATS_KEYS = {
    "storeUrl",
    "schemaVersion",
    "tableBytes",
    "databaseBytes",
    "rows",
    "tasksByState",
    "tasksByPrincipal",
    "journalByKind",
    "deliveriesByState",
    "nodes",
}
OLD_MS = 1_000_000  # 1970: far outside the 30-day retention window


def _cli(spawn: Spawner, url: str, *args: str, flag: bool = False) -> tuple[int, str, str]:
    """``taskplane ARGS`` on the store at ``url`` (``--store-url`` when ``flag``, else
    ``TASKPLANE_STORE_URL``): exit status, stdout, stderr."""
    if flag:
        process = spawn.start((*args, "--store-url", url), spawn.env())
    else:
        process = spawn.start(args, spawn.env(TASKPLANE_STORE_URL=url))
    code = process.wait_exit()
    return code, process.stdout(), process.stderr()


def _node(spawn: Spawner, url: str) -> RunningServer:
    return spawn.serve(
        store=spawn.root / "node",
        env={"TASKPLANE_STORE_URL": url, "A2A_PUBLIC_URL": "http://agents.example"},
    )


def test_tasks_and_store_read_the_database_while_its_node_runs(
    spawn: Spawner, pg_cluster: Cluster
) -> None:
    url = pg_cluster.fresh_store_url()
    node = _node(spawn, url)
    first, second = post_text(node, "one"), post_text(node, "two")

    code, out, err = _cli(spawn, url, "tasks", "list")
    assert code == 0, err
    listed = json.loads(out)
    assert [row["id"] for row in listed] == [second["id"], first["id"]]  # newest first
    assert all(set(row) == SUMMARY_KEYS for row in listed)
    assert listed[0]["state"] == "TASK_STATE_COMPLETED" and listed[0]["principal"] == "e2e"

    code, out, err = _cli(spawn, url, "tasks", "list", "--limit", "1", "--state", "completed")
    assert code == 0 and [row["id"] for row in json.loads(out)] == [second["id"]], err

    code, out, err = _cli(spawn, url, "tasks", "show", first["id"], flag=True)
    assert code == 0, err
    record = json.loads(out)
    assert set(record) == RECORD_KEYS and record["task"] == read_task(node, first["id"])

    code, out, err = _cli(spawn, url, "tasks", "export", "--principal", "e2e")
    assert code == 0, err
    exported = [json.loads(line) for line in out.splitlines()]
    assert [r["task"]["id"] for r in exported] == [second["id"], first["id"]]

    code, _, err = _cli(spawn, url, "tasks", "show", "no-such-task")
    assert code == 1 and "holds no Task no-such-task" in err

    code, out, err = _cli(spawn, url, "store", "check")
    assert (code, out.strip()) == (0, "ok"), err

    code, out, err = _cli(spawn, url, "store", "stats", flag=True)
    assert code == 0, err
    stats = json.loads(out)
    assert set(stats) == STATS_KEYS
    assert stats["rows"]["tasks"] == 2 and stats["tasksByState"] == {"TASK_STATE_COMPLETED": 2}
    assert stats["tasksByPrincipal"] == {"e2e": 2}
    assert stats["databaseBytes"] == sum(stats["tableBytes"].values()) > 0
    assert "password" not in stats["storeUrl"]
    (registered,) = stats["nodes"]
    assert registered["live"] and registered["pid"] == node.process.pid, registered
    assert registered["publicUrl"] == "http://agents.example"

    # The node never noticed: it is still registered and answers.
    assert node.process.returncode is None
    assert post_text(node, "three")["status"]["state"] == "TASK_STATE_COMPLETED"


def test_store_check_reports_a_broken_invariant_with_status_1(
    spawn: Spawner, pg_cluster: Cluster
) -> None:
    url = pg_cluster.fresh_store_url()
    node = _node(spawn, url)
    task = post_text(node, "soon orphaned")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DELETE FROM tasks WHERE task_id = %s", (task["id"],))
    code, out, err = _cli(spawn, url, "store", "check")
    assert code == 1, (out, err)
    assert "accepted claim without its Task: " in out and task["id"] in out
    assert "problem(s) found" in err


def test_store_compact_beside_a_running_node_removes_only_what_retention_drops(
    spawn: Spawner, pg_cluster: Cluster
) -> None:
    url = pg_cluster.fresh_store_url()
    node = _node(spawn, url)
    old, kept = post_text(node, "old"), post_text(node, "kept")
    with psycopg.connect(url, autocommit=True) as conn:  # make one Task 55 years old
        conn.execute("UPDATE tasks SET updated_at_ms = %s WHERE task_id = %s", (OLD_MS, old["id"]))

    code, out, err = _cli(spawn, url, "store", "compact")
    assert code == 0, err
    report = json.loads(out)
    assert set(report) == {"removed", "bytesBefore", "bytesAfter"}
    assert report["removed"]["tasks"] == 1 and report["removed"]["journal"] >= 1
    assert report["bytesBefore"] > 0 and report["bytesAfter"] > 0

    code, out, err = _cli(spawn, url, "store", "compact", "--no-vacuum", flag=True)
    assert code == 0 and sum(json.loads(out)["removed"].values()) == 0, err

    assert _cli(spawn, url, "tasks", "show", old["id"])[0] == 1
    code, out, err = _cli(spawn, url, "store", "check")
    assert (code, out.strip()) == (0, "ok"), err
    # The node keeps working on the same rows: the kept Task, and new sends.
    assert read_task(node, kept["id"])["status"]["state"] == "TASK_STATE_COMPLETED"
    assert post_text(node, "after")["status"]["state"] == "TASK_STATE_COMPLETED"
    response = httpx.get(
        f"{node.url}/tasks/{old['id']}", headers=node.auth_headers(), timeout=HTTP_TIMEOUT_S
    )
    assert response.status_code == 404, response.text


def _deliveries(url: str, *states: DeliveryState) -> list[str]:
    """Delivery rows as the node's outbound actor writes them."""
    ids = []
    with psycopg.connect(url, autocommit=True) as conn:
        for n, state in enumerate(states):
            d = Delivery(f"task-{n}", "relay", f"reply:{n}", f"digest-{n}", "ambiguous")
            with conn.transaction():
                deliveries.save(conn, d, state, 1000 + n)
            ids.append(d.delivery_id)
    return ids


def test_deliveries_list_and_resolve_while_the_node_runs(
    spawn: Spawner, pg_cluster: Cluster
) -> None:
    url = pg_cluster.fresh_store_url()
    node = _node(spawn, url)
    first, second, done = _deliveries(url, "ambiguous", "ambiguous", "delivered")

    code, out, err = _cli(spawn, url, "deliveries", "list", "--json")
    assert code == 0, err
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["delivery_id"] for r in rows] == [done, second, first]  # newest change first
    assert set(rows[0]) == {
        "delivery_id",
        "task_id",
        "source",
        "operation_id",
        "recovery",
        "state",
        "provider_response_id",
        "error",
        "updated_at_ms",
    }
    code, out, _ = _cli(spawn, url, "deliveries", "list", "--state", "ambiguous", flag=True)
    assert code == 0 and first in out and done not in out

    code, out, err = _cli(spawn, url, "deliveries", "resolve", first, "--delivered-as", "resp-1")
    assert (code, out.strip()) == (0, f"{first}: delivered"), err
    code, out, err = _cli(spawn, url, "deliveries", "resolve", second, "--retry", flag=True)
    assert (code, out.strip()) == (0, f"{second}: failed"), err
    code, _, err = _cli(spawn, url, "deliveries", "resolve", done, "--retry")
    assert code == 1 and "not ambiguous" in err
    code, _, err = _cli(spawn, url, "deliveries", "resolve", "nope", "--retry")
    assert code == 1 and "does not exist" in err

    code, out, _ = _cli(spawn, url, "deliveries", "list", "--json")
    found = {r["delivery_id"]: r for r in map(json.loads, out.splitlines())}
    assert (found[first]["state"], found[first]["provider_response_id"]) == ("delivered", "resp-1")
    assert found[second]["state"] == "failed" and found[done]["state"] == "delivered"
    assert node.process.returncode is None


def test_store_backup_says_how_to_back_postgresql_up(spawn: Spawner, tmp_path: Path) -> None:
    url = "postgresql://ops:hunter2-secret@db.example:5433/taskplane?sslmode=require"
    copy = tmp_path / "copy.sqlite3"
    for flag in (False, True):
        code, out, err = _cli(spawn, url, "store", "backup", str(copy), flag=flag)
        assert code == 1 and out == "", err
        assert "pg_dump" in err and "pg_basebackup" in err and "point-in-time" in err
        assert "dbname=taskplane" in err and "host=db.example" in err and "port=5433" in err
        assert "hunter2" not in err and "Traceback" not in err
    assert not copy.exists()


def test_a_password_in_the_url_never_shows_in_a_message(spawn: Spawner, tmp_path: Path) -> None:
    nowhere = tmp_path / "no-server"
    nowhere.mkdir()
    urls = [
        f"postgresql://ops:hunter2-secret@/taskplane?host={nowhere}",
        f"host={nowhere} dbname=taskplane user=ops password=hunter2-secret",
        f"postgresql:///taskplane?host={nowhere}&user=ops&password=hunter2-secret",
    ]
    commands: list[tuple[str, ...]] = [
        ("tasks", "show", "t-1"),
        ("store", "compact"),
        ("deliveries", "resolve", "d-1", "--retry"),
    ]
    for url in urls:
        for args in commands:
            code, out, err = _cli(spawn, url, *args)
            assert code == 1, (args, out, err)
            assert "cannot connect to the task store at" in err, (args, err)
            assert "dbname=taskplane" in err and str(nowhere) in err, (args, err)
            assert "hunter2" not in err + out and "Traceback" not in err, (args, err)
    # The node's own startup error (stderr and its log) leaves the password out too.
    server = spawn.start(
        ("serve",),
        spawn.env(
            A2A_SERVER="0", TASKPLANE_STORE_URL=urls[0], A2A_PUBLIC_URL="http://agents.example"
        ),
    )
    assert server.wait_exit() == 2, server.describe()
    said = server.stderr() + server.stdout()
    assert "cannot connect to the task store at" in said and "dbname=taskplane" in said, said
    assert "hunter2" not in said and "Traceback" not in said, said


def test_the_commands_never_create_or_migrate_a_store(spawn: Spawner, pg_cluster: Cluster) -> None:
    url = pg_cluster.fresh_store_url()
    code, _, err = _cli(spawn, url, "store", "stats")
    assert code == 1 and "holds no taskplane store (start a node on it once)" in err, err
    with psycopg.connect(url, autocommit=True) as conn:
        tables = conn.execute(
            "SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()"
        ).fetchone()
        assert tables == (0,)  # nothing was created
        conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        conn.execute("INSERT INTO meta VALUES ('schema_version', '99')")
    code, _, err = _cli(spawn, url, "deliveries", "list")
    assert code == 1 and "schema_version 99" in err and "use a newer taskplane" in err, err
