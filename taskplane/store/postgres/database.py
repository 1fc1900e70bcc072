"""The PostgreSQL connections of one store, and the batch transaction each runs.

Blocking: every method here talks to the server and must run in a worker thread
owned by the store actor; one connection is used by one thread at a time. Driver
errors are translated to taskplane errors here, at the backend boundary, and
nowhere else (:func:`translate`).

Durability is the server's: a COMMIT returns once its WAL is flushed
(``synchronous_commit`` as the server is configured; ``on`` is PostgreSQL's
default). Each connection runs in autocommit mode and opens its transactions
itself, so no statement runs outside a transaction this module began.
"""

from __future__ import annotations

import logging
import select
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import outcome
import psycopg
from psycopg import conninfo

from taskplane.errors import ActorGone, StoreUnavailable, TaskplaneError
from taskplane.store.postgres.schema import Connection, migrate

log = logging.getLogger("taskplane.store")

Op = Callable[[Connection], Any]
"""A unit of store work: runs inside a transaction, returns a value or raises."""

DEFAULT_CONNECTIONS = 2
"""Connections (each served by one worker thread at a time) a store opens by default:
the primary, which commits every batch while it keeps up, and one that takes over
while the primary is held up by a slow op (design rule "A batch waits for the busy
session", :class:`~taskplane.store.postgres.actor.SessionPool`)."""

CONNECT_TIMEOUT_S = 10


def redacted(url: str) -> str:
    """``url`` without its password, for messages and logs."""
    try:
        params = conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "<an unparsable PostgreSQL URL>"
    params.pop("password", None)
    return conninfo.make_conninfo("", **{k: v for k, v in params.items() if v is not None})


def connect(url: str) -> Connection:
    """Open one autocommit connection to ``url`` (a libpq URL or conninfo string).

    Raises:
        StoreUnavailable: the server refused or could not be reached (translated).
    """
    try:
        return psycopg.connect(
            url,
            autocommit=True,
            connect_timeout=CONNECT_TIMEOUT_S,
            application_name="taskplane",
            # Over TCP, notice a server that vanished (no FIN) in about 25 s, not hours.
            keepalives=1,
            keepalives_idle=10,
            keepalives_interval=5,
            keepalives_count=3,
        )
    except psycopg.Error as exc:
        raise StoreUnavailable(
            f"cannot connect to the task store at {redacted(url)}: {_first_line(exc)}"
        ) from exc


