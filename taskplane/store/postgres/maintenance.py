"""Operator access to a PostgreSQL store beside its running node: read Tasks, check,
compact, measure, list and resolve deliveries.

For the command line's ``tasks``, ``store`` and ``deliveries`` commands. Unlike a
SQLite store root, a PostgreSQL database may be used by these commands while a node
runs (design rule "One process per store" binds nodes, not operator sessions), so
nothing here registers as a node (:mod:`taskplane.store.postgres.nodes`) and
nothing here migrates: the schema must be the one this taskplane writes, else the
command is refused (an older schema is migrated by starting a node of this version;
a newer one needs a newer taskplane).

What each operation does beside a running node:

- Reads (``select_tasks``, ``full_task``, ``check``, ``stats``) run in one
  ``REPEATABLE READ READ ONLY`` transaction each: one consistent snapshot, no row
  locks, nothing written. Since a node commits a Task with its claim and journal
  records atomically, a check never sees half an acceptance.
- ``compact`` runs the node's own retention op
  (:func:`taskplane.store.postgres.compaction.compact`) in the node's own batch
  transaction (:class:`~taskplane.store.postgres.database.PgConnection`), exactly as the
  maintenance leader does; it removes only what retention no longer keeps (terminal Tasks
  untouched for 30 days and their records), so nothing a node holds in memory as live
  work is removed. ``vacuum`` then runs plain ``VACUUM (ANALYZE)``, which never blocks
  the node's reads and writes (never ``VACUUM FULL``).
- ``resolve_delivery`` runs the source store's own op
  (:func:`taskplane.store.postgres.sources.resolve_delivery`): the row is locked
  (``SELECT ... FOR UPDATE``) and changed only if still ``ambiguous``, a state a node
  never moves a delivery out of by itself.

Blocking I/O throughout: a short-lived CLI process calls these directly.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import attrs
import psycopg

from taskplane.errors import StoreVersionError
from taskplane.store import inspection
from taskplane.store.postgres import compaction, nodes, sources, tasks
from taskplane.store.postgres.database import PgConnection, connect, redacted, translate
from taskplane.store.postgres.schema import SCHEMA_VERSION, Connection, current_version
from taskplane.store.source_store import DeliveryRow

T = TypeVar("T")


class NoStore(FileNotFoundError):
    """The database holds no taskplane store (nothing is created)."""


def open_session(url: str) -> Connection:
    """One autocommit session on the existing store at ``url``: its schema checked,
    never migrated, not registered as a node.

    Raises:
        NoStore: the database holds no taskplane store.
        StoreVersionError: its schema is not the one this taskplane writes.
        StoreUnavailable: the server cannot be reached.
    """
    where = redacted(url)
    conn = connect(url)
    try:
        try:
            version = current_version(conn)
        except psycopg.Error as exc:
            raise translate(exc, "read") from exc
        if version == 0:
            raise NoStore(
                f"the database {where} holds no taskplane store (start a node on it once)"
            )
        if version > SCHEMA_VERSION:
            raise StoreVersionError(
                f"the store at {where} has schema_version {version}, but this taskplane "
                f"understands at most {SCHEMA_VERSION}; use a newer taskplane"
            )
        if version < SCHEMA_VERSION:
            raise StoreVersionError(
                f"the store at {where} has schema_version {version}, older than this "
                f"taskplane's {SCHEMA_VERSION}; start a node of this version once to "
                "migrate it (operator commands never migrate)"
            )
    except BaseException:
        conn.close()
        raise
    return conn


@contextmanager
def open_maintenance(url: str) -> Iterator[PgMaintenance]:
    """The operator view of the store at ``url`` for the block (see the module).

    Raises (on entering): see :func:`open_session`.
    """
    maintenance = PgMaintenance(open_session(url), url)
    try:
        yield maintenance
    finally:
        maintenance.close()


def _select_tasks(
    conn: Connection, where: dict[str, str | None], limit: int | None
) -> list[dict[str, Any]]:
    """Summaries of the matching Tasks, newest status first: the SQLite store's shape
    (``{"id", "contextId", "state", "tenant", "principal", "source",
    "statusTimestamp", "createdAtMs", "updatedAtMs"}``)."""
    used = [(column, value) for column, value in where.items() if value is not None]
    clauses = ("WHERE " + " AND ".join(f"{c} = %s" for c, _ in used)) if used else ""
    args: list[object] = [v for _, v in used]
    sql = (
        "SELECT task_id, context_id, state, tenant, principal, source, status_ts,"
        f" created_at_ms, updated_at_ms FROM tasks {clauses}"
        " ORDER BY status_ts DESC, task_id DESC"
    )
    if limit is not None:
        sql += " LIMIT %s"
        args.append(limit)
    keys = ("id", "contextId", "state", "tenant", "principal", "source", "statusTimestamp")
    return [
        {**dict(zip(keys, row[:7], strict=True)), "createdAtMs": row[7], "updatedAtMs": row[8]}
        for row in conn.execute(sql, args).fetchall()
    ]


def _full_task(conn: Connection, task_id: str) -> dict[str, Any] | None:
    """See :func:`taskplane.store.inspection.task_detail`."""
    return inspection.task_detail(tasks.load(conn, task_id))


def _check(conn: Connection) -> list[str]:
    """The store's invariants (PostgreSQL keeps its own page integrity): every
    accepted claim has its Task, no journal record or origin outlives its Task, and
    every Task row decodes to a Task whose id, contextId and state match its columns."""
    return inspection.invariant_problems(
        lambda sql: conn.execute(sql).fetchall(),
        lambda task_id: tasks.load(conn, task_id),
        task_order=" ORDER BY task_id",
    )


def _tables(conn: Connection) -> list[str]:
    """The store's tables (those of the session's current schema), by name."""
    return [
        row[0]
        for row in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() ORDER BY tablename"
        ).fetchall()
    ]


def _table_bytes(conn: Connection) -> dict[str, int]:
    """Bytes on disk per table, its indexes and TOAST included."""
    return {
        table: _scalar(conn, "SELECT pg_total_relation_size(%s::regclass)", table)
        for table in _tables(conn)
    }


def _scalar(conn: Connection, sql: str, *args: object) -> int:
    row = conn.execute(sql, args).fetchone()
    return int(row[0]) if row else 0


def _stats(conn: Connection, where: str) -> dict[str, Any]:
    """Sizes and counts; the SQLite shape with ``storeUrl`` (no password) for
    ``storeRoot`` and ``tableBytes`` for ``files``, plus ``nodes`` (the registry)."""

    sizes = _table_bytes(conn)
    rows = {t: _scalar(conn, f'SELECT count(*) FROM "{t}"') for t in sizes}
    return {
        "storeUrl": where,
        "schemaVersion": current_version(conn),
        "tableBytes": sizes,
        "databaseBytes": sum(sizes.values()),
        "rows": rows,
        **inspection.grouped_counts(lambda sql: conn.execute(sql).fetchall()),
        "nodes": [
            {
                "nodeId": n.node_id,
                "publicUrl": n.public_url,
                "host": n.host,
                "pid": n.pid,
                "schemaVersion": n.schema_version,
                "startedAt": n.started_at_s,
                "heartbeatAgeS": round(n.heartbeat_age_s, 3),
                "live": n.live,
            }
            for n in nodes.list_nodes(conn)
        ],
    }


class PgMaintenance:
    """The operator view of one PostgreSQL store (see :func:`open_maintenance`); the
    methods of the SQLite store's ``OfflineStore`` but ``backup``, with its shapes.

    Every method raises :class:`StoreUnavailable` when the server fails the
    statement (the message has no password).

    Args:
        conn: a session from :func:`open_session`, for reads and ``VACUUM``.
        url: the store's URL, for the write session, opened on the first write (never
            shown: :attr:`where` is).
    """

    def __init__(self, conn: Connection, url: str) -> None:
        self.where = redacted(url)
        """The database, for messages (no password)."""
        self._conn = conn
        self._writes = PgConnection(url)

    def select_tasks(
        self,
        *,
        principal: str | None = None,
        context_id: str | None = None,
        state: str | None = None,
        tenant: str | None = None,
        limit: int | None = None,
    ) -> list[dict[str, Any]]:
        """Summaries of the matching Tasks, newest status first (``None`` matches all)."""
        where = {"principal": principal, "context_id": context_id, "state": state}
        return self._read(lambda conn: _select_tasks(conn, {**where, "tenant": tenant}, limit))

    def full_task(self, task_id: str) -> dict[str, Any] | None:
        """``{"tenant", "principal", "source", "version", "updatedAtMs", "task"}`` with
        the whole Task (ProtoJSON), or ``None`` if unknown."""
        return self._read(lambda conn: _full_task(conn, task_id))

    def check(self) -> list[str]:
        """Invariant problems, one line each (see :func:`_check`), from one snapshot."""
        return self._read(_check)

    def stats(self) -> dict[str, Any]:
        """Sizes and counts from one snapshot (see :func:`_stats`)."""
        return self._read(lambda conn: _stats(conn, self.where))

    def compact(self, *, vacuum: bool) -> dict[str, Any]:
        """The retention op now, in the node's batch transaction, then optionally plain
        ``VACUUM (ANALYZE)`` of the store's tables.

        Returns ``{"removed": {table: rows}, "bytesBefore", "bytesAfter"}`` (bytes:
        the store's tables, indexes included).
        """
        before = sum(self._read(_table_bytes).values())
        now_ms = time.time_ns() // 1_000_000
        report = self._write(lambda conn: compaction.compact(conn, now_ms))
        if vacuum:
            conn = self._conn
            try:
                names = ", ".join(f'"{t}"' for t in _tables(conn))
                conn.execute(f"VACUUM (ANALYZE) {names}")
            except psycopg.Error as exc:
                raise translate(exc, "vacuum") from exc
        return {
            "removed": attrs.asdict(report),
            "bytesBefore": before,
            "bytesAfter": sum(self._read(_table_bytes).values()),
        }

    def list_deliveries(self, state: str | None) -> tuple[DeliveryRow, ...]:
        """Every delivery (or those in ``state``), newest change first."""
        return self._read(lambda conn: sources.list_deliveries(conn, state))

    def resolve_delivery(
        self, delivery_id: str, now_ms: int, *, delivered_as: str | None
    ) -> DeliveryRow:
        """Resolve the ``ambiguous`` delivery ``delivery_id`` (the source store's op).

        Raises:
            InvalidRequest: no such delivery, or it is not ``ambiguous``.
        """
        return self._write(
            lambda conn: sources.resolve_delivery(conn, delivery_id, now_ms, delivered_as)
        )

    def close(self) -> None:
        """Close both sessions (idempotent)."""
        try:
            self._conn.close()
        finally:
            self._writes.close()

    def _read(self, read: Callable[[Connection], T]) -> T:
        """``read`` in one ``REPEATABLE READ READ ONLY`` transaction (one snapshot)."""
        conn = self._conn
        try:
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            try:
                return read(conn)
            finally:
                if not conn.broken:
                    conn.execute("ROLLBACK")
        except psycopg.Error as exc:
            raise translate(exc, "read") from exc

    def _write(self, op: Callable[[Connection], T]) -> T:
        """``op`` in the store's own batch transaction (one op, one COMMIT)."""
        result: T = self._writes.run_batch([op])[0].unwrap()
        return result
