"""Several real ``taskplane serve`` nodes on one PostgreSQL database, and the faults
the cluster drill deals them.

Built on the end-to-end launcher (:mod:`tests.e2e.taskplane_proc`: a scrubbed
environment, stdout/stderr in files, bounded waits) and on the throwaway server of
:mod:`tests.support.pg`. Each node of a :class:`NodeCluster` is a slot: its node id
(``TASKPLANE_NODE_ID``, kept across restarts, as a service manager restarts a node),
its port on 127.0.0.1 (kept too, as a load balancer's backend list is) and its store
root; every incarnation of the slot is one :class:`NodeLife` with its own log files.
Every node gets the same ``A2A_PUBLIC_URL`` (the address of a load balancer in front
of them), the same credentials, the scripted agent, ``A2A_AGENT_CONCURRENCY`` and a
short ``TASKPLANE_LEASE_TTL_S``.

Faults: :meth:`NodeCluster.kill` (SIGKILL and reap), :meth:`NodeCluster.restart`
(start the slot again and wait until its Agent Card answers), :meth:`NodeCluster.pause`
/ :meth:`NodeCluster.resume` (SIGSTOP / SIGCONT) and
:meth:`NodeCluster.restart_database` (an immediate stop of PostgreSQL, as a crash, then
a start on the same data). Every fault is stamped with wall-clock time
(``time.time()``, seconds) in the life it hit, the clock of the nodes' JSON log
``ts`` fields, so the drill can place log events against the faults.

Every wait has a deadline; :meth:`NodeCluster.close` resumes paused nodes and stops
every process (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Mapping
from pathlib import Path

import attrs
import trio

from tests.e2e.taskplane_proc import (
    READY_DEADLINE_S,
    STOP_GRACE_S,
    Spawner,
    TaskplaneProcess,
    free_port,
    write_credentials,
)
from tests.support.pg import Cluster

TOKEN = "drill-token-0123456789abcdef"
PRINCIPAL = "drill"
START_ATTEMPTS = 4
"""Starts of one incarnation before a restart is given up (a start refused while the
slot's previous life still holds its node id, or its port still in use)."""


@attrs.define
class NodeLife:
    """One incarnation of a node slot.

    Attributes:
        incarnation: 0 for the first start of the slot, then 1, 2, ...
        process: the ``taskplane serve`` child.
        started_at / ready_at / ended_at: wall-clock seconds (``time.time()``) of the
            start, of the first answer of its Agent Card, of its death (``None``: not
            ready yet, or still alive).
        ended_by: ``"SIGKILL"``, ``"stop"`` (the cluster's close), ``"exit"`` (it
            exited on its own) or ``None``.
        pauses: ``(SIGSTOP, SIGCONT)`` wall-clock pairs; the second is ``None``
            while it is stopped.
    """

    incarnation: int
    process: TaskplaneProcess
    started_at: float
    ready_at: float | None = None
    ended_at: float | None = None
    ended_by: str | None = None
    pauses: list[tuple[float, float | None]] = attrs.Factory(list)

    @property
    def alive(self) -> bool:
        return self.ended_at is None and self.process.returncode is None


@attrs.define
class Node:
    """A node slot: its id, port, store root and its lives, oldest first."""

    index: int
    node_id: str
    port: int
    store_root: Path
    lives: list[NodeLife] = attrs.Factory(list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def life(self) -> NodeLife:
        """The newest life (raises ``IndexError`` before the first start)."""
        return self.lives[-1]

    @property
    def up(self) -> bool:
        """Started, ready, alive and not paused."""
        if not self.lives:
            return False
        life = self.life
        paused = bool(life.pauses) and life.pauses[-1][1] is None
        return life.alive and life.ready_at is not None and not paused


class NodeStartFailed(Exception):
    """A node slot did not get ready within :data:`START_ATTEMPTS` starts; the message
    carries the last life's exit status and output."""


class NodeCluster:
    """``nodes`` taskplane nodes on ``store_url`` of the PostgreSQL server ``database``.

    Args:
        spawner: starts the processes (their files go under its root).
        database: the PostgreSQL server (for :meth:`restart_database`).
        store_url: the libpq URL every node is given (``TASKPLANE_STORE_URL``).
        nodes: how many slots.
        lease_ttl_s: ``TASKPLANE_LEASE_TTL_S``, seconds.
        concurrency: ``A2A_AGENT_CONCURRENCY`` of each node.
        extra_env: more variables for every node (e.g. ``A2A_BLOCKING_TIMEOUT_MS``).
    """

    def __init__(
        self,
        spawner: Spawner,
        database: Cluster,
        store_url: str,
        *,
        nodes: int = 3,
        lease_ttl_s: float = 2.0,
        concurrency: int = 4,
        extra_env: Mapping[str, str] | None = None,
    ) -> None:
        self.spawner, self.database, self.store_url = spawner, database, store_url
        self.lease_ttl_s = lease_ttl_s
        self.concurrency = concurrency
        self.extra_env = dict(extra_env or {})
        self.credentials = write_credentials(
            spawner.root / "cluster-credentials.json", [(TOKEN, PRINCIPAL)]
        )
        self.public_url = f"http://127.0.0.1:{free_port()}"  # the balancer's address
        self.nodes = [
            Node(i, f"drill-node-{i}", free_port(), spawner.root / f"node-{i}-root")
            for i in range(nodes)
        ]
        self.database_restarts: list[tuple[float, float]] = []
        self.notes: list[str] = []

    @property
    def auth_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {TOKEN}", "A2A-Version": "1.0"}

    def env(self, node: Node) -> dict[str, str]:
        """The environment of ``node``'s process."""
        return self.spawner.env(
            A2A_SERVER="1",
            A2A_CREDENTIALS_PATH=str(self.credentials),
            A2A_HOST="127.0.0.1",
            A2A_PORT=str(node.port),
            A2A_PUBLIC_URL=self.public_url,
            A2A_AGENT_RUNTIME="scripted",
            A2A_AGENT_CONCURRENCY=str(self.concurrency),
            CHANNELS_TASK_STORE_PATH=str(node.store_root),
            TASKPLANE_STORE_URL=self.store_url,
            TASKPLANE_NODE_ID=node.node_id,
            TASKPLANE_LEASE_TTL_S=f"{self.lease_ttl_s:g}",
            **self.extra_env,
        )

    # ---- lifecycle

    async def start_all(self) -> None:
        """Start every slot, one after the other (the first migrates the schema), and
        wait until each is ready.

        Raises:
            NodeStartFailed: a slot did not get ready.
        """
        for node in self.nodes:
            await self.restart(node)

    async def restart(self, node: Node) -> NodeLife:
        """Start a new life of ``node`` (its previous one must be dead) and wait until
        its Agent Card answers. A start that exits first (its node id still held by
        the dead life's registration, its port not yet free) is tried again after a
        lease length, :data:`START_ATTEMPTS` times in all; each refusal is noted.

        Raises:
            NodeStartFailed: no start got ready.
        """
        if node.lives and node.life.alive:
            raise RuntimeError(f"{node.node_id} is still alive")
        last = ""
        for attempt in range(START_ATTEMPTS):
            life = self._start(node)
            try:
                await trio.to_thread.run_sync(life.process.wait_ready, node.url, READY_DEADLINE_S)
            except AssertionError as exc:
                await self._reap(life, "exit")
                last = str(exc)[-3000:]
                self.notes.append(
                    f"{node.node_id} start {life.incarnation} (attempt {attempt + 1}) did not "
                    f"get ready (exit {life.process.returncode}): {_last_line(life)}"
                )
                await trio.sleep(self.lease_ttl_s)  # a dead life's leases run out
                continue
            life.ready_at = time.time()
            return life
        raise NodeStartFailed(
            f"{node.node_id} did not start in {START_ATTEMPTS} attempts; last:\n{last}"
        )

    def _start(self, node: Node) -> NodeLife:
        process = self.spawner.start(("serve",), self.env(node))
        life = NodeLife(len(node.lives), process, time.time())
        node.lives.append(life)
        return life

    async def _reap(self, life: NodeLife, why: str) -> None:
        def wait() -> None:
            try:
                life.process.proc.wait(timeout=STOP_GRACE_S)
            except Exception:
                life.process.proc.kill()
                life.process.proc.wait(timeout=STOP_GRACE_S)

        await trio.to_thread.run_sync(wait)
        if life.ended_at is None:
            life.ended_at, life.ended_by = time.time(), why

    async def kill(self, node: Node) -> None:
        """SIGKILL ``node``'s life (resumed first if paused: a stopped process dies
        at once too, but its death time is then the kill) and reap it."""
        life = node.life
        stamp = time.time()
        life.process.proc.send_signal(signal.SIGKILL)
        if life.pauses and life.pauses[-1][1] is None:
            life.pauses[-1] = (life.pauses[-1][0], stamp)
        life.ended_at, life.ended_by = stamp, "SIGKILL"
        await self._reap(life, "SIGKILL")

    def pause(self, node: Node) -> None:
        """SIGSTOP ``node``'s life: it runs nothing (no lease renewal) until resumed."""
        life = node.life
        life.process.proc.send_signal(signal.SIGSTOP)
        life.pauses.append((time.time(), None))

    def resume(self, node: Node) -> None:
        """SIGCONT ``node``'s life."""
        life = node.life
        life.process.proc.send_signal(signal.SIGCONT)
        life.pauses[-1] = (life.pauses[-1][0], time.time())

    async def restart_database(self, down_s: float) -> None:
        """Stop PostgreSQL immediately (as a crash: no shutdown checkpoint, clients cut
        off), keep it down ``down_s`` seconds, and start it again on the same data
        (:meth:`tests.support.pg.Cluster.stopped`)."""

        def cycle() -> tuple[float, float]:
            with self.database.stopped():
                stopped = time.time()
                time.sleep(down_s)  # the outage itself, in a worker thread
            return stopped, time.time()

        self.database_restarts.append(await trio.to_thread.run_sync(cycle))

    async def ensure_all_up(self) -> None:
        """Resume paused lives and restart dead ones (before the final checks)."""
        for node in self.nodes:
            life = node.life
            if life.pauses and life.pauses[-1][1] is None:
                self.resume(node)
            if not life.alive:
                await self._reap(life, "exit")
                await self.restart(node)

    def close(self) -> None:
        """Resume and stop every life (SIGTERM, then SIGKILL); never raises."""
        for node in self.nodes:
            for life in node.lives:
                if life.process.returncode is None:
                    try:
                        life.process.proc.send_signal(signal.SIGCONT)
                    except ProcessLookupError:
                        pass
                    life.process.stop()
                    if life.ended_at is None:
                        life.ended_at, life.ended_by = time.time(), "stop"


def _last_line(life: NodeLife) -> str:
    lines = [line for line in life.process.stderr().splitlines() if line.strip()]
    return lines[-1][:400] if lines else "(no output)"
