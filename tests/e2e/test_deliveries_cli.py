"""``taskplane deliveries list|resolve`` against a real store file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from taskplane.store.records import Delivery, DeliveryState
from taskplane.store.sqlite import deliveries
from taskplane.store.sqlite.database import Database
from tests.e2e.taskplane_proc import Spawner

pytestmark = pytest.mark.slow


def _store_with(root: Path, *states: DeliveryState) -> list[str]:
    db = Database(root)
    ids = []
    try:
        for n, state in enumerate(states):
            d = Delivery(f"task-{n}", "relay", f"reply:{n}", f"digest-{n}", "ambiguous")
            db.run_batch([lambda conn, d=d, s=state, t=1000 + n: deliveries.save(conn, d, s, t)])
            ids.append(d.delivery_id)
    finally:
        db.close()
    return ids


def _cli(spawn: Spawner, store: Path, *args: str) -> tuple[int, str, str]:
    process = spawn.start(("deliveries", *args), spawn.env(CHANNELS_TASK_STORE_PATH=str(store)))
    code = process.wait_exit()
    return code, process.stdout(), process.stderr()


def test_list_shows_each_delivery_and_filters_by_state(spawn: Spawner, tmp_path: Path) -> None:
    store = tmp_path / "store"
    ambiguous, delivered = _store_with(store, "ambiguous", "delivered")
    code, out, _ = _cli(spawn, store, "list", "--json")
    assert code == 0
    rows = [json.loads(line) for line in out.splitlines()]
    assert {r["delivery_id"]: r["state"] for r in rows} == {
        ambiguous: "ambiguous",
        delivered: "delivered",
    }
    code, out, _ = _cli(spawn, store, "list", "--state", "ambiguous")
    assert code == 0 and ambiguous in out and delivered not in out


def test_resolve_records_the_operators_finding_and_refuses_other_states(
    spawn: Spawner, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    first, second, done = _store_with(store, "ambiguous", "ambiguous", "delivered")
    assert _cli(spawn, store, "resolve", first, "--delivered-as", "resp-1")[0] == 0
    assert _cli(spawn, store, "resolve", second, "--retry")[0] == 0
    code, _, err = _cli(spawn, store, "resolve", done, "--retry")
    assert code != 0 and "not ambiguous" in err
    code, _, err = _cli(spawn, store, "resolve", first)
    assert code != 0 and "exactly one" in err
    code, out, _ = _cli(spawn, store, "list", "--json")
    rows = {r["delivery_id"]: r for r in map(json.loads, out.splitlines())}
    assert (rows[first]["state"], rows[first]["provider_response_id"]) == ("delivered", "resp-1")
    assert rows[second]["state"] == "failed"


def test_resolve_refuses_while_the_server_holds_the_store(spawn: Spawner, tmp_path: Path) -> None:
    store = tmp_path / "store"
    (delivery,) = _store_with(store, "ambiguous")
    db = Database(store)  # stands in for the running server: it holds the root lock
    try:
        code, _, err = _cli(spawn, store, "resolve", delivery, "--retry")
    finally:
        db.close()
    assert code != 0 and "stop the server first" in err
