"""``taskplane deliveries resolve`` refusing a delivery it cannot resolve: one line
``taskplane: ...`` on stderr and exit status 2, never a traceback (in process)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from taskplane.cli import main
from taskplane.store.records import Delivery, DeliveryState
from taskplane.store.sqlite import deliveries
from taskplane.store.sqlite.database import Database


def _store_with(root: Path, state: DeliveryState) -> str:
    db = Database(root)
    try:
        d = Delivery("task-0", "relay", "reply:0", "digest-0", "ambiguous")
        db.run_batch([lambda conn: deliveries.save(conn, d, state, 1000)])
    finally:
        db.close()
    return d.delivery_id


@pytest.mark.parametrize(("existing", "why"), [(False, "does not exist"), (True, "not ambiguous")])
def test_a_delivery_that_cannot_be_resolved_is_one_line_and_status_2(
    tmp_path: Path, existing: bool, why: str
) -> None:
    store = tmp_path / "store"
    delivery = _store_with(store, "delivered") if existing else "delivery-nope"
    result = CliRunner().invoke(
        main, ["deliveries", "resolve", delivery, "--retry", "--store", str(store)]
    )
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith("taskplane: ") and why in line and result.stdout == ""


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ([], "no deliveries"),
        (["--json"], "no deliveries"),
        (["--state", "ambiguous"], "no deliveries in state ambiguous"),
    ],
)
def test_an_empty_list_keeps_stdout_empty_and_says_so_on_stderr(
    tmp_path: Path, args: list[str], says: str
) -> None:
    store = tmp_path / "store"
    Database(store).close()
    result = CliRunner().invoke(main, ["deliveries", "list", "--store", str(store), *args])
    assert result.exit_code == 0, result.output
    assert result.stdout == "" and result.stderr == f"{says}\n"


def test_a_listed_delivery_is_one_line_on_stdout(tmp_path: Path) -> None:
    store = tmp_path / "store"
    delivery = _store_with(store, "ambiguous")
    result = CliRunner().invoke(main, ["deliveries", "list", "--store", str(store)])
    assert result.exit_code == 0, result.output
    (line,) = result.stdout.splitlines()
    assert line.startswith(f"{delivery}  ambiguous") and result.stderr == ""
