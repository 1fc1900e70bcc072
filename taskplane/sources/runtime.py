"""The source runtime: each configured source runs as a supervised actor beside the
plane, and one deliverer sends their results back.

Startup (design document, "an explicit list makes source startup all-or-nothing"):
every source is started, in order, before intake starts, so wakes are replayed only
after every source started. With an explicit ``OUTFITTER_CHANNELS`` list a source
that fails to start stops the process (``source_start_failed``, then a
:class:`~taskplane.config.ConfigError`); with auto-detection it is logged and left
out. A source that keeps crashing after it started is stopped and reported
(``channels_unhealthy``); the plane and the other sources keep running.

On a store shared by several nodes (``leadership`` given), each source and the
deliverer run only on the node that holds their lease (``source:<name>``,
``deliverer``; :mod:`taskplane.cluster.leader`): one node polls a provider or holds
its socket. A source's checkpoint writes are fenced by its term's epoch: a deposed
leader's write raises :class:`~taskplane.errors.Fenced`, records nothing, and ends
the term (the source stops on that node; the leader competes again). Startup then
waits only for the sources this node leads.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any, Protocol

import attrs
import trio

from taskplane.actors.channels import Channels
from taskplane.actors.native import Delivery, LeaseFence, NativeServices, Recovery, SourceStore
from taskplane.actors.outbound import Reconcile, Send
from taskplane.actors.plane import TaskPlane
from taskplane.config import ConfigError
from taskplane.errors import Fenced
from taskplane.model.limits import check_parts_size
from taskplane.scope import Scope
from taskplane.sources.base import NATIVE_LOCATOR, Event, Source
from taskplane.sources.channel import SourceChannel
from taskplane.sources.delivery import Deliverer
from taskplane.sources.identity import IDENTIFIER, source_identifier
from taskplane.supervision import (
    ChildSpec,
    CrashReport,
    RestartIntensityExceeded,
    RestartPolicy,
    RestartType,
    supervise,
)

log = logging.getLogger("taskplane.sources")


class Term(Protocol):
    """A lease term a source (or the deliverer) runs in, as the leader gives it
    (:class:`taskplane.cluster.leader.Term`)."""

    @property
    def fence(self) -> LeaseFence:
        """The lease and epoch the term's checkpoint writes are fenced by."""
        ...

    def deposed(self) -> None:
        """A fenced write was refused: end the term now."""
        ...


