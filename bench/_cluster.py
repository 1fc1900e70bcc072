"""taskplane on PostgreSQL for the benchmarks: one throwaway server, N nodes on it.

:func:`throwaway_postgres` starts the PostgreSQL server the tests start
(``tests/support/pg.py``: ``initdb`` into a temporary directory, a unix socket only,
the server's default durability, run as the ``postgres`` OS user when root) and
deletes it afterwards. :class:`Nodes` runs ``count`` ``taskplane serve`` processes on
one database of it (each its own store root, port and ``TASKPLANE_NODE_ID``, the same
``A2A_PUBLIC_URL``, as behind a load balancer), with the shape of ``_common.Server``
that ``compare.py`` uses: ``start``, ``stop``, ``cpu_seconds`` (all nodes summed),
``base_url`` (the first node's) and ``base_urls`` (every node's).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from _common import REPO, Server

PUBLIC_URL = "http://taskplane.bench.invalid"
"""The one interface URL every node advertises (a load balancer's, never dialled)."""


@contextmanager
def throwaway_postgres() -> Iterator[Any]:
    """A running throwaway PostgreSQL server (``tests.support.pg.Cluster``): its
    ``fresh_store_url()`` gives a new empty database schema."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from tests.support.pg import start_cluster

    with start_cluster() as cluster:
        yield cluster


def postgres_version(cluster: Any) -> str:
    """``SELECT version()`` of the throwaway server, first words."""
    import psycopg

    with psycopg.connect(cluster.url(), autocommit=True) as conn:
        row = conn.execute("SELECT version()").fetchone()
    return " ".join(str(row[0] if row else "?").split()[:2])


def _cpu_seconds_of(pid: int) -> tuple[int, float]:
    """(parent pid, user + system CPU seconds) of ``pid``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def server_cpu_seconds(data_dir: Path) -> float | None:
    """CPU seconds so far of the PostgreSQL server of ``data_dir``: its postmaster and
    every live child (backends, WAL writer, checkpointer); ``None`` if not running."""
    try:
        postmaster = int((data_dir / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    total = 0.0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            parent, cpu = _cpu_seconds_of(int(entry))
        except (OSError, ValueError, IndexError):
            continue  # exited meanwhile
        if int(entry) == postmaster or parent == postmaster:
            total += cpu
    return total


def postgres_cpu_seconds(server: Any) -> float | None:
    """The database server's CPU seconds so far for a :class:`Nodes` server (``None``
    for any other: its store is its own process)."""
    data_dir = getattr(server, "data_dir", None)
    return None if data_dir is None else server_cpu_seconds(data_dir)


def seed_postgres(url: str, count: int, principal: str) -> None:
    """Migrate the database at ``url`` and insert ``count`` COMPLETED Tasks of
    ``principal`` in one transaction (the ``list`` workload's stored Tasks)."""
    import time
    import uuid

    import attrs

    from taskplane.model.enums import Role, TaskState
    from taskplane.model.lifecycle import new_task
    from taskplane.model.types import Message, Part, TaskStatus
    from taskplane.scope import Scope
    from taskplane.store.postgres import tasks
    from taskplane.store.postgres.database import connect
    from taskplane.store.postgres.schema import migrate

    conn = connect(url)
    try:
        migrate(conn, where="bench")
        now = int(time.time() * 1000)
        scope = Scope("", principal)
        with conn.transaction():
            for i in range(count):
                message = Message(
                    message_id=f"seed-{i}", role=Role.ROLE_USER, parts=(Part.from_text("hello"),)
                )
                task = new_task(str(uuid.uuid4()), str(uuid.uuid4()), message, now - count + i)
                done = TaskStatus(
                    state=TaskState.TASK_STATE_COMPLETED, timestamp=task.status.timestamp
                )
                tasks.insert(conn, attrs.evolve(task, status=done), scope, "a2a", now)
    finally:
        conn.close()


class Nodes:
    """``count`` taskplane nodes on the PostgreSQL database ``url``.

    Args:
        home: a private directory (one subdirectory per node: credentials, store
            root, log).
        url: the database's libpq URL (``TASKPLANE_STORE_URL`` of every node).
        count: nodes to run.
        label: the server's name in the results (``taskplane-pg``, ``taskplane-pg2``).
        cwd: the checkout whose ``taskplane`` package runs.
        data_dir: the database server's data directory (its CPU is measured apart).
    """

    def __init__(
        self,
        home: Path,
        url: str,
        count: int,
        *,
        label: str,
        cwd: Path,
        data_dir: Path | None = None,
    ) -> None:
        self.label = label
        self.data_dir = data_dir
        self.nodes: list[Server] = []
        for i in range(count):
            node_home = home / f"node-{i + 1}"
            node_home.mkdir()
            env = {
                "TASKPLANE_STORE_URL": url,
                "A2A_PUBLIC_URL": PUBLIC_URL,
                "TASKPLANE_NODE_ID": f"bench-node-{i + 1}",
            }
            self.nodes.append(
                Server(
                    node_home,
                    node_home / "store",
                    label=f"{label}-{i + 1}",
                    cwd=cwd,
                    extra_env=env,
                )
            )

    @property
    def base_url(self) -> str:
        """The first node's URL (setup requests; load goes to every node)."""
        return self.nodes[0].base_url

    @property
    def base_urls(self) -> list[str]:
        return [node.base_url for node in self.nodes]

    def start(self, *, ready_timeout_s: float = 120.0) -> Nodes:
        """Start the nodes one after the other (the first migrates the schema)."""
        for node in self.nodes:
            node.start(ready_timeout_s=ready_timeout_s)
        return self

    def cpu_seconds(self) -> float:
        """User + system CPU seconds of every node so far."""
        return sum(node.cpu_seconds() for node in self.nodes)

    def node_cpu_seconds(self) -> list[float]:
        return [node.cpu_seconds() for node in self.nodes]

    def stop(self) -> int | None:
        """Stop every node (our own processes only); the last exit code."""
        code: int | None = None
        for node in self.nodes:
            code = node.stop()
        return code
