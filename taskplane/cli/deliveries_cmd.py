"""``taskplane deliveries list|resolve``: the operator's view of outbound deliveries.

An ``ambiguous`` delivery (its outcome is unknown and cannot be looked up) is never
sent again automatically (design document, "the ambiguous policy"). The operator
checks the provider by hand, then either records what they found
(``resolve ID --delivered-as RESPONSE_ID``) or lets it be sent again on the next
start (``resolve ID --retry``).

A SQLite store is opened by the command itself, so its server must be stopped first
(one process per store root). A PostgreSQL store is used while nodes run, without a
lock: ``list`` reads one snapshot; ``resolve`` changes the one row in the source
store's own transaction, under a row lock, only while it is still ``ambiguous`` (a
state no node moves a delivery out of). trio and the composition root are imported
only when a SQLite store is opened, so ``deliveries --help`` stays quick.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import attrs
import click

from taskplane.cli.options import StoreLocation, store_location, store_options
from taskplane.cli.output import note
from taskplane.cli.store_access import StoreAccessError, open_postgres
from taskplane.errors import InvalidRequest, StoreLocked, TaskplaneError

if TYPE_CHECKING:
    from taskplane.app import PgMaintenance
    from taskplane.store.source_store import DeliveryRow, SourceStore

STATES = ("prepared", "sending", "delivered", "failed", "ambiguous")
T = TypeVar("T")


class Refusal(click.ClickException):
    """The store refused the request (no such delivery, or one not ``ambiguous``): one
    line ``taskplane: <message>`` on stderr and exit status 2, the command line's
    convention for a request it will not carry out."""

    exit_code = 2

    def show(self, file: object = None) -> None:
        click.echo(f"taskplane: {self.format_message()}", err=True)


def _leaf(exc: BaseException) -> BaseException:
    """The one exception inside nested exception groups of one member each (a store
    actor's nursery wraps the error it raises), else ``exc`` itself."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def _run(location: StoreLocation, op: Callable[[SourceStore], Awaitable[T]]) -> T:
    """``op`` on the SQLite store of ``location``'s root, its store actor running."""
    import trio

    from taskplane.app import open_operator_store

    async def main() -> T:
        async with open_operator_store(location.root) as store:
            return await op(store)

    try:
        return trio.run(main)
    except BaseException as raised:
        exc = _leaf(raised)
        if isinstance(exc, InvalidRequest):
            raise Refusal(str(exc)) from None
        if isinstance(exc, StoreLocked):
            raise click.ClickException(f"{exc} (stop the server first)") from None
        if isinstance(exc, TaskplaneError | OSError):
            raise click.ClickException(str(exc)) from None
        raise


def _on_postgres(url: str, op: Callable[[PgMaintenance], T]) -> T:
    """``op`` on the PostgreSQL store at ``url`` (no lock: nodes keep running)."""
    try:
        with open_postgres(url) as opened:
            return op(opened)
    except InvalidRequest as exc:
        raise Refusal(str(exc)) from None
    except StoreAccessError as exc:
        raise click.ClickException(str(exc)) from None


@click.group()
def deliveries() -> None:
    """List outbound deliveries, and resolve ambiguous ones by hand.

    The store is --store-url or TASKPLANE_STORE_URL (PostgreSQL: works while nodes
    run), else --store or CHANNELS_TASK_STORE_PATH (SQLite: stop the server first).
    """


@deliveries.command("list")
@click.option("--state", type=click.Choice(STATES), help="Only deliveries in this state.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@store_options
def list_(state: str | None, as_json: bool, store: Path | None, store_url: str | None) -> None:
    """Every delivery, newest change first: one line each (with --json, one JSON
    object per line). When there is none, stdout stays empty and a note says so on
    stderr (`no deliveries`, or `no deliveries in state S`)."""
    location = store_location(store, store_url)
    rows: tuple[DeliveryRow, ...]
    if location.url is None:
        rows = _run(location, lambda opened: opened.list_deliveries(state))
    else:
        rows = _on_postgres(location.url, lambda opened: opened.list_deliveries(state))
    if not rows:
        note("no deliveries" if state is None else f"no deliveries in state {state}")
    for row in rows:
        if as_json:
            click.echo(json.dumps(attrs.asdict(row), sort_keys=True))
        else:
            click.echo(
                f"{row.delivery_id}  {row.state:<9}  {row.source:<8}  task {row.task_id}"
                f"  {row.operation_id}  {row.provider_response_id or '-'}"
                + (f"  ({row.error})" if row.error else "")
            )


@deliveries.command()
@click.argument("delivery_id")
@click.option(
    "--delivered-as",
    metavar="RESPONSE_ID",
    help="The provider has it: record it delivered with this response ID.",
)
@click.option("--retry", is_flag=True, help="The provider does not have it: send it again.")
@store_options
def resolve(
    delivery_id: str,
    delivered_as: str | None,
    retry: bool,
    store: Path | None,
    store_url: str | None,
) -> None:
    """Resolve the ambiguous delivery DELIVERY_ID.

    A delivery that does not exist or is not ambiguous is refused: one line
    `taskplane: ...`, exit status 2.
    """
    if (delivered_as is None) == (not retry):
        raise click.UsageError("give exactly one of --delivered-as RESPONSE_ID and --retry")
    location = store_location(store, store_url)
    now = time.time_ns() // 1_000_000
    row: DeliveryRow
    if location.url is None:
        row = _run(
            location,
            lambda opened: opened.resolve_delivery(delivery_id, now, delivered_as=delivered_as),
        )
    else:
        row = _on_postgres(
            location.url,
            lambda opened: opened.resolve_delivery(delivery_id, now, delivered_as=delivered_as),
        )
    click.echo(f"{row.delivery_id}: {row.state}")