class Leadership(Protocol):
    """Runs work under a lease (:class:`taskplane.cluster.leader.Leadership`)."""

    async def lead(
        self,
        name: str,
        child: Callable[..., Awaitable[object]],
        *,
        task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Run ``child(term, task_status=...)`` whenever this node holds lease ``name``."""
        ...


SOURCE_POLICY = RestartPolicy(max_restarts=5, period_s=60.0, backoff_s=0.5, backoff_cap_s=30.0)
NATIVE_TENANT = ""


@attrs.define(eq=False)
class Context:
    """What one source may do with the plane: intake, evidence and its checkpoints."""

    plane: TaskPlane
    services: NativeServices
    source: str
    deliverer: Deliverer
    term: Term | None = None
    """The lease term this source runs in (a shared store), else ``None``."""

    async def ingest(self, event: Event) -> str:
        """Accept ``event`` through the trusted sink; return its Task ID.

        The dedupe key is ``event:`` + h(identity), the conversation key
        ``conversation:`` + h(conversation fields); the locator rides on the first
        Part's metadata under ``nativeLocator``.

        Every event is bounded like an A2A send (rule "Bad input is bounded the same
        way on every intake path"): its parts may be at most ``MAX_MESSAGE_BYTES``.

        Raises:
            ValueError: the principal is not an identifier or the event has no parts.
            PayloadTooLarge: (413, permanent) the parts are over ``MAX_MESSAGE_BYTES``;
                nothing is recorded, the source classifies the item with evidence.
            Overloaded: not recorded (full queue or inbox); retry later.
            TaskplaneError: refused (e.g. ``DuplicateMessageId``: the same identity
                with another payload, a permanent outcome).
        """
        if not IDENTIFIER.match(event.principal):
            raise ValueError(f"principal {event.principal!r} is not an identifier")
        if not event.parts:
            raise ValueError("an event needs at least one part")
        check_parts_size(event.parts)
        first = event.parts[0]
        metadata = {**(first.metadata or {}), NATIVE_LOCATOR: dict(event.locator)}
        parts = (attrs.evolve(first, metadata=metadata), *event.parts[1:])
        scope = Scope(NATIVE_TENANT, event.principal)
        accepted = await self.plane.ingest(
            scope,
            self.source,
            source_identifier("event", *event.identity),
            source_identifier("conversation", *event.conversation) if event.conversation else None,
            parts,
            reply_to=event.reply_to,
        )
        assert accepted.task is not None  # native intake never answers directly
        self.deliverer.watch(scope, accepted.task.id)
        return accepted.task.id

    async def evidence(self, classification: str, record: dict[str, object]) -> None:
        """Durably record ``source.evidence`` for an item that is not work."""
        await self.services.record_evidence(
            "source.evidence", {"source": self.source, "classification": classification, **record}
        )

    async def deliver(
        self,
        task_id: str,
        operation_id: str,
        payload: str,
        send: Send,
        *,
        recovery: Recovery = "idempotent",
        reconcile: Reconcile | None = None,
    ) -> str:
        """Perform one provider mutation for ``task_id`` at most once per operation
        and payload (an acknowledgement such as a mark-read), through the per-delivery
        serializer; returns the provider response ID.

        Raises:
            DeliveryFailed, DeliveryAmbiguous, DeliveryConflict, StoreUnavailable.
        """
        digest = hashlib.sha256(payload.encode()).hexdigest()
        delivery = Delivery(task_id, self.source, operation_id, digest, recovery)
        return await self.plane.outbound.deliver(delivery, send, reconcile)

    async def load_checkpoint(self, principal: str) -> object:
        """This source's checkpoint for ``principal``, or ``None``."""
        value: object = await self.services.load_checkpoint(principal, self.source)
        return value

    async def save_checkpoint(self, principal: str, value: object) -> None:
        """Durably replace this source's checkpoint for ``principal`` (fenced by the
        term's lease on a shared store).

        Raises:
            Fenced: this node no longer leads the source; nothing was recorded and
                the term ends (the source is cancelled on this node).
        """
        fence = None if self.term is None else self.term.fence
        try:
            await self.services.save_checkpoint(principal, self.source, value, fence=fence)
        except Fenced:
            if self.term is not None:
                self.term.deposed()
            raise


async def start_sources(
    plane: TaskPlane,
    store: SourceStore,
    nursery: trio.Nursery,
    sources: Sequence[Source],
    *,
    explicit: bool,
    poll_s: float = 5.0,
    reports: trio.MemorySendChannel[CrashReport] | None = None,
    on_stopped: Callable[[str], None] = lambda name: None,
    channels: Channels | None = None,
    leadership: Leadership | None = None,
) -> list[str]:
    """Start every source in ``nursery``, then the deliverer; return the started names.

    Each source runs under its own supervisor (``source:<name>``, then
    ``deliverer``), whose crash reports go to ``reports`` (borrowed, never closed),
    so they count as supervisor restarts. When a supervisor gives up on a source
    (it kept crashing), ``on_stopped(name)`` is called once: readiness shows it. Each
    started source's channel is registered in ``channels`` (its Tasks' turns get the
    channel tools). With ``leadership`` (a shared store), each runs under its lease
    (see the module); a source this node follows counts as started.

    Raises:
        ConfigError: ``explicit`` and a source failed to start (nothing keeps running:
            the caller's nursery is cancelled by the error).
    """
    services = NativeServices(plane, store)
    deliverer = Deliverer(plane, services, {s.name: s for s in sources}, poll_s=poll_s)
    started: list[Source] = []
    for source in sources:
        ctx = Context(plane, services, source.name, deliverer)
        try:
            await nursery.start(_run_source, source, ctx, reports, on_stopped, leadership)
        except Exception as exc:
            log.error(
                "source %s failed to start: %s",
                source.name,
                exc,
                extra={"event": "source_start_failed", "source": source.name, "error": str(exc)},
            )
            if explicit:
                raise ConfigError(f"source {source.name} failed to start: {exc}") from exc
            continue
        log.info(
            "source %s started",
            source.name,
            extra={"event": "source_started", "source": source.name},
        )
        started.append(source)
        if channels is not None:
            channels.register(source.name, SourceChannel(plane, services, source))
    if started:
        deliverer.keep_only(s.name for s in started)
        spec = ChildSpec(name="deliverer", start=deliverer.run, restart_type=RestartType.PERMANENT)
        if leadership is None:
            await nursery.start(supervise, spec, SOURCE_POLICY, reports)
        else:

            async def deliver(
                term: Term, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
            ) -> None:
                await supervise(spec, SOURCE_POLICY, reports, task_status=task_status)

            await nursery.start(leadership.lead, "deliverer", deliver)
    return [s.name for s in started]


async def _run_source(
    source: Source,
    ctx: Context,
    reports: trio.MemorySendChannel[CrashReport] | None,
    on_stopped: Callable[[str], None],
    leadership: Leadership | None,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    name = f"source:{source.name}"

    async def term(
        held: Term | None, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        spec = ChildSpec(
            name=name,
            start=partial(source.run, attrs.evolve(ctx, term=held)),
            restart_type=RestartType.PERMANENT,
        )
        if task_status is not trio.TASK_STATUS_IGNORED:  # the plane's startup waits
            await supervise(spec, SOURCE_POLICY, reports, task_status=task_status)
            return
        try:  # a later term: a start failure stops the source, never the plane
            await supervise(spec, SOURCE_POLICY, reports, task_status=task_status)
        except RestartIntensityExceeded:
            raise
        except Exception as exc:
            raise _StartFailed(name) from exc

    try:
        if leadership is None:
            await term(None, task_status=task_status)
        else:
            await leadership.lead(name, term, task_status=task_status)
    except (RestartIntensityExceeded, _StartFailed) as exc:
        on_stopped(source.name)
        log.error(
            "source %s keeps failing and was stopped: %s",
            source.name,
            exc.__cause__,
            extra={"event": "channels_unhealthy", "source": source.name},
        )


class _StartFailed(Exception):
    """A source failed to start in a later lease term (``__cause__``: why)."""