class PgConnection:
    """One server session and the group-commit transaction it runs.

    Reconnects on the next batch after the session broke (server restart, network),
    so a store survives a database restart; until the server is back each batch
    fails with :class:`StoreUnavailable`.
    """

    def __init__(self, url: str, conn: Connection | None = None) -> None:
        self._url = url
        self._conn = conn

    @property
    def url(self) -> str:
        """The libpq URL this session (re)connects to."""
        return self._url

    def run_batch(self, ops: Sequence[Op]) -> list[outcome.Outcome[Any]]:
        """Run ``ops`` in one transaction with one COMMIT: group commit.

        Each op succeeds or fails alone. The ops first run one after the other with
        nothing between them (one round trip per statement; the ops of a
        :class:`FusableOp` kind together, as one statement); if any raises, that
        attempt is rolled back whole and, for a batch of several, run again with
        each op inside its own SAVEPOINT, so the failing op is rolled back alone and
        the others commit. (Ops are functions of the session only, so running one
        again after a rollback is safe.) If BEGIN or COMMIT fails, or the session
        breaks, every op fails and nothing is recorded; a session lost *during*
        COMMIT leaves the outcome unknown (:class:`ActorGone`).

        A batch of one op of a :class:`StandsAlone` kind (one statement, atomic by
        itself) runs without BEGIN or COMMIT: the statement is its own transaction,
        durable when it returns, one round trip instead of three.

        Returns:
            one ``outcome.Value`` or ``outcome.Error`` per op, in order. Errors are
            :class:`TaskplaneError` (the op's verdict), ``StoreUnavailable`` or
            ``ActorGone``.
        """
        if len(ops) == 1 and getattr(type(ops[0]), "stands_alone", False) and self._quiet():
            return [self._run_standing_alone(ops[0])]
        try:
            conn = self._begin()
            results = self._run_ops(conn, ops, savepoints=False)
            if len(results) < len(ops) or any(isinstance(r, outcome.Error) for r in results):
                self._rollback()  # nothing of this attempt stays
                if len(ops) == 1:
                    return results
                conn = self._begin()
                results = self._run_ops(conn, ops, savepoints=True)
        except StoreUnavailable as exc:  # could not reconnect
            return [outcome.Error(exc) for _ in ops]
        except psycopg.Error as exc:  # the session failed: the batch is lost
            self._rollback()
            return [outcome.Error(translate(exc, "write")) for _ in ops]
        except BaseException:
            self._rollback()
            raise
        try:
            conn.execute("COMMIT")
        except psycopg.Error as exc:
            broken = conn.broken
            self._rollback()
            if broken:
                log.error(
                    "store commit in doubt: %s", exc, extra={"event": "store_commit_in_doubt"}
                )
                gone = ActorGone(
                    "the task store's connection was lost during COMMIT; the outcome is "
                    "unknown (retry: every operation is idempotent or version-checked)"
                )
                return [outcome.Error(gone) for _ in ops]
            return [outcome.Error(translate(exc, "commit")) for _ in ops]
        return results

    def _quiet(self) -> bool:
        """The session is open and its socket has nothing to read: no sign that the
        server ended it (a restart's EOF shows as readable), so a statement sent now
        is not lost before it is run. Otherwise the batch takes the BEGIN path,
        which replaces a broken session safely, before anything is written."""
        conn = self._conn
        if conn is None or conn.closed:
            return False
        # poll, not select: select refuses descriptors from FD_SETSIZE (1024) up,
        # which a node holding many client connections reaches when it reconnects.
        poller = select.poll()
        poller.register(conn.fileno(), select.POLLIN)
        return not poller.poll(0)

    def _run_standing_alone(self, op: Op) -> outcome.Outcome[Any]:
        """``op`` (one statement) as its own implicit transaction: it committed if it
        returned; if it raised, it wrote nothing (its statement failed or, by its
        kind's promise, wrote nothing before raising); a session lost meanwhile
        leaves the outcome unknown (:class:`ActorGone`)."""
        conn = self._session()
        try:
            return outcome.Value(op(conn))
        except psycopg.Error as exc:
            if conn.broken:
                self._drop_broken()
                log.error("store write in doubt: %s", exc, extra={"event": "store_commit_in_doubt"})
                return outcome.Error(
                    ActorGone(
                        "the task store's connection was lost during a write; the outcome"
                        " is unknown (retry: every operation is idempotent or"
                        " version-checked)"
                    )
                )
            return outcome.Error(translate(exc, "write"))
        except Exception as exc:
            return outcome.Error(_as_store_error(exc))

    def run_alone(self, op: Op) -> outcome.Outcome[Any]:
        """Run ``op`` outside any transaction block: each of its statements is its own
        implicit transaction, committed by the server as it ends (one round trip per
        statement, no BEGIN or COMMIT). Only for ops whose statements stand alone
        (the doorbell's NOTIFY). A session the server ended (its EOF readable, as
        after a restart) is replaced first, so the first ring after a restart is
        not lost.

        Returns:
            ``outcome.Value`` of the op, or ``outcome.Error`` (``StoreUnavailable``, or
            the op's own error).
        """
        try:
            if self._conn is not None and not self._quiet():
                self.close()  # the server ended it (a restart): replace it before sending
            conn = self._session()
            return outcome.Value(op(conn))
        except StoreUnavailable as exc:  # could not reconnect
            return outcome.Error(exc)
        except psycopg.Error as exc:
            self._drop_broken()
            return outcome.Error(translate(exc, "write"))
        except Exception as exc:
            return outcome.Error(exc)

    def _run_ops(
        self, conn: Connection, ops: Sequence[Op], *, savepoints: bool
    ) -> list[outcome.Outcome[Any]]:
        """Each op's outcome; without savepoints, stops at the first that raises.

        Raises:
            psycopg.Error: the session broke (nothing of the transaction stays).
        """
        results: list[outcome.Outcome[Any]] = []
        fused: dict[int, Any] = {}
        if not savepoints:
            try:
                fused = _run_fused(conn, ops)
            except Exception as exc:
                if conn.broken or isinstance(exc, psycopg.OperationalError):
                    raise
                return [outcome.Error(_as_store_error(exc))]
        for index, op in enumerate(ops):
            if index in fused:
                results.append(outcome.Value(fused[index]))
                continue
            if savepoints:
                conn.execute("SAVEPOINT op")
            try:
                value = op(conn)
            except Exception as exc:
                if conn.broken or isinstance(exc, psycopg.OperationalError):
                    raise
                results.append(outcome.Error(_as_store_error(exc)))
                if not savepoints:
                    return results
                conn.execute("ROLLBACK TO SAVEPOINT op")
            else:
                results.append(outcome.Value(value))
            if savepoints:
                conn.execute("RELEASE SAVEPOINT op")
        return results

    def close(self) -> None:
        """Close the session (idempotent)."""
        if self._conn is not None:
            conn, self._conn = self._conn, None
            conn.close()

    def _begin(self) -> Connection:
        """BEGIN on the session; a session found broken (the server restarted since
        the last batch) is replaced once, since nothing was sent on it yet."""
        conn = self._session()
        try:
            conn.execute("BEGIN")
        except psycopg.OperationalError:
            if not conn.broken:
                raise
            self.close()
            conn = self._session()
            conn.execute("BEGIN")
        return conn

    def _session(self) -> Connection:
        if self._conn is None or self._conn.closed:
            self._conn = connect(self._url)
        return self._conn

    def _drop_broken(self) -> None:
        if self._conn is not None and self._conn.broken:
            self.close()

    def _rollback(self) -> None:
        conn = self._conn
        if conn is None:
            return
        try:
            if not conn.broken:
                conn.execute("ROLLBACK")
        except psycopg.Error:
            log.exception("rollback failed", extra={"event": "store_rollback_failed"})
        self._drop_broken()


