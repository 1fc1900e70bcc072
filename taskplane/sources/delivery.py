"""The deliverer: sends each native Task's result back to the exact provider item.

It reads durable state (the store is the hand-over point, as for owners): a native
Task that completed, was rejected or asks for input, and whose reply has no
``delivered`` or ``ambiguous`` delivery, gets one delivery through
``TaskPlane.outbound`` (design document, "Outbound delivery is serialized per delivery
ID"). It looks when a watched Task settles (:meth:`Deliverer.watch`, called for every
accepted event) and every ``poll_s`` seconds anyway. The first poll after a start
reads every such Task, so a delivery a crash left ``sending`` is reconciled then by
its recovery mode. A delivery that failed is retried with exponential backoff (1 s
doubling to 5 min, or longer when a provider rate limit says so), at the delay its
``delivery_failed`` warning names: the poll loop wakes when a retry falls due, not at
its next ``poll_s``. An ambiguous one never again.

The reply of one status is the operation ``reply:<status message ID>``: a Task that
asks twice gets two replies, a second delivery of the same status is the same
delivery ID.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Iterator, Mapping

import attrs
import trio

from taskplane.actors.native import Delivery, NativeServices, StoredTask
from taskplane.actors.outbound import DeliveryAmbiguous, DeliveryConflict
from taskplane.actors.plane import TaskPlane
from taskplane.backoff import backoff
from taskplane.errors import TaskplaneError
from taskplane.model.enums import Role, TaskState
from taskplane.model.types import Message, Task
from taskplane.scope import Scope
from taskplane.sources.base import NATIVE_LOCATOR, Result, Source

log = logging.getLogger("taskplane.sources.delivery")

REPLY_PREFIX = "reply:"
WINDOW_MARGIN_MS = 5_000
RETRY_FIRST_S = 1.0
RETRY_CAP_S = 300.0
CONCURRENCY = 8
RESULT_PAGE = 256
"""The most results one poll returns (the source store's limit)."""
WATCH_TIMEOUT_S = 3600.0


@attrs.define
class _Retry:
    due: float
    """``trio.current_time()`` after which the delivery is tried again."""
    delays: Iterator[float]
    """The delays of the failures still to come (seconds)."""
    updated_at_ms: int


class Deliverer:
    """Delivers results of ``sources`` (by name); see the module docstring."""

    def __init__(
        self,
        plane: TaskPlane,
        services: NativeServices,
        sources: Mapping[str, Source],
        *,
        poll_s: float,
    ) -> None:
        self._plane = plane
        self._services = services
        self._sources = dict(sources)
        self._poll_s = poll_s
        self._retries: dict[str, _Retry] = {}
        self._busy: set[str] = set()
        self._limit = trio.CapacityLimiter(CONCURRENCY)
        self._nudged = trio.Event()
        self._watching: set[str] = set()
        self._nursery: trio.Nursery | None = None

    def keep_only(self, names: Iterable[str]) -> None:
        """Deliver only for these sources (the ones that started)."""
        keep = set(names)
        self._sources = {n: s for n, s in self._sources.items() if n in keep}

    def watch(self, scope: Scope, task_id: str) -> None:
        """Look for ``task_id``'s result as soon as it settles (non-blocking; without a
        watch the result is still found by the next periodic poll)."""
        if self._nursery is None or task_id in self._watching:
            return
        self._watching.add(task_id)
        self._nursery.start_soon(self._watch, scope, task_id)

    async def _watch(self, scope: Scope, task_id: str) -> None:
        try:
            await self._plane.wait_settled(scope, task_id, WATCH_TIMEOUT_S)
        except TaskplaneError:
            pass  # the periodic poll finds it
        finally:
            self._watching.discard(task_id)
        self._nudged.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Poll and deliver until cancelled (cancelling leaves ``sending`` records to
        the next start's reconciliation)."""
        since = 0  # the first pass reads everything: crash reconciliation
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            try:
                await self._poll(nursery, since)
            finally:
                self._nursery = None  # a later run (a new lease term) watches again

    async def _poll(self, nursery: trio.Nursery, since: int) -> None:
        """The poll loop of :meth:`run` (never returns)."""
        while True:
            started_ms = self._plane.now_ms()
            floor = min([since, *(r.updated_at_ms for r in self._due())])
            try:
                pending = await self._services.results_to_deliver(
                    list(self._sources), REPLY_PREFIX, floor
                )
            except TaskplaneError as exc:
                log.warning("result poll failed: %s", exc, extra={"event": "delivery_poll_failed"})
                pending = None
            if pending is not None:
                since = started_ms - WINDOW_MARGIN_MS
                listed = {stored.task.id for stored in pending}
                complete = len(pending) < RESULT_PAGE  # the answer was not truncated
                for task_id, entry in list(self._retries.items()):
                    if complete and entry.updated_at_ms >= floor and task_id not in listed:
                        del self._retries[task_id]  # delivered or resolved meanwhile
                for stored in pending:
                    retry = self._retries.get(stored.task.id)
                    if stored.task.id in self._busy or (
                        retry is not None and retry.due > trio.current_time()
                    ):
                        continue
                    self._busy.add(stored.task.id)
                    nursery.start_soon(self._deliver, stored)
            with trio.move_on_after(self._next_wait()):
                await self._nudged.wait()
            self._nudged = trio.Event()

    def _next_wait(self) -> float:
        """Seconds until the next poll: ``poll_s``, or sooner when a failed delivery's
        retry falls due first, so a retry happens after the delay its warning named."""
        now = trio.current_time()
        due = [r.due - now for r in self._retries.values() if r.due > now]
        return min([self._poll_s, *due])

    def _due(self) -> list[_Retry]:
        now = trio.current_time()
        return [r for r in self._retries.values() if r.due <= now]

    async def _deliver(self, stored: StoredTask) -> None:
        task_id = stored.task.id
        try:
            async with self._limit:
                await self._deliver_one(stored)
            self._retries.pop(task_id, None)
        except DeliveryAmbiguous as exc:
            self._retries.pop(task_id, None)
            log.error("%s", exc, extra={"event": "delivery_ambiguous", "taskId": task_id})
        except Exception as exc:
            # Any failure of one delivery (a refusal, an unknown outcome, a bug in a
            # source's sender) is retried later; it never stops the other deliveries.
            if isinstance(exc, DeliveryConflict):
                log.error("%s", exc, extra={"event": "delivery_conflict", "taskId": task_id})
            prior = self._retries.get(task_id)
            delays = backoff(RETRY_FIRST_S, RETRY_CAP_S) if prior is None else prior.delays
            delay = next(delays)
            # A provider rate limit says how long to wait (``wait_s`` on the refusal);
            # a longer wait than the backoff's is doubled from at the next failure.
            wait_s = getattr(exc.__cause__, "wait_s", None)
            if isinstance(wait_s, int | float) and wait_s > delay:
                delay = float(wait_s)
                delays = backoff(delay * 2, RETRY_CAP_S)
            self._retries[task_id] = _Retry(
                trio.current_time() + delay, delays, stored.updated_at_ms
            )
            self._nudged.set()  # the poll loop's wait is recomputed to end when it falls due
            log.warning(
                "delivery for task %s failed (retry in %.0f s): %s",
                task_id,
                delay,
                exc,
                extra={"event": "delivery_failed", "taskId": task_id},
            )
        finally:
            self._busy.discard(task_id)

    async def _deliver_one(self, stored: StoredTask) -> None:
        source = self._sources[stored.source]
        result = result_of(stored, source)
        sender = source.sender(result)
        interrupted = result.state.is_interrupted
        if sender.anchor is not None and interrupted and source.supports_anchors:
            await self._plane.record_reply_anchor(
                stored.scope, stored.source, sender.anchor, result.task.id
            )
        response_id = await self._plane.outbound.deliver(
            result.delivery, sender.send, sender.reconcile
        )
        log.info(
            "result of task %s delivered to %s as %s",
            result.task.id,
            stored.source,
            response_id,
            extra={
                "event": "result_delivered",
                "taskId": result.task.id,
                "source": stored.source,
                "deliveryId": result.delivery.delivery_id,
                "providerResponseId": response_id,
            },
        )


def result_of(stored: StoredTask, source: Source) -> Result:
    """The :class:`Result` of ``stored``'s current status."""
    task = stored.task
    status = task.status.message
    operation = status.message_id if status is not None else task.status.state.name
    text = reply_text(task)
    digest = hashlib.sha256(f"{task.status.state.name}\0{text}".encode()).hexdigest()
    delivery = Delivery(
        task_id=task.id,
        source=stored.source,
        operation_id=REPLY_PREFIX + operation,
        payload_digest=digest,
        recovery=source.recovery,
    )
    return Result(task, stored.scope, text, locator_of(task), delivery)


def reply_text(task: Task) -> str:
    """COMPLETED: the ``response`` artifact's text (else the status message);
    REJECTED and INPUT_REQUIRED: the status message's text."""
    if task.status.state is TaskState.TASK_STATE_COMPLETED:
        for artifact in reversed(task.artifacts):
            if artifact.name == "response":
                return _text(artifact.parts)
    return _text(task.status.message.parts) if task.status.message else ""


def locator_of(task: Task) -> dict[str, str]:
    """The native locator of the newest provider item in ``task``'s history."""
    for message in reversed(task.history):
        if message.role is Role.ROLE_USER:
            return _locator(message)
    return {}


def _locator(message: Message) -> dict[str, str]:
    meta = message.parts[0].metadata or {}
    value = meta.get(NATIVE_LOCATOR)
    if not isinstance(value, dict):
        return {}
    return {str(k): str(v) for k, v in value.items()}


def _text(parts: object) -> str:
    assert isinstance(parts, tuple)
    return "\n".join(p.text for p in parts if p.text is not None)
