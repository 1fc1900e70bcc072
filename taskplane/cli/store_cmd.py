"""``taskplane store check|backup|compact|stats``: look after a store.

A SQLite store is looked after while its server is stopped (the command takes the
store root's lock). A PostgreSQL store is looked after while nodes run, without a
lock: ``check`` and ``stats`` read one snapshot, ``compact`` runs the nodes' own
retention transaction, and ``backup`` says how to back PostgreSQL up instead. A
SQLite ``backup`` also works while its server runs (a read-only connection and
SQLite's online backup). The composition root (``taskplane.app``) is imported by the
commands that open a store, not by this module (``store --help`` stays quick).
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from taskplane.cli.options import store_location, store_options
from taskplane.cli.output import emit_json, note
from taskplane.cli.store_access import StoreAccessError, open_store
from taskplane.errors import TaskplaneError


@click.group()
def store() -> None:
    """Check, back up, compact or measure a store.

    The store is --store-url or TASKPLANE_STORE_URL (PostgreSQL: these commands work
    while nodes run), else --store or CHANNELS_TASK_STORE_PATH (SQLite: while a
    server runs, it holds the store's lock and these commands refuse, naming its pid;
    `backup` works all the same).
    """


@store.command("check")
@store_options
def check_cmd(store: Path | None, store_url: str | None) -> None:
    """Check the database's integrity and the store's invariants.

    SQLite: runs PRAGMA integrity_check first. Then checks that every accepted claim
    has its Task, that no journal record or origin outlives its Task, and that every
    Task row decodes and matches its indexed columns (PostgreSQL: on one snapshot,
    read only, beside running nodes). Prints `ok` (exit status 0) or one line per
    problem (exit status 1).
    """
    try:
        with open_store(store_location(store, store_url)) as opened:
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
@store_options
@click.argument("destination", type=click.Path(dir_okay=False, path_type=Path))
def backup_cmd(store: Path | None, store_url: str | None, destination: Path) -> None:
    """Copy the store's database into DESTINATION, a new file (mode 0600).

    Works while the server runs: SQLite's online backup through a second, read-only
    connection, so the copy is one consistent database (WAL content included) and
    the server's writes go on. A progress bar is shown on stderr. To restore: stop
    the server, then replace <store root>/taskplane.sqlite3 with the copy and delete
    taskplane.sqlite3-wal and taskplane.sqlite3-shm if present.

    With a PostgreSQL store nothing is copied: the command says how to back the
    database up with PostgreSQL's own tools (pg_dump, base backups) and exits with
    status 1.
    """
    from taskplane.app import BackupDestinationError, backup_store

    location = store_location(store, store_url)
    if location.url is not None:
        raise click.ClickException(_postgres_backup_advice(location.url))
    root = location.root
    try:
        with click.progressbar(
            length=1, label="backing up", file=sys.stderr, show_percent=True
        ) as bar:

            def progress(done: int, total: int) -> None:
                bar.length = max(total, 1)
                bar.update(done - bar.pos)

            pages = backup_store(root, destination, progress)
    except FileNotFoundError:
        raise click.ClickException(
            f"there is no store at {root} (CHANNELS_TASK_STORE_PATH / --store)"
        ) from None
    except (BackupDestinationError, TaskplaneError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    note(f"backed up {pages} pages to {destination}")


@store.command("compact")
@store_options
@click.option(
    "--vacuum/--no-vacuum",
    default=True,
    show_default=True,
    help="Reclaim the freed space afterwards (SQLite: rebuild the file, which shrinks"
    " it; PostgreSQL: plain VACUUM (ANALYZE), which makes the space reusable without"
    " shrinking the files).",
)
def compact_cmd(store: Path | None, store_url: str | None, vacuum: bool) -> None:
    """Apply the 30-day retention rules now, as every server start does.

    Prints JSON: rows removed per table, and the database size in bytes before and
    after. PostgreSQL: runs beside running nodes, in the same transaction a node
    compacts in at startup; --vacuum runs plain VACUUM (ANALYZE), never VACUUM FULL
    (the bytes are the store's tables and indexes).
    """
    try:
        with open_store(store_location(store, store_url)) as opened:
            emit_json(opened.compact(vacuum=vacuum))
    except StoreAccessError as exc:
        raise click.ClickException(str(exc)) from None


@store.command("stats")
@store_options
def stats_cmd(store: Path | None, store_url: str | None) -> None:
    """Print sizes and counts as JSON.

    Keys: storeRoot, schemaVersion, files (bytes per file), databaseBytes, rows (per
    table), tasksByState, tasksByPrincipal, journalByKind, deliveriesByState.
    PostgreSQL (one snapshot, beside running nodes): storeUrl (no password) instead
    of storeRoot, tableBytes (per table, indexes included) instead of files, and
    nodes (each registered node: nodeId, publicUrl, host, pid, schemaVersion,
    startedAt in seconds since the epoch, heartbeatAgeS, live).
    """
    try:
        with open_store(store_location(store, store_url)) as opened:
            emit_json(opened.stats())
    except StoreAccessError as exc:
        raise click.ClickException(str(exc)) from None


def _postgres_backup_advice(url: str) -> str:
    """What to run instead of ``store backup`` for the PostgreSQL store at ``url``."""
    from taskplane.app import postgres_location

    where = postgres_location(url)
    return (
        f"the task store is the PostgreSQL database {where}; taskplane copies only SQLite "
        "stores, so nothing was copied. Back PostgreSQL up with its own tools: for a "
        f"logical copy, pg_dump --format=custom --file=taskplane.dump '{where}' "
        "(consistent while nodes run; restore with pg_restore into an empty database); "
        "for a physical copy, pg_basebackup with WAL archiving for point-in-time "
        "recovery. Passwords come from ~/.pgpass or PGPASSWORD."
    )
