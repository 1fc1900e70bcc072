"""``taskplane store check|backup|compact|stats``: look after a stopped server's store."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from taskplane.cli.options import store_option, store_root
from taskplane.cli.output import emit_json, note
from taskplane.cli.store_access import StoreAccessError, open_store


@click.group()
def store() -> None:
    """Check, back up, compact or measure a store (the server must be stopped).

    The store is CHANNELS_TASK_STORE_PATH or --store. While a server runs, it holds
    the store's lock and these commands refuse, naming its pid.
    """


@store.command("check")
@store_option
def check_cmd(store: Path | None) -> None:
    """Check SQLite integrity and the store's invariants.

    Runs PRAGMA integrity_check, then checks that every accepted claim has its Task,
    that no journal record or origin outlives its Task, and that every Task row
    decodes and matches its indexed columns. Prints `ok` (exit status 0) or one line
    per problem (exit status 1).
    """
    try:
        with open_store(store_root(store)) as opened:
            problems = opened.check()
    except StoreAccessError as exc:
        raise click.ClickException(str(exc)) from None
    if not problems:
        click.echo("ok")
        return
    for problem in problems:
        click.echo(problem)
    note(f"{len(problems)} problem(s) found")
    sys.exit(1)


@store.command("backup")
@store_option
@click.argument("destination", type=click.Path(dir_okay=False, path_type=Path))
def backup_cmd(store: Path | None, destination: Path) -> None:
    """Copy the store's database into DESTINATION, a new file (mode 0600).

    Uses SQLite's online backup API, so the copy is one consistent database (WAL
    content included) and a progress bar is shown on stderr. To restore: stop the
    server, then replace <store root>/taskplane.sqlite3 with the copy and delete
    taskplane.sqlite3-wal and taskplane.sqlite3-shm if present.
    """
    try:
        with (
            open_store(store_root(store)) as opened,
            click.progressbar(
                length=1, label="backing up", file=sys.stderr, show_percent=True
            ) as bar,
        ):

            def progress(done: int, total: int) -> None:
                bar.length = max(total, 1)
                bar.update(done - bar.pos)

            pages = opened.backup(destination, progress)
    except StoreAccessError as exc:
        raise click.ClickException(str(exc)) from None
    note(f"backed up {pages} pages to {destination}")


@store.command("compact")
@store_option
@click.option(
    "--vacuum/--no-vacuum",
    default=True,
    show_default=True,
    help="Rebuild the database file afterwards to give freed space back.",
)
def compact_cmd(store: Path | None, vacuum: bool) -> None:
    """Apply the 30-day retention rules now, as every server start does.

    Prints JSON: rows removed per table, and the database size in bytes before and
    after.
    """
    try:
        with open_store(store_root(store)) as opened:
            emit_json(opened.compact(vacuum=vacuum))
    except StoreAccessError as exc:
        raise click.ClickException(str(exc)) from None


@store.command("stats")
@store_option
def stats_cmd(store: Path | None) -> None:
    """Print sizes and counts as JSON.

    Keys: storeRoot, schemaVersion, files (bytes per file), databaseBytes, rows (per
    table), tasksByState, tasksByPrincipal, journalByKind, deliveriesByState.
    """
    root = store_root(store)
    try:
        with open_store(root) as opened:
            emit_json(opened.stats())
    except StoreAccessError as exc:
        raise click.ClickException(str(exc)) from None
