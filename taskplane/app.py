"""The composition root: opens the store, starts the actor tree and the HTTP listener.

The tree (``docs/architecture.md``)::

    root (one nursery: the plane is one unit)
    ├── store     supervised, one-for-one; its inbox outlives restarts
    ├── intake    supervised, one-for-one
    ├── wake      supervised, one-for-one
    ├── owners    one supervisor per live Task owner (started on demand)
    └── http      hypercorn + quart-trio (only with A2A_SERVER=1)

Nothing here is global: every dependency is created in :func:`open_plane` and passed
down (rule: "No global mutable state").
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

import attrs
import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve

from taskplane.actors.intake import Intake, IntakeActor
from taskplane.actors.outbound import Outbound
from taskplane.actors.owner_client import OwnerClient
from taskplane.actors.plane import TaskPlane
from taskplane.actors.protocol import CrashHook, no_crash
from taskplane.actors.registry import OwnerRegistry
from taskplane.actors.turns import RunningTurns
from taskplane.actors.wake import WakeActor
from taskplane.bridge.manifest import WorkflowOutputs, load_manifest
from taskplane.bridge.runtime import AgentRuntime
from taskplane.bridge.scripted import ScriptedRuntime
from taskplane.config import Config
from taskplane.extensions import ELICITATION_URI, OUTFITTER_TASK_URI
from taskplane.http.app import create_app
from taskplane.http.auth import Credentials
from taskplane.http.card import agent_card_json
from taskplane.http.handlers import Handlers
from taskplane.observability import PlaneObserver, count_restarts
from taskplane.shutdown import TURN_SHUTDOWN_DEADLINE_S, finish_turn, stop_on_signals
from taskplane.sources.registry import SourcePlan
from taskplane.sources.runtime import start_sources
from taskplane.store.records import Locator
from taskplane.store.source_store import SourceStore
from taskplane.store.sqlite.actor import STORE_INBOX_SIZE, StoreRequest, run_store
from taskplane.store.sqlite.database import ConnectionFactory, Database
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

log = logging.getLogger("taskplane")

__all__ = ["TURN_SHUTDOWN_DEADLINE_S", "open_plane", "run_server", "serve_http", "stop_on_signals"]

ACTOR_POLICY = RestartPolicy(max_restarts=5, period_s=10.0, backoff_s=0.01, backoff_cap_s=1.0)
SHUTDOWN_GRACE_S = 5.0
"""Seconds hypercorn waits for in-flight requests after a shutdown signal (blocking
sends and streams are answered at once; this bounds the rest)."""
LISTEN_BACKLOG = 1024
"""Pending TCP connections the kernel queues before refusing (bursts of clients)."""


def wall_clock_ms() -> int:
    """Milliseconds since the Unix epoch (record timestamps)."""
    return time.time_ns() // 1_000_000


@attrs.frozen
class PlaneOptions:
    """Knobs that are not user configuration (tests, drills and benchmarks set them).

    Attributes:
        runtime: the agent (default: the scripted runtime).
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
    sources: SourcePlan | None = None,
) -> AsyncIterator[TaskPlane]:
    """Run the task plane's actors for the duration of the ``async with`` block.

    Opens (and locks) the store, compacts it (retention), starts the store, intake
    and wake actors under one-for-one supervision, then the native ``sources`` (each
    supervised) and their deliverer, then intake (which replays eligible wakes each
    time it starts), and yields the plane facade. Leaving the block cancels every
    actor; a commit in flight finishes (shielded), then the database is closed and
    the root lock released.

    Raises:
        StoreLocked, StoreVersionError, OSError: the store cannot be opened.
        RestartIntensityExceeded: an actor kept crashing (escalated to this root).
        ConfigError: an explicitly listed source failed to start.
    """
    options = options or PlaneOptions()
    if sources is not None and sources.anchor_sources:
        options = attrs.evolve(
            options, anchor_sources=options.anchor_sources | sources.anchor_sources
        )
    observer = options.observer or PlaneObserver()
    observer.recovered_at_ms = options.now_ms()
    factory = options.connection_factory
    db = await trio.to_thread.run_sync(
        partial(Database, store_root)
        if factory is None
        else partial(Database, store_root, factory=factory)
    )
    runtime = observer.wrap_runtime(options.runtime or ScriptedRuntime())
    reports_tx, reports_rx = trio.open_memory_channel[CrashReport](CRASH_REPORT_BUFFER_SIZE)
    store_tx, store_rx = trio.open_memory_channel[StoreRequest](STORE_INBOX_SIZE)

    async def store_actor(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        await run_store(
            db,
            store_rx.clone(),  # rule "inboxes outlive restarts": buffered requests survive
            group_commit=options.group_commit,
            in_thread=options.store_in_thread,
            crash_hook=options.crash_hook,
            on_batch=observer.on_batch,
            task_status=task_status,
        )

    try:
        async with trio.open_nursery() as root:
            root.start_soon(count_restarts, reports_rx, observer.metrics)

            async def start(name: str, run: Callable[..., Awaitable[None]]) -> None:
                spec = _permanent(name, observer.liveness.track(name, run))
                await root.start(supervise, spec, ACTOR_POLICY, reports_tx)

            await start("store", store_actor)
            store = SqliteStore(store_tx, db)
            report = await store.compact(options.now_ms())
            log.info(
                "store compacted: %s",
                report,
                extra={"event": "store_compacted", **attrs.asdict(report)},
            )
            turns = RunningTurns()
            registry = OwnerRegistry(root, store, options.now_ms, turns, options.crash_hook)
            owners = OwnerClient(registry, options.now_ms)
            wake = WakeActor(
                store,
                owners,
                runtime,
                outputs,
                options.now_ms,
                turns,
                crash_hook=options.crash_hook,
                anchor_sources=options.anchor_sources,
            )
            intake = IntakeActor(
                Intake(store, owners, wake, runtime, Locator(public_url), options.now_ms),
                options.crash_hook,
            )
            await start("wake", wake.run)
            outbound = Outbound(root, store, options.now_ms)
            plane = TaskPlane(store, registry, owners, intake, wake, outbound, options.now_ms)
            if sources is not None:
                # Every source starts before intake, so wakes are replayed only after
                # every source started; their first events wait in intake's inbox.
                await start_sources(
                    plane,
                    SqliteSourceStore(store_tx),
                    root,
                    sources.sources,
                    explicit=sources.explicit,
                )
            await start("intake", intake.run)
            log.info(
                "task plane ready",
                extra={"event": "channels_ready", "storeRoot": str(store_root)},
            )
            try:
                yield plane
            finally:
                root.cancel_scope.cancel()
                reports_tx.close()
        await runtime.aclose()
    finally:
        store_rx.close()
        store_tx.close()
        await trio.to_thread.run_sync(db.close)


@asynccontextmanager
async def open_operator_store(store_root: Path) -> AsyncIterator[SourceStore]:
    """The source store of ``store_root`` with only the store actor running (operator
    commands such as ``taskplane deliveries``). Leaving the block closes the database
    and releases the root lock.

    Raises:
        StoreLocked: a server (or another command) holds the store root.
        StoreVersionError, OSError: the store cannot be opened.
    """
    db = await trio.to_thread.run_sync(Database, store_root)
    store_tx, store_rx = trio.open_memory_channel[StoreRequest](STORE_INBOX_SIZE)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(partial(run_store, db, store_rx))
            try:
                yield SqliteSourceStore(store_tx)
            finally:
                nursery.cancel_scope.cancel()
    finally:
        store_rx.close()
        store_tx.close()
        await trio.to_thread.run_sync(db.close)


def _permanent(name: str, start: Callable[..., Awaitable[None]]) -> ChildSpec:
    return ChildSpec(name=name, start=start, restart_type=RestartType.PERMANENT)


async def serve_http(
    plane: TaskPlane,
    config: Config,
    credentials: Credentials,
    listener: socket.socket,
    *,
    shutdown: trio.Event,
    observer: PlaneObserver,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the A2A HTTP+JSON binding until ``shutdown`` is set.

    Args:
        listener: the bound, listening TCP socket (ownership passes to hypercorn).
        observer: health and metrics of ``plane`` (``/readyz``, ``/metrics``).

    ``task_status.started(binds)`` hands over the bound URLs (``http://host:port``).
    At shutdown, blocking sends answer with their Task's snapshot and streams end
    with a final frame at once; other requests get :data:`SHUTDOWN_GRACE_S`.
    """
    card = agent_card_json(
        public_url=config.public_url,
        name=config.agent_name,
        description=config.agent_description,
        version=config.agent_version,
    )
    handlers = Handlers(
        plane, blocking_timeout_s=config.blocking_timeout_ms / 1000, metrics=observer.metrics
    )
    app = create_app(
        handlers,
        credentials,
        card,
        supported_extensions=(ELICITATION_URI, OUTFITTER_TASK_URI),
        statistics=partial(observer.statistics, plane),
    )
    hyper = HypercornConfig()
    hyper.bind = [f"fd://{listener.detach()}"]
    hyper.accesslog = None
    hyper.errorlog = logging.getLogger("hypercorn.error")
    hyper.graceful_timeout = SHUTDOWN_GRACE_S
    hyper.keep_alive_timeout = config.keep_alive_s
    hyper.backlog = LISTEN_BACKLOG

    async def stop_handlers() -> None:
        await shutdown.wait()
        handlers.stop()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(stop_handlers)
        await serve(app, hyper, shutdown_trigger=shutdown.wait, task_status=task_status)
        nursery.cancel_scope.cancel()


async def run_server(
    config: Config,
    *,
    options: PlaneOptions | None = None,
    shutdown: trio.Event | None = None,
    sources: SourcePlan | None = None,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """``taskplane serve``: the composed runtime until ``shutdown`` (or cancellation).

    With native ``sources`` planned, a listener that cannot bind is logged
    (``listener_start_failed``) and the plane runs on without it.

    Raises:
        ConfigError, ManifestError, StoreLocked, StoreVersionError, ValueError: startup
        failures, each with a message naming the setting or path at fault.
    """
    if config.legacy_store_path:
        log.warning(
            "A2A_STORE_PATH=%s is not merged into the task-plane store; complete or export "
            "its active tasks and keep the file as an archive",
            config.legacy_store_path,
            extra={"event": "a2a_legacy_store_ignored"},
        )
    outputs = await trio.to_thread.run_sync(
        load_manifest, config.workflow_manifest, config.workflow
    )
    credentials = None
    if config.a2a_server:
        assert config.credentials_path is not None
        credentials = await trio.to_thread.run_sync(Credentials.load, config.credentials_path)
    shutdown = shutdown if shutdown is not None else trio.Event()
    listener = None
    if credentials is not None:
        try:
            listener = _listen(config)
        except OSError as exc:
            if sources is None or not sources.sources:
                raise
            # The design document: a listener failure keeps the sources running.
            log.error(
                "%s; the native sources run without the A2A listener",
                exc.strerror or exc,
                extra={"event": "listener_start_failed", "error": str(exc.strerror or exc)},
            )
            credentials = None
    if listener is not None and config.port == 0:
        config = attrs.evolve(config, port=listener.getsockname()[1])
    options = options or PlaneOptions()
    if options.observer is None:
        options = attrs.evolve(options, observer=PlaneObserver())
    try:
        await _run_plane(
            config, options, outputs, credentials, listener, shutdown, sources, task_status
        )
    finally:
        if listener is not None and listener.fileno() != -1:
            listener.close()


def _listen(config: Config) -> socket.socket:
    """Bind the A2A listener before anything else starts (a busy port fails fast, and
    port 0 resolves to the real port the Agent Card advertises).

    Accepted connections inherit ``TCP_USER_TIMEOUT`` (Linux): a response that makes
    no progress for ``config.send_timeout_s`` (a client that stopped reading) aborts
    its connection, so a slow client cannot hold a worker or stall shutdown.

    Raises:
        OSError: the address is in use or cannot be bound (the message says which).
    """
    family = socket.AF_INET6 if ":" in config.host else socket.AF_INET
    try:
        listener = socket.create_server(
            (config.host, config.port), family=family, backlog=LISTEN_BACKLOG
        )
    except OSError as exc:
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        raise OSError(
            exc.errno, f"cannot listen on {config.host}:{config.port}: {reason}"
        ) from None
    user_timeout = getattr(socket, "TCP_USER_TIMEOUT", None)
    if user_timeout is not None:
        listener.setsockopt(socket.IPPROTO_TCP, user_timeout, config.send_timeout_s * 1000)
    return listener


async def _run_plane(
    config: Config,
    options: PlaneOptions,
    outputs: WorkflowOutputs,
    credentials: Credentials | None,
    listener: socket.socket | None,
    shutdown: trio.Event,
    sources: SourcePlan | None,
    task_status: trio.TaskStatus[list[str]],
) -> None:
    observer = options.observer
    assert observer is not None
    async with open_plane(
        config.store_root,
        public_url=config.public_url,
        outputs=outputs,
        options=options,
        sources=sources,
    ) as plane:
        try:
            await _serve_until_shutdown(
                config, plane, credentials, listener, shutdown, observer, task_status
            )
        finally:
            await finish_turn(observer)


async def _serve_until_shutdown(
    config: Config,
    plane: TaskPlane,
    credentials: Credentials | None,
    listener: socket.socket | None,
    shutdown: trio.Event,
    observer: PlaneObserver,
    task_status: trio.TaskStatus[list[str]],
) -> None:
    if credentials is None or listener is None:
        task_status.started([])
        await shutdown.wait()
        return
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(
            partial(
                serve_http,
                plane,
                config,
                credentials,
                listener,
                shutdown=shutdown,
                observer=observer,
            )
        )
        log.info(
            "A2A server listening on %s",
            ", ".join(binds),
            extra={"event": "a2a_server_started", "binds": binds},
        )
        task_status.started(binds)
    log.info("A2A server stopped", extra={"event": "a2a_server_stopped"})
