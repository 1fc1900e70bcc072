"""``taskplane serve``: the A2A HTTP listener around a running plane.

Binds the listener first (a busy port fails before the store is opened, and port 0
resolves to the real port the Agent Card advertises), opens the plane
(:func:`taskplane.app.open_plane`), serves hypercorn + quart-trio on the bound
socket until shutdown, then gives the running turn its shutdown deadline.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import attrs
import trio
from hypercorn.config import Config as HypercornConfig

from taskplane.actors.plane import TaskPlane
from taskplane.app import PlaneOptions, open_plane
from taskplane.bridge.manifest import WorkflowOutputs, load_manifest
from taskplane.bridge.settings import AgentSettings, SkillSpec, load_skills
from taskplane.cluster.identity import NodeIdentity, generated_node_id
from taskplane.config import Config
from taskplane.extensions import ELICITATION_URI, OUTFITTER_TASK_URI
from taskplane.http import compat03
from taskplane.http.access import AccessLog
from taskplane.http.app import StatisticsSource, create_app, no_statistics
from taskplane.http.auth import Credentials
from taskplane.http.card import SCRIPTED_SKILLS, CardSkill, agent_card_json
from taskplane.http.connection import ASGIApp, CloseAmbiguousFraming, FinishExchanges
from taskplane.http.cors import Cors, parse_origins
from taskplane.http.deadlines import BodyDeadline
from taskplane.http.descriptors import connection_budget, raise_descriptor_limit
from taskplane.http.early_refusal import EarlyRefusal
from taskplane.http.handlers import Handlers
from taskplane.http.listener import ConnectionLimits, serve_connections
from taskplane.http.page_tokens import PageTokens
from taskplane.http.upgrade import RefuseUpgrades
from taskplane.observability import PlaneObserver
from taskplane.settings import DEFAULT_BODY_TIMEOUT_S
from taskplane.shutdown import TURN_SHUTDOWN_DEADLINE_S, finish_turn, stop_on_signals
from taskplane.sources.registry import SourcePlan

log = logging.getLogger("taskplane")

__all__ = ["TURN_SHUTDOWN_DEADLINE_S", "edge_app", "run_server", "serve_http", "stop_on_signals"]

SHUTDOWN_GRACE_S = 5.0
"""Seconds hypercorn waits for in-flight requests after a shutdown signal (blocking
sends and streams are answered at once; this bounds the rest)."""
LISTEN_BACKLOG = 1024
"""Pending TCP connections the kernel queues before refusing (bursts of clients)."""


def edge_app(
    handlers: Handlers,
    credentials: Credentials,
    card: dict[str, Any],
    *,
    supported_extensions: Sequence[str],
    statistics: StatisticsSource = no_statistics,
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S,
    cors_origins: frozenset[str] = frozenset(),
    compat03: bool = False,
) -> ASGIApp:
    """The ASGI app as served: :func:`~taskplane.http.app.create_app` (same arguments)
    inside its middleware, outermost first:

    1. :class:`~taskplane.http.connection.FinishExchanges`: the last body send is
       never cancelled, so HTTP/1.1 closing and keep-alive work;
    2. :class:`~taskplane.http.cors.Cors` for ``cors_origins``
       (``TASKPLANE_CORS_ORIGINS``; empty: off): preflights answered on every route,
       the CORS headers on every answer below (408s and early 503s included);
    3. :class:`~taskplane.http.connection.CloseAmbiguousFraming`: a request with both
       ``Content-Length`` and ``Transfer-Encoding`` is answered, then its connection
       closed (RFC 9112 §6.1);
    4. :class:`~taskplane.http.deadlines.BodyDeadline`: a body that has not arrived
       within ``body_timeout_s`` seconds is answered 408;
    5. :class:`~taskplane.http.early_refusal.EarlyRefusal` over the plane's
       admission: while the plane is crowded, a send of new work waits, or is refused
       with 503, before the app parses it (it counts and logs its own refusals);
    6. :class:`~taskplane.http.access.AccessLog`: every answer of the app is counted
       in ``handlers.metrics`` and gets its ``http_request`` log line;
    7. :class:`~taskplane.http.upgrade.RefuseUpgrades`: a WebSocket handshake gets an
       A2A error (it never reaches the app).
    """
    app = create_app(
        handlers,
        credentials,
        card,
        supported_extensions=supported_extensions,
        statistics=statistics,
        compat03=compat03,
    )
    admitted = AccessLog(RefuseUpgrades(app), handlers.metrics)
    early = EarlyRefusal(
        admitted, handlers.plane.admission, credentials, handlers.metrics, compat03=compat03
    )
    bounded = BodyDeadline(early, body_timeout_s, handlers.metrics)
    return FinishExchanges(Cors(CloseAmbiguousFraming(bounded), cors_origins))


async def serve_http(
    plane: TaskPlane,
    config: Config,
    credentials: Credentials,
    listener: socket.socket,
    *,
    shutdown: trio.Event,
    observer: PlaneObserver,
    skills: tuple[CardSkill, ...] = SCRIPTED_SKILLS,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the A2A HTTP+JSON binding until ``shutdown`` is set.

    Connections are served by :func:`taskplane.http.listener.serve_connections`, with
    the caps, deadlines and HTTP/2 switch of ``config``; the soft descriptor limit is
    raised first (:mod:`taskplane.http.descriptors`).

    Args:
        listener: the bound, listening TCP socket (ownership passes to the listener).
        observer: health and metrics of ``plane`` (``/readyz``, ``/metrics``).
        skills: the Agent Card's skills.

    ``task_status.started(binds)`` hands over the bound URLs (``http://host:port``).
    At shutdown, blocking sends answer with their Task's snapshot and streams end
    with a final frame at once; other requests get :data:`SHUTDOWN_GRACE_S`.
    """
    card = agent_card_json(
        public_url=config.public_url,
        name=config.agent_name,
        description=config.agent_description,
        version=config.agent_version,
        skills=skills,
    )
    compat = config.a2a_compat == compat03.VERSION
    if compat:
        card = compat03.card(card)
    handlers = Handlers(
        plane,
        blocking_timeout_s=config.blocking_timeout_ms / 1000,
        page_tokens=PageTokens(plane.page_key),
        metrics=observer.metrics,
    )
    app = edge_app(
        handlers,
        credentials,
        card,
        supported_extensions=(ELICITATION_URI, OUTFITTER_TASK_URI),
        statistics=partial(observer.statistics, plane),
        body_timeout_s=config.body_timeout_s,
        cors_origins=parse_origins(config.cors_origins),
        compat03=compat,
    )
    hyper = HypercornConfig()
    hyper.accesslog = None
    hyper.errorlog = logging.getLogger("hypercorn.error")
    hyper.graceful_timeout = SHUTDOWN_GRACE_S
    hyper.keep_alive_timeout = config.keep_alive_s
    limits = ConnectionLimits(
        total=connection_budget(config.max_connections, raise_descriptor_limit()),
        per_client=config.max_connections_per_client,
        header_timeout_s=config.header_timeout_s,
        http2=config.http2,
        send_timeout_s=config.send_timeout_s,
    )
    listening = trio.socket.from_stdlib_socket(listener)

    async def stop_handlers() -> None:
        await shutdown.wait()
        handlers.stop()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(stop_handlers)
        await serve_connections(
            app,
            hyper,
            listening,
            limits,
            observer.metrics,
            shutdown_trigger=shutdown.wait,
            task_status=task_status,
        )
        nursery.cancel_scope.cancel()


