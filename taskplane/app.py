"""The composition root: opens the store and starts the actor tree (the plane).

The tree (``docs/architecture.md``)::

    root (one nursery: the plane is one unit)
    ├── store     supervised, one-for-one; its inbox outlives restarts
    ├── intake    supervised, one-for-one
    ├── wake      supervised, one-for-one
    ├── events    supervised, one-for-one (PostgreSQL: the event and claims tails)
    ├── owners    one supervisor per live Task owner (started on demand)
    ├── sources   one supervisor per native source, and their deliverer
    ├── cluster   a shared (PostgreSQL) store only: the node's heartbeat, and the
    │             leaders (maintenance, each source, the deliverer) under leases
    └── http      hypercorn + quart-trio (``taskplane.server``)

Nothing here is global: every dependency is created in :func:`open_plane` and passed
down (rule: "No global mutable state").
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractContextManager, AsyncExitStack, asynccontextmanager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import attrs
import trio

from taskplane.actors.channels import Channels
from taskplane.actors.intake import Intake, IntakeActor
from taskplane.actors.outbound import Outbound
from taskplane.actors.owner_client import OwnerClient
from taskplane.actors.plane import TaskPlane
from taskplane.actors.registry import OwnerRegistry
from taskplane.actors.turns import RunningTurns
from taskplane.actors.wake import WakeActor
from taskplane.actors.wake_turns import TurnSettings
from taskplane.bridge.manifest import WorkflowOutputs
from taskplane.bridge.runtime import AgentRuntime
from taskplane.bridge.sessions import (
    NODE_LOCAL_SESSION_RUNTIMES,
    FileTranscriptStore,
    TranscriptStore,
    list_sessions,
    remove_session,
)
from taskplane.bridge.settings import AgentSettings, open_runtime
from taskplane.cluster.change_feeds import ChangeFeeds
from taskplane.cluster.identity import NodeIdentity
from taskplane.cluster.leader import Leadership
from taskplane.cluster.maintenance import compact_once, run_maintenance
from taskplane.cluster.nodes import HEARTBEAT_POLICY, run_heartbeat
from taskplane.config import ConfigError
from taskplane.mailbox import CrashHook, no_crash
from taskplane.observability import PlaneObserver, count_restarts
from taskplane.store.contract import TaskStore
from taskplane.store.records import Locator
from taskplane.store.requests import StoreRequest
from taskplane.store.source_store import SourceStore
from taskplane.store.sqlite.actor import STORE_INBOX_SIZE, run_store
from taskplane.store.sqlite.database import ConnectionFactory, Database
from taskplane.store.sqlite.lock import StoreRootLock
from taskplane.store.sqlite.maintenance import BackupDestinationError as BackupDestinationError
from taskplane.store.sqlite.maintenance import OfflineStore as OfflineStore
from taskplane.store.sqlite.maintenance import lock_holder, online_backup, open_offline
from taskplane.store.sqlite.sources import SqliteSourceStore
from taskplane.store.sqlite.store import SqliteStore
from taskplane.supervision import (
    CRASH_REPORT_BUFFER_SIZE,
    ChildSpec,
    CrashReport,
    RestartPolicy,
    RestartType,
    supervise,
)

if TYPE_CHECKING:
    from taskplane.sources.registry import SourcePlan
    from taskplane.store.postgres.maintenance import PgMaintenance as PgMaintenance
    from taskplane.store.postgres.node import PgNode

log = logging.getLogger("taskplane")

__all__ = ["ACTOR_POLICY", "PlaneOptions", "open_operator_store", "open_plane"]

ACTOR_POLICY = RestartPolicy(max_restarts=5, period_s=10.0, backoff_s=0.01, backoff_cap_s=1.0)


def open_offline_store(root: Path) -> AbstractContextManager[OfflineStore]:
    """The maintenance view of the store at ``root``, for the offline ``tasks`` and
    ``store`` commands (the composition root picks the backend: SQLite).

    Raises (on entering):
        FileNotFoundError: no store at ``root`` (nothing is created).
        StoreLocked: a running server holds the root.
        StoreVersionError, StoreUnavailable, OSError: the store cannot be opened.
    """
    return open_offline(root)


def open_postgres_maintenance(url: str) -> AbstractContextManager[PgMaintenance]:
    """The operator view of the PostgreSQL store at ``url``, for the ``tasks``,
    ``store`` and ``deliveries`` commands, usable while nodes run: not registered as a node,
    no migration (see :mod:`taskplane.store.postgres.maintenance` for what each
    operation does beside a running node).

    Raises (on entering):
        FileNotFoundError: the database holds no taskplane store (nothing is created).
        StoreVersionError: its schema is not the one this taskplane writes.
        StoreUnavailable: the server cannot be reached.
    """
    # Imported only when selected (see _open_backend).
    from taskplane.store.postgres.maintenance import open_maintenance

    return open_maintenance(url)


def postgres_location(url: str) -> str:
    """``url`` as a libpq connection string without its password, for messages."""
    from taskplane.store.postgres.database import redacted

    return redacted(url)


def backup_store(root: Path, destination: Path, progress: Callable[[int, int], None]) -> int:
    """Copy the store at ``root`` into the new file ``destination``, while a server runs
    on it or not (the backend's online backup through a read-only connection).

    Returns the pages copied. Raises:
        FileNotFoundError: no store at ``root``.
        BackupDestinationError: ``destination`` is the problem (the message names it).
        StoreUnavailable: the store cannot be read.
    """
    return online_backup(root, destination, progress)


def offline_lock_holder(root: Path) -> str:
    """The pid of the process holding ``root``'s lock, as written in its lock file."""
    return lock_holder(root)


def wall_clock_ms() -> int:
    """Milliseconds since the Unix epoch (record timestamps)."""
    return time.time_ns() // 1_000_000


@attrs.frozen
class PlaneOptions:
    """Knobs that are not user configuration (tests, drills and benchmarks set them).

    Attributes:
        runtime: the agent (default: the one the agent settings select).
        now_ms: the store clock, ms since the epoch (tests move it).
        group_commit: batch concurrent store ops into one transaction.
        connection_factory: the ``sqlite3.Connection`` class (fault injection).
        store_in_thread: run SQLite in a worker thread (``False``: on the trio thread,
            so a ``MockClock`` test is fully deterministic).
        crash_hook: restart drills: called by each actor loop with its kind.
        anchor_sources: native sources whose provider exposes a per-message reply
            relation (conformance matrix, Continuation column).
        observer: health and metrics wiring (a fresh one when omitted).
    """

    runtime: AgentRuntime | None = None
    now_ms: Callable[[], int] = wall_clock_ms
    group_commit: bool = True
    connection_factory: ConnectionFactory | None = None
    store_in_thread: bool = True
    crash_hook: CrashHook = no_crash
    anchor_sources: frozenset[str] = frozenset()
    observer: PlaneObserver | None = None


@asynccontextmanager
async def open_plane(
    store_root: Path,
    *,
    public_url: str,
    outputs: WorkflowOutputs,
    options: PlaneOptions | None = None,
    agent: AgentSettings | None = None,
    sources: SourcePlan | None = None,
    store_url: str | None = None,
    node: NodeIdentity | None = None,
) -> AsyncIterator[TaskPlane]:
    """Run the task plane's actors for the duration of the ``async with`` block.

    The store is the SQLite database in ``store_root``, or with ``store_url`` (a libpq
    URL) that PostgreSQL database, which this process joins as node ``node`` (its id
    and lease length; default: a generated id, 15 s) beside any others (the store
    root still holds the agent sessions and its lock). Opens (and locks) the store,
    compacts it (retention), starts the store and wake actors under one-for-one
    supervision, then the native ``sources`` (each supervised) and their deliverer,
    then intake (which replays eligible wakes each time it starts), and yields the
    plane facade. On PostgreSQL the node registers (a live node with its id is
    refused, ``public_url`` must be the database's), heartbeats, and compaction,
    each source and the deliverer run on the node that holds their lease
    (:mod:`taskplane.cluster.leader`); the page-token key is the database's. The
    agent is ``options.runtime``, or else the runtime ``agent`` selects (default:
    scripted), opened after the store is locked. Leaving the block cancels every
    actor; a commit in flight finishes (shielded), the agent is closed, then the
    database is closed and the root lock released.

    Raises:
        StoreLocked, StoreVersionError, StoreUnavailable, OSError: the store cannot be
            opened (``StoreLocked`` also: a live node with this node id runs on the
            PostgreSQL database).
        ConfigError: ``public_url`` is not the one the database's nodes advertise.
        RestartIntensityExceeded: an actor kept crashing (escalated to this root).
        ConfigError: an explicitly listed source failed to start.
    """
    options = options or PlaneOptions()
    node = node or NodeIdentity()  # used on a shared store only
    if sources is not None and sources.anchor_sources:
        options = attrs.evolve(
            options, anchor_sources=options.anchor_sources | sources.anchor_sources
        )
    observer = options.observer or PlaneObserver()
    observer.recovered_at_ms = options.now_ms()
    store_tx, store_rx = trio.open_memory_channel[StoreRequest](STORE_INBOX_SIZE)
    backend = await trio.to_thread.run_sync(
        partial(_open_backend, store_root, store_url, options, observer, store_tx, node, public_url)
    )
    agent_scope = AsyncExitStack()
    reports_tx, reports_rx = trio.open_memory_channel[CrashReport](CRASH_REPORT_BUFFER_SIZE)

    async def store_actor(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        # rule "inboxes outlive restarts": buffered requests survive
        await backend.run_actor(store_rx.clone(), task_status=task_status)

    try:
        runtime = options.runtime
        if runtime is None:
            selected = agent or AgentSettings()
            if store_url is not None and selected.runtime in NODE_LOCAL_SESSION_RUNTIMES:
                _warn_node_local_sessions(selected.runtime, store_root)
            runtime = await agent_scope.enter_async_context(
                open_runtime(selected, store_root, backend.transcripts)
            )
        runtime = observer.wrap_runtime(runtime, options.now_ms)
        async with trio.open_nursery() as root:
            root.start_soon(count_restarts, reports_rx, observer.metrics)

            async def start(name: str, run: Callable[..., Awaitable[None]]) -> None:
                spec = _permanent(name, observer.liveness.track(name, run))
                await root.start(supervise, spec, ACTOR_POLICY, reports_tx)

            await start("store", store_actor)
            store = backend.task_store
            leadership = None
            if backend.cluster is None:
                await compact_once(store, options.now_ms())
            else:
                # --- cluster: heartbeat, maintenance leader (a shared store) ---
                pg = backend.cluster
                leadership = Leadership(pg, node.lease_ttl_s, observer.cluster)
                heartbeat = ChildSpec(
                    name="heartbeat",
                    start=partial(run_heartbeat, pg, node.lease_ttl_s, counters=observer.cluster),
                    restart_type=RestartType.PERMANENT,
                )
                await root.start(supervise, heartbeat, HEARTBEAT_POLICY, reports_tx)
                maintain = partial(run_maintenance, store, pg.prune, options.now_ms)
                await root.start(leadership.lead, "maintenance", maintain)
                # --- end cluster ---
            await _prune_sessions(store, store_root)
            turns = RunningTurns()
            settings = agent or AgentSettings()
            registry = OwnerRegistry(
                root,
                store,
                options.now_ms,
                turns,
                options.crash_hook,
                history=None if backend.changes is None else backend.changes.feed,
            )
            owners = OwnerClient(registry, options.now_ms)
            channels = Channels()
            # -- the wake actor: on PostgreSQL, this node's claimer of the shared rows --
            make_wake: Callable[..., WakeActor] = (
                WakeActor
                if store_url is None
                else _cluster_wake(store_url, node, observer, store_tx)
            )
            # --
            wake = make_wake(
                store,
                owners,
                runtime,
                outputs,
                options.now_ms,
                turns,
                crash_hook=options.crash_hook,
                anchor_sources=options.anchor_sources,
                settings=TurnSettings(
                    settings.concurrency,
                    settings.turn_timeout_ms,
                    settings.provider_patience_s,
                    settings.provider_backoff_cap_s,
                ),
                channels=channels,
            )
            intake = IntakeActor(
                Intake(store, owners, wake, Locator(public_url), options.now_ms),
                options.crash_hook,
            )
            await start("wake", wake.run)
            if backend.changes is not None:
                # Cluster: other nodes' commits reach this node's owners, claim index
                # (before intake, which loads it: ClaimsTail.start) and wake claims.
                from taskplane.cluster.wake import ClusterWakeActor

                assert isinstance(wake, ClusterWakeActor), "change feeds come with wake rows"
                events = backend.changes.tail(
                    registry, wake.admission, store, on_wake=wake.heard_wake
                )
                await start("events", events.run)
            outbound = Outbound(root, store, options.now_ms)
            plane = TaskPlane(
                store,
                registry,
                owners,
                intake,
                wake,
                outbound,
                options.now_ms,
                page_key=backend.page_key,
            )
            if sources is not None:
                # Imported here: the store commands of the command line import this
                # module, and need none of the sources.
                from taskplane.sources.runtime import start_sources

                # Every source starts before intake, so wakes are replayed only after
                # every source started; their first events wait in intake's inbox.
                await start_sources(
                    plane,
                    backend.source_store,
                    root,
                    sources.sources,
                    explicit=sources.explicit,
                    reports=reports_tx,
                    on_stopped=observer.source_stopped,
                    channels=channels,
                    leadership=leadership,
                )
            await start("intake", intake.run)
            log.info(
                "task plane ready",
                extra={
                    "event": "channels_ready",
                    "storeRoot": str(store_root),
                    "store": "sqlite" if store_url is None else "postgresql",
                },
            )
            try:
                yield plane
            finally:
                root.cancel_scope.cancel()
                reports_tx.close()
        await runtime.aclose()
    finally:
        await agent_scope.aclose()
        store_rx.close()
        store_tx.close()
        await trio.to_thread.run_sync(backend.close)


def _cluster_wake(
    store_url: str,
    node: NodeIdentity,
    observer: PlaneObserver,
    store_inbox: trio.MemorySendChannel[StoreRequest],
) -> Callable[..., WakeActor]:
    """The wake actor of a PostgreSQL store (a cluster of one or more nodes): this
    node's claimer of the shared wake rows, under ``node``'s id and lease length (its
    turns' ends committed by the store actor of ``store_inbox``), given the wake
    actor's own arguments (imported only when selected)."""
    from taskplane.cluster.wake import ClusterWakeActor
    from taskplane.store.postgres.wake_rows import PgWakeRows

    rows = PgWakeRows(store_url, node.node_id, node.lease_ttl_s, store=store_inbox)
    return partial(ClusterWakeActor, rows=rows, node=node, counters=observer.cluster)


@attrs.frozen
class _Backend:
    """The store backend the plane runs on: its two stores (over the store inbox),
    its store actor (given a clone of the inbox's receive end) and how to close it."""

    task_store: TaskStore
    source_store: SourceStore
    run_actor: Callable[..., Awaitable[None]]
    close: Callable[[], None]
    transcripts: TranscriptStore
    cluster: PgNode | None = None
    """A shared store's node (heartbeat, leases), else ``None``."""
    page_key: bytes | None = None
    changes: ChangeFeeds | None = None


def _open_backend(
    store_root: Path,
    store_url: str | None,
    options: PlaneOptions,
    observer: PlaneObserver,
    inbox: trio.MemorySendChannel[StoreRequest],
    node: NodeIdentity,
    public_url: str,
) -> _Backend:
    """Open the SQLite store of ``store_root``, or the PostgreSQL store at
    ``store_url`` as node ``node`` advertising ``public_url``, taking
    ``store_root``'s lock either way (blocking: call in a worker thread).

    Raises:
        StoreLocked: another process holds the store root, or a live node with
            ``node``'s id runs on the PostgreSQL database.
        ConfigError: a live node of the PostgreSQL database advertises another public
            URL or uses another lease length.
        StoreVersionError, StoreUnavailable, OSError: the store cannot be opened.
    """
    if store_url is None:
        factory = options.connection_factory
        db = Database(store_root) if factory is None else Database(store_root, factory=factory)
        actor = partial(
            run_store,
            db,
            group_commit=options.group_commit,
            in_thread=options.store_in_thread,
            crash_hook=options.crash_hook,
            on_batch=observer.on_batch,
        )
        return _Backend(
            SqliteStore(inbox, db),
            SqliteSourceStore(inbox),
            actor,
            db.close,
            FileTranscriptStore(store_root),
        )
    # Imported only when selected, as the agent runtimes are: the driver adds about
    # 0.1 s to every start of a process that does not use it.
    from taskplane.store.postgres.node import PgNode
    from taskplane.store.postgres.nodes import PeerMismatch

    store_root.mkdir(mode=0o700, parents=True, exist_ok=True)
    lock = StoreRootLock(store_root)
    try:
        pg = PgNode(
            store_url, node_id=node.node_id, lease_ttl_s=node.lease_ttl_s, public_url=public_url
        )
    except PeerMismatch as exc:
        lock.release()
        raise ConfigError(str(exc)) from None
    except BaseException:
        lock.release()
        raise

    def close() -> None:
        try:
            pg.close()
        finally:
            lock.release()

    actor = partial(
        pg.run_actor,
        group_commit=options.group_commit,
        crash_hook=options.crash_hook,
        on_batch=observer.on_batch,
    )
    from taskplane.cluster.transcripts import SharedTranscriptStore
    from taskplane.store.postgres.doorbell import Listener
    from taskplane.store.postgres.events import PgChangeFeed
    from taskplane.store.postgres.sessions import PgSessionStore

    changes = ChangeFeeds(PgChangeFeed(inbox), partial(Listener, store_url), node.node_id)
    # Agent sessions: the openai runtime's transcripts live in the database.
    transcripts = SharedTranscriptStore(PgSessionStore(inbox))
    return _Backend(
        pg.task_store(inbox),
        pg.source_store(inbox),
        actor,
        close,
        transcripts,
        pg,
        pg.page_key,
        changes,
    )


def _warn_node_local_sessions(runtime: str, store_root: Path) -> None:
    """Say at start that ``runtime``'s session directories stay on this node."""
    log.warning(
        "the %s runtime keeps each task session in a directory under %s on this node "
        "only: a continuation woken on another node starts a fresh session directory "
        "there (the openai runtime's transcripts are shared through the database)",
        runtime,
        store_root / "agent-sessions",
        extra={"event": "agent_sessions_node_local", "runtime": runtime},
    )


async def _prune_sessions(store: TaskStore, store_root: Path) -> None:
    """A task session is retained with its Task: drop the sessions of pruned Tasks."""
    sessions = await trio.to_thread.run_sync(list_sessions, store_root)
    gone = [d for d, task_id in sessions if task_id is None or not await store.find_task(task_id)]
    for directory in gone:
        await trio.to_thread.run_sync(remove_session, directory)
    if gone:
        log.info(
            "%d task sessions pruned with their tasks",
            len(gone),
            extra={"event": "task_sessions_pruned", "count": len(gone)},
        )


@asynccontextmanager
async def open_operator_store(
    store_root: Path, store_url: str | None = None, *, public_url: str | None = None
) -> AsyncIterator[SourceStore]:
    """The source store of ``store_root`` (or of the PostgreSQL store at
    ``store_url``, joined as a node of its own advertising ``public_url``, which is
    then required) with only the store actor running (``taskplane deliveries`` on a
    SQLite store; on PostgreSQL the operator commands use
    :func:`open_postgres_maintenance`, which registers no node). Leaving the block
    closes the store and releases its locks.

    Raises:
        StoreLocked: a server (or another command) holds the store root.
        ConfigError: ``public_url`` is missing with ``store_url``, or is not the
            database's.
        StoreVersionError, StoreUnavailable, OSError: the store cannot be opened.
    """
    if store_url is not None and not public_url:
        raise ConfigError("A2A_PUBLIC_URL is required with TASKPLANE_STORE_URL")
    store_tx, store_rx = trio.open_memory_channel[StoreRequest](STORE_INBOX_SIZE)
    backend = await trio.to_thread.run_sync(
        partial(
            _open_backend,
            store_root,
            store_url,
            PlaneOptions(),
            PlaneObserver(),
            store_tx,
            NodeIdentity(),
            public_url or "",
        )
    )
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(partial(backend.run_actor, store_rx))
            try:
                yield backend.source_store
            finally:
                nursery.cancel_scope.cancel()
    finally:
        store_rx.close()
        store_tx.close()
        await trio.to_thread.run_sync(backend.close)


def _permanent(name: str, start: Callable[..., Awaitable[None]]) -> ChildSpec:
    return ChildSpec(name=name, start=start, restart_type=RestartType.PERMANENT)
