"""``taskplane tasks list|show|export``: read Tasks from a store.

A SQLite store is read while its server is stopped (the command takes the store
root's lock); a PostgreSQL store is read while nodes run, each command on one
snapshot, without any lock (read only).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import click

from taskplane.cli.options import stacked, store_location, store_options
from taskplane.cli.output import emit_json, note
from taskplane.cli.store_access import StoreAccessError, open_store
from taskplane.model.enums import TaskState

STATES = [state.name for state in TaskState]


def _state(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    if value is None:
        return None
    name = value.strip().upper()
    name = name if name.startswith("TASK_STATE_") else "TASK_STATE_" + name
    if name not in STATES:
        short = ", ".join(s.removeprefix("TASK_STATE_").lower() for s in STATES)
        raise click.BadParameter(f"{value!r} is not a Task state ({short})")
    return name


def _filters(func: click.decorators.FC) -> click.decorators.FC:
    return stacked(
        func,
        [
            store_options,
            click.option("--principal", help="Only Tasks owned by this principal."),
            click.option("--context", "context_id", help="Only Tasks of this contextId."),
            click.option(
                "--state",
                callback=_state,
                help="Only Tasks in this state: TASK_STATE_COMPLETED or just completed "
                "(submitted, working, input_required, auth_required, completed, failed, "
                "canceled, rejected).",
            ),
            click.option("--tenant", help="Only Tasks of this tenant ('' is the default)."),
        ],
    )


@click.group()
def tasks() -> None:
    """Read the Tasks of a store.

    Output is JSON on stdout. The store is --store-url or TASKPLANE_STORE_URL
    (PostgreSQL: read while nodes run, without a lock), else --store or
    CHANNELS_TASK_STORE_PATH (SQLite: the server must be stopped).
    """


@tasks.command("list")
@_filters
@click.option(
    "--limit",
    type=click.IntRange(1),
    default=100,
    show_default=True,
    help="At most this many Tasks, newest status first.",
)
def list_tasks(
    store: Path | None,
    store_url: str | None,
    principal: str | None,
    context_id: str | None,
    state: str | None,
    tenant: str | None,
    limit: int,
) -> None:
    """Print a JSON array of Task summaries, newest status first.

    Each summary: id, contextId, state, tenant, principal, source, statusTimestamp,
    createdAtMs, updatedAtMs (ms since the epoch). No history or artifacts: use
    `tasks show` or `tasks export` for those.
    """
    try:
        with open_store(store_location(store, store_url)) as opened:
            emit_json(
                opened.select_tasks(
                    principal=principal,
                    context_id=context_id,
                    state=state,
                    tenant=tenant,
                    limit=limit,
                )
            )
    except StoreAccessError as exc:
        raise click.ClickException(str(exc)) from None


@tasks.command()
@store_options
@click.argument("task_id")
def show(store: Path | None, store_url: str | None, task_id: str) -> None:
    """Print one Task in full as JSON: its owner and the A2A Task (history, artifacts).

    Exits with status 1 when the store holds no Task TASK_ID.
    """
    try:
        with open_store(store_location(store, store_url)) as opened:
            record = opened.full_task(task_id)
    except StoreAccessError as exc:
        raise click.ClickException(str(exc)) from None
    if record is None:
        raise click.ClickException(f"the store holds no Task {task_id}")
    emit_json(record)


@tasks.command()
@_filters
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write to this new file (mode 0600) instead of stdout.",
)
def export(
    store: Path | None,
    store_url: str | None,
    principal: str | None,
    context_id: str | None,
    state: str | None,
    tenant: str | None,
    output: Path | None,
) -> None:
    """Write every matching Task in full as JSON Lines (one record per line).

    Each line is what `tasks show` prints, on one line: tenant, principal, source,
    version, updatedAtMs and the A2A Task. Newest status first.
    """
    try:
        with open_store(store_location(store, store_url)) as opened:
            rows = opened.select_tasks(
                principal=principal, context_id=context_id, state=state, tenant=tenant
            )
            found = [opened.full_task(row["id"]) for row in rows]
        # A Task compacted away between the two reads (PostgreSQL, a node running) is gone.
        records = [record for record in found if record is not None]
    except StoreAccessError as exc:
        raise click.ClickException(str(exc)) from None
    if output is None:
        for record in records:
            emit_json(record, pretty=False)
        return
    try:
        fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        raise click.ClickException(f"cannot create {output}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        for record in records:
            out.write(_line(record))
    note(f"exported {len(records)} Tasks to {output}")


def _line(record: object) -> str:
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"
