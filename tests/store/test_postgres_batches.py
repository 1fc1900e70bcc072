"""The PostgreSQL batch runner (``taskplane.store.postgres.database.PgConnection``)
on the real server: an op that stands alone runs as its own statement's transaction
(no BEGIN, no COMMIT), any other in a transaction block; a session the server ended
is replaced before anything is written, on either path."""

from __future__ import annotations

import os
import resource
import select
from collections.abc import Callable
from typing import Any, ClassVar

import attrs
import psycopg
import pytest
from psycopg.pq import TransactionStatus

from taskplane.store.postgres.database import PgConnection, connect
from tests.support.pg import Cluster


@attrs.define
class Seen:
    """An op that records the session's transaction status when it runs, then
    writes one row."""

    statuses: list[TransactionStatus] = attrs.Factory(list)

    def __call__(self, conn: psycopg.Connection[Any]) -> int:
        self.statuses.append(conn.info.transaction_status)
        conn.execute("INSERT INTO seen DEFAULT VALUES")
        return len(self.statuses)


@attrs.define
class Alone(Seen):
    stands_alone: ClassVar[bool] = True


@pytest.fixture
def url(pg_cluster: Cluster) -> str:
    url = pg_cluster.fresh_store_url()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE seen (n serial PRIMARY KEY)")
    return url


def rows(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM seen").fetchone()
    assert row is not None
    return int(row[0])


def test_an_op_that_stands_alone_runs_without_a_transaction_block(url: str) -> None:
    session = PgConnection(url, connect(url))
    try:
        alone, other = Alone(), Seen()
        assert [r.unwrap() for r in session.run_batch([alone])] == [1]
        assert [r.unwrap() for r in session.run_batch([other])] == [1]
        pair = [Alone(), Alone()]
        two = session.run_batch(pair)  # in a batch of several: a transaction block
        assert alone.statuses == [TransactionStatus.IDLE]
        assert other.statuses == [TransactionStatus.INTRANS]
        assert [r.unwrap() for r in two] == [1, 1]
        assert [op.statuses for op in pair] == [[TransactionStatus.INTRANS]] * 2
        assert rows(url) == 4
    finally:
        session.close()


def end_session(url: str, session: PgConnection) -> None:
    """The server ends ``session`` (as a restart would), and its EOF has arrived."""
    pid = session_pid(session)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
    fileno: Callable[[], int] = session._conn.fileno  # type: ignore[union-attr]
    readable, _, _ = select.select([fileno()], [], [], 20)
    assert readable


def session_pid(session: PgConnection) -> int:
    conn = session._conn
    assert conn is not None
    return int(conn.info.backend_pid)


def test_a_session_the_server_ended_is_replaced_before_a_lone_write(url: str) -> None:
    # The EOF of an ended session is readable: the lone op takes the BEGIN path,
    # which opens a new session before anything is sent, so the write is not lost
    # and its outcome is known.
    session = PgConnection(url, connect(url))
    try:
        first = session_pid(session)
        end_session(url, session)
        alone = Alone()
        (done,) = session.run_batch([alone])
        assert done.unwrap() == 1
        assert alone.statuses == [TransactionStatus.INTRANS]  # the safe path
        assert session_pid(session) != first
        (again,) = session.run_batch([Alone()])
        assert again.unwrap() == 1
        assert rows(url) == 2
    finally:
        session.close()


def test_a_lone_write_on_a_session_past_descriptor_1024_still_stands_alone(url: str) -> None:
    # A node holding many client connections opens (or reopens, after a restart of
    # the server) a session whose descriptor is past select()'s FD_SETSIZE: the
    # check that the session is quiet must still answer, not raise.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.fail(f"the descriptor limit {hard} is below what this test needs (1200)")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    fillers = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    session = PgConnection(url, connect(url))
    try:
        assert session._conn is not None and session._conn.fileno() >= 1024
        alone = Alone()
        (done,) = session.run_batch([alone])
        assert done.unwrap() == 1
        assert alone.statuses == [TransactionStatus.IDLE]  # it stood alone
        assert rows(url) == 1
    finally:
        session.close()
        for fd in fillers:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_session_the_server_ended_is_replaced_before_a_statement_run_alone(url: str) -> None:
    # The ringer's session sits idle between rings; after a restart of the server its
    # next ring must not be lost on the ended session.
    session = PgConnection(url, connect(url))
    try:
        first = session_pid(session)
        end_session(url, session)
        alone = Alone()
        assert session.run_alone(alone).unwrap() == 1
        assert alone.statuses == [TransactionStatus.IDLE]
        assert session_pid(session) != first
        assert rows(url) == 1
    finally:
        session.close()
