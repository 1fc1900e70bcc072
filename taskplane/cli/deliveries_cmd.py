"""``taskplane deliveries list|resolve``: the operator's view of outbound deliveries.

An ``ambiguous`` delivery (its outcome is unknown and cannot be looked up) is never
sent again automatically (design document, "the ambiguous policy"). The operator
checks the provider by hand, then either records what they found
(``resolve ID --delivered-as RESPONSE_ID``) or lets it be sent again on the next
start (``resolve ID --retry``). The command opens the store itself, so the server
must be stopped first (one process per store root).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import attrs
import click
import trio

from taskplane.app import open_operator_store
from taskplane.errors import StoreLocked, TaskplaneError
from taskplane.settings import ConfigError, load_server
from taskplane.store.source_store import SourceStore

STATES = ("prepared", "sending", "delivered", "failed", "ambiguous")
T = TypeVar("T")


def _run(op: Callable[[SourceStore], Awaitable[T]]) -> T:
    try:
        settings = load_server(os.environ)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None

    async def main() -> T:
        async with open_operator_store(settings.store_root, settings.store_url) as store:
            return await op(store)

    try:
        return trio.run(main)
    except StoreLocked as exc:
        raise click.ClickException(f"{exc} (stop the server first)") from None
    except (TaskplaneError, OSError) as exc:
        raise click.ClickException(str(exc)) from None


@click.group()
def deliveries() -> None:
    """List outbound deliveries, and resolve ambiguous ones by hand.

    Uses CHANNELS_TASK_STORE_PATH like `taskplane serve`; stop the server first.
    """


@deliveries.command("list")
@click.option("--state", type=click.Choice(STATES), help="Only deliveries in this state.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
def list_(state: str | None, as_json: bool) -> None:
    """Every delivery, newest change first."""
    rows = _run(lambda store: store.list_deliveries(state))
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
def resolve(delivery_id: str, delivered_as: str | None, retry: bool) -> None:
    """Resolve the ambiguous delivery DELIVERY_ID."""
    if (delivered_as is None) == (not retry):
        raise click.UsageError("give exactly one of --delivered-as RESPONSE_ID and --retry")
    now = time.time_ns() // 1_000_000
    row = _run(lambda store: store.resolve_delivery(delivery_id, now, delivered_as=delivered_as))
    click.echo(f"{row.delivery_id}: {row.state}")