def with_node_id(config: Config) -> Config:
    """``config`` with its node id fixed: on a PostgreSQL store without
    ``TASKPLANE_NODE_ID`` a generated one, so the banner names the id the node
    registers with; unchanged otherwise."""
    if config.store_url is None or config.node_id is not None:
        return config
    return attrs.evolve(config, node_id=generated_node_id())


async def run_server(
    config: Config,
    *,
    options: PlaneOptions | None = None,
    shutdown: trio.Event | None = None,
    agent: AgentSettings | None = None,
    sources: SourcePlan | None = None,
    log_records_dropped: Callable[[], int] | None = None,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """``taskplane serve``: the composed runtime until ``shutdown`` (or cancellation).

    With native ``sources`` planned, a listener that cannot bind is logged
    (``listener_start_failed``) and the plane runs on without it.

    Args:
        agent: the agent runtime's settings (default: ``AgentSettings()``, the
            scripted agent; :func:`taskplane.settings.load_agent` reads them from
            variables); unused when ``options.runtime`` is given.
        log_records_dropped: reads the log writer's dropped records for
            ``/metrics`` (``taskplane_log_records_dropped_total``), when
            ``options.observer`` is not given.

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
    agent = agent if agent is not None else AgentSettings()
    skills = await _card_skills(agent)
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
            # A listener failure keeps the native sources running (design rule
            # "Sources run without the listener").
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
        observer = PlaneObserver()
        if log_records_dropped is not None:
            observer.log_records_dropped = log_records_dropped
        options = attrs.evolve(options, observer=observer)
    try:
        await _run_plane(
            config,
            options,
            agent,
            skills,
            outputs,
            credentials,
            listener,
            shutdown,
            sources,
            task_status,
        )
    finally:
        if listener is not None and listener.fileno() != -1:
            listener.close()


async def _card_skills(agent: AgentSettings) -> tuple[CardSkill, ...]:
    """``A2A_AGENT_SKILLS_FILE``'s skills; else the scripted agent's, or none."""
    if agent.skills_file is None:
        return SCRIPTED_SKILLS if agent.runtime == "scripted" else ()
    specs: tuple[SkillSpec, ...] = await trio.to_thread.run_sync(load_skills, agent.skills_file)
    return tuple(
        CardSkill(id=s.id, name=s.name, description=s.description, tags=s.tags, examples=s.examples)
        for s in specs
    )


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
        reason = exc.strerror or (os.strerror(exc.errno) if exc.errno else str(exc))
        hint = (
            "; choose another port, or 0 for any free one" if exc.errno == errno.EADDRINUSE else ""
        )
        raise OSError(
            exc.errno,
            f"cannot listen on {config.host}:{config.port} (A2A_HOST/A2A_PORT, "
            f"--host/--port): {reason}{hint}",
        ) from None
    user_timeout = getattr(socket, "TCP_USER_TIMEOUT", None)
    if user_timeout is not None:
        listener.setsockopt(socket.IPPROTO_TCP, user_timeout, config.send_timeout_s * 1000)
    return listener


async def _run_plane(
    config: Config,
    options: PlaneOptions,
    agent: AgentSettings,
    skills: tuple[CardSkill, ...],
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
        agent=agent,
        sources=sources,
        store_url=config.store_url,
        node=NodeIdentity(config.node_id or generated_node_id(), config.lease_ttl_s),
    ) as plane:
        try:
            await _serve_until_shutdown(
                config, plane, credentials, listener, shutdown, observer, skills, task_status
            )
        finally:
            await finish_turn(observer, shared_store=config.store_url is not None)


async def _serve_until_shutdown(
    config: Config,
    plane: TaskPlane,
    credentials: Credentials | None,
    listener: socket.socket | None,
    shutdown: trio.Event,
    observer: PlaneObserver,
    skills: tuple[CardSkill, ...],
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
                skills=skills,
            )
        )
        log.info(
            "A2A server listening on %s",
            ", ".join(binds),
            extra={"event": "a2a_server_started", "binds": binds},
        )
        task_status.started(binds)
    log.info("A2A server stopped", extra={"event": "a2a_server_stopped"})