class StandsAlone(Protocol):
    """An op kind that is one statement, atomic by itself: it writes only when it
    succeeds, and when it raises after its statement ran, that statement wrote
    nothing. A batch of one such op needs no transaction block
    (:meth:`PgConnection.run_batch`); marked by a true class attribute
    ``stands_alone``."""

    stands_alone: bool

    def __call__(self, conn: Connection) -> Any: ...


class FusableOp(Protocol):
    """An op kind whose ops of one batch may run together, as one statement.

    ``run_fused(conn, ops)`` returns each op's value, in order, exactly as running
    each alone would; if it raises, the batch runs its ops one by one instead.
    """

    def __call__(self, conn: Connection) -> Any: ...

    @staticmethod
    def run_fused(conn: Connection, ops: Sequence[Any]) -> list[Any]: ...


def _run_fused(conn: Connection, ops: Sequence[Op]) -> dict[int, Any]:
    """The values of the ops of ``ops`` that ran fused: those of a
    :class:`FusableOp` kind of which the batch holds several, by index."""
    kinds: dict[type, list[int]] = {}
    for index, op in enumerate(ops):
        if callable(getattr(type(op), "run_fused", None)):
            kinds.setdefault(type(op), []).append(index)
    values: dict[int, Any] = {}
    for kind, indices in kinds.items():
        if len(indices) > 1:
            fusable: type[FusableOp] = kind
            found = fusable.run_fused(conn, [ops[i] for i in indices])
            values.update(zip(indices, found, strict=True))
    return values


def open_connections(url: str, count: int = DEFAULT_CONNECTIONS) -> list[PgConnection]:
    """``count`` sessions to ``url``, the schema migrated by the first.

    Raises:
        StoreVersionError: the database was written by a newer taskplane.
        StoreUnavailable: the server cannot be reached, or the migration failed.
    """
    where = redacted(url)
    first = connect(url)
    opened = [PgConnection(url, first)]
    try:
        try:
            migrate(first, where=where)
        except psycopg.Error as exc:
            raise StoreUnavailable(
                f"cannot migrate the task store at {where}: {_first_line(exc)}"
            ) from exc
        opened += [PgConnection(url, connect(url)) for _ in range(count - 1)]
    except BaseException:
        for session in opened:
            session.close()
        raise
    return opened


def translate(exc: psycopg.Error, stage: str) -> StoreUnavailable:
    """The taskplane error for a driver error at ``stage`` (``begin``, ``write``,
    ``commit``): the transaction did not commit and recorded nothing."""
    log.error(
        "store %s failed: %s",
        stage,
        _first_line(exc),
        extra={"event": "store_write_failed", "stage": stage, "sqlstate": exc.sqlstate},
    )
    return StoreUnavailable(
        f"the task store could not {stage} ({_first_line(exc)}); nothing was recorded"
    )


def _as_store_error(exc: Exception) -> Exception:
    if isinstance(exc, TaskplaneError):
        return exc
    if isinstance(exc, psycopg.Error):
        return translate(exc, "write")
    return exc


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
