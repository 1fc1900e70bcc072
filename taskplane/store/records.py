"""The task store's records: plain frozen values that cross the store contract.

Everything a caller hands to :class:`~taskplane.store.contract.TaskStore` or gets back
from it is defined here, whatever the backend. Record field names inside journal and
evidence ``fields`` follow the design rules' record contracts (camelCase).
Timestamps are integer milliseconds since the Unix epoch.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import datetime
from typing import Literal

import attrs

from taskplane.model.enums import TaskState
from taskplane.model.types import Message, Task
from taskplane.scope import Scope

A2A_SOURCE = "a2a"
"""The intake source name of the A2A HTTP binding."""

RETENTION_MS = 30 * 24 * 3600 * 1000
"""The retention window of startup compaction: 30 days, in ms."""

JournalKind = Literal["CLAIM", "ACCEPTED", "WOKEN", "WAKE_DELIVERED", "WAKE_FAILED", "QUARANTINED"]
Recovery = Literal["idempotent", "lookup", "ambiguous"]
DeliveryState = Literal["prepared", "sending", "delivered", "failed", "ambiguous"]


def short_hash(*parts: str) -> str:
    """First 40 hex chars of SHA-256 over ``parts`` joined with NUL (derived IDs)."""
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:40]


def provider_key(tenant: str, principal: str, source: str, dedupe_key: str) -> str:
    """The dedupe identity: h(tenant, principal, source, messageId or event identity)."""
    return short_hash(tenant, principal, source, dedupe_key)


def activation_id(key: str) -> str:
    """``activation-`` + h(provider key)."""
    return "activation-" + short_hash(key)


@attrs.frozen
class Locator:
    """The interface part of an ``outfitter-task/v1`` task locator."""

    agent_interface: str
    protocol_binding: str = "HTTP+JSON"
    protocol_version: str = "1.0"

    def for_task(self, tenant: str, task_id: str) -> dict[str, str]:
        """The full ``taskLocator`` object for ``task_id`` (schema field names)."""
        locator = {
            "agentInterface": self.agent_interface,
            "protocolBinding": self.protocol_binding,
            "protocolVersion": self.protocol_version,
            "taskId": task_id,
        }
        if tenant:
            locator["tenant"] = tenant
        return locator


@attrs.frozen
class Activation:
    """One intake item, as the trusted task-plane sink receives it.

    Attributes:
        scope: the authenticated (tenant, principal).
        source: ``"a2a"`` for the HTTP binding, else the native source name.
        dedupe_key: the A2A ``messageId``, or the native source's event identity.
        digest: ``"sha256:<hex>"`` over the payload, server-minted IDs excluded.
        message: the caller's message as received (IDs are filled in on accept).
        explicit_task_id: an authorized explicit ``taskId`` continuation, or ``None``.
        requested_context_id: a client-supplied ``contextId`` (attaches only when
            this principal already owns it; otherwise a fresh context is used).
        conversation_key: the native source's conversation key (``None`` for A2A).
        minted_task_id / minted_context_id: fresh IDs, used only if needed.
        received_at_ms: intake time, ms since the epoch.
        reply_to: the provider message this event directly replies to (native sources
            with reply relations); a verified reply anchor there continues its Task.
    """

    scope: Scope
    source: str
    dedupe_key: str
    digest: str
    message: Message
    explicit_task_id: str | None
    requested_context_id: str | None
    conversation_key: str | None
    minted_task_id: str
    minted_context_id: str
    received_at_ms: int
    reply_to: str | None = None

    @property
    def provider_key(self) -> str:
        """h(tenant, principal, source, dedupe key): the dedupe identity."""
        return provider_key(self.scope.tenant, self.scope.principal, self.source, self.dedupe_key)

    @property
    def activation_id(self) -> str:
        """``activation-`` + h(provider key)."""
        return activation_id(self.provider_key)


@attrs.frozen
class StoredTask:
    """A Task as stored, with its scope and optimistic-concurrency version.

    Attributes:
        task: the A2A Task, history and artifacts included.
        scope: the owning (tenant, principal).
        source: the intake source that created it (``"a2a"`` for the HTTP binding).
        version: 1 when created, incremented by every change (compare-and-set).
        updated_at_ms: last write, ms since the epoch.
    """

    task: Task
    scope: Scope
    source: str
    version: int
    updated_at_ms: int


@attrs.frozen
class Accepted:
    """The answer of intake: the Task created, continued, or the prior outcome.

    Exactly one of ``stored`` and ``reply`` is set. ``pending_wake``: a duplicate whose
    activation was accepted but never woken (a crash lost its wake): offer it again.
    """

    disposition: Literal["created", "continued", "duplicate"]
    activation_id: str
    stored: StoredTask | None = None
    reply: Message | None = None
    pending_wake: bool = False
    fence: Fence | None = None
    """The lease of the turn this acceptance also claimed (the :class:`TurnClaim` it
    was given, served), else ``None`` (its wake, if any, is queued)."""

    @property
    def task(self) -> Task | None:
        """The A2A Task created or continued (``None`` for a direct reply)."""
        return None if self.stored is None else self.stored.task


@attrs.frozen
class TaskQuery:
    """One ListTasks request over ``scope``'s Tasks (filters validated by the caller).

    Attributes:
        status_after: keep Tasks whose status timestamp is >= this instant.
        page_size: 1..100.
        page_token: ``None``/``""`` for the first page, else a ``next_page_token``.
    """

    scope: Scope
    context_id: str | None = None
    state: TaskState | None = None
    status_after: datetime | None = None
    page_size: int = 50
    page_token: str | None = None


@attrs.frozen
class TaskPage:
    """One ListTasks page: Tasks newest status first, the next page's cursor
    (``""`` on the last page) and the number of Tasks matching the filters."""

    tasks: tuple[Task, ...]
    next_page_token: str
    total_size: int


@attrs.frozen
class JournalRecord:
    """One activation journal record to append (never ``CLAIM`` or ``ACCEPTED``: those
    only :meth:`TaskStore.accept` writes).

    Attributes:
        fields: the record's own fields (e.g. ``{"wokenAt": ms}``); ``kind`` and
            ``activationId`` are added by the store.
    """

    kind: JournalKind = attrs.field(
        validator=attrs.validators.in_(("WOKEN", "WAKE_DELIVERED", "WAKE_FAILED", "QUARANTINED"))
    )
    activation_id: str
    task_id: str | None
    fields: Mapping[str, object]


@attrs.frozen
class EvidenceRecord:
    """One evidence record to append (``activation.unhealthy``...).

    Attributes:
        fields: the record's fields; ``recordType`` and ``recordedAt`` are added.
    """

    record_type: str
    fields: Mapping[str, object]
    activation_id: str | None = None
    task_id: str | None = None


Record = JournalRecord | EvidenceRecord
"""A record written beside a change, in the same transaction."""


@attrs.frozen
class Fence:
    """The lease a write is made under: it commits only while that lease is current.

    Design rule "Turn authority is a lease": on a store shared by several nodes, the
    turn of ``activation_id``'s wake belongs to ``node_id`` while its lease (epoch
    ``epoch``) has not expired on the database's clock. Every write the turn causes
    carries this fence and checks it in its own transaction; a stale fence raises
    :class:`~taskplane.errors.Fenced` and records nothing. A store with no leases
    (SQLite: one process) accepts every fence.
    """

    activation_id: str
    epoch: int
    node_id: str


@attrs.frozen
class TurnClaim:
    """What an acceptance may also do: claim its new wake for a turn on node
    ``node_id`` at once, under a lease of ``ttl_s`` seconds, instead of queueing it.

    Design rule "A wake waits for its node": a node with a free turn slot and no wake
    waiting that it knows of asks this of the acceptance it is about to commit (a wake
    row that is born running skips a claim round trip and holds no slot of the bound).
    A store whose wake queue is rows (PostgreSQL) serves it for a new Task in a fresh
    context (:attr:`Accepted.fence`: epoch 1); any other acceptance, and a store
    without wake rows, queues the wake as usual (``fence`` ``None``).
    """

    node_id: str
    ttl_s: float


@attrs.frozen
class TaskChange:
    """Replace ``before.task`` with ``after`` (and append ``records``), atomically.

    ``before`` is the snapshot the change was decided on: the write is refused if the
    Task's version moved since (one writer per Task). ``fence``: the turn lease the
    change is made under (``None``: no turn's, e.g. a caller's cancel).
    """

    before: StoredTask
    after: Task
    now_ms: int
    records: tuple[Record, ...] = ()
    fence: Fence | None = None


@attrs.frozen
class JournalEntry:
    """One stored journal record (``fields`` as recorded, ``kind`` included)."""

    kind: JournalKind
    activation_id: str
    task_id: str | None
    fields: Mapping[str, object]
    recorded_at_ms: int


@attrs.frozen
class EvidenceEntry:
    """One stored evidence record (``fields`` as recorded, ``recordType`` included)."""

    record_type: str
    activation_id: str | None
    task_id: str | None
    fields: Mapping[str, object]
    recorded_at_ms: int


@attrs.frozen
class ActivationState:
    """What the journal says about one activation (for the wake queue).

    Attributes:
        task_id: the Task its CLAIM names (``None``: unknown or a direct reply).
        kinds: the journal record kinds present.
        deliveries: the highest ``WAKE_DELIVERED`` delivery number (0 if none).
        newer_claim_exists: a later CLAIM names the same Task.
    """

    activation_id: str
    task_id: str | None
    kinds: frozenset[str]
    deliveries: int
    newer_claim_exists: bool


@attrs.frozen
class WakeState:
    """An activation's journal state and the Task its wake names, read together."""

    activation: ActivationState
    stored: StoredTask | None


@attrs.frozen
class PendingActivation:
    """An accepted activation eligible for a wake at startup (``context_id``: its
    Task's contextId, which orders the turns of one context)."""

    activation_id: str
    task_id: str
    context_id: str | None = None


@attrs.frozen
class Delivery:
    """One outbound provider mutation and how to recover it after a crash.

    Attributes:
        recovery: ``idempotent`` (sending again is safe), ``lookup`` (a reconciler can
            find a sent message), ``ambiguous`` (neither: an uncertain outcome is never
            retried automatically).
        payload_policy: ``"fixed"``: the operation ID alone names the delivery, so
            reusing it with other content is refused.
    """

    task_id: str
    source: str
    operation_id: str
    payload_digest: str
    recovery: Recovery
    payload_policy: str | None = None

    @property
    def delivery_id(self) -> str:
        """``delivery-`` + h(taskId, source, operationId[, payloadDigest])."""
        parts = [self.task_id, self.source, self.operation_id]
        if self.payload_policy != "fixed":
            parts.append(self.payload_digest)
        return "delivery-" + short_hash(*parts)


@attrs.frozen
class DeliveryRecord:
    """The stored state of one delivery."""

    delivery_id: str
    payload_digest: str
    state: DeliveryState
    provider_response_id: str | None
    error: str | None


@attrs.frozen
class CompactionReport:
    """Records removed by one compaction, per kind (counts)."""

    tasks: int
    journal: int
    contexts: int
    evidence: int
    origins: int
    reply_anchors: int
    deliveries: int


@attrs.frozen
class StoreStatistics:
    """Counters of one running store (since it was opened).

    Attributes:
        transactions: transactions committed or rolled back.
        operations: named operations answered (a value or an error).
        largest_batch: the most operations one transaction held (group commit).
        commit_failure: why the last write could not be made durable (disk full, I/O
            error), until a write commits again; ``None`` while writes commit.
    """

    transactions: int
    operations: int
    largest_batch: int
    commit_failure: str | None = None


@attrs.frozen
class StoreCounts:
    """A point-in-time reading of the store.

    Attributes:
        tasks_by_state: Task count per ``TASK_STATE_*`` name.
        deliveries_by_state: outbound delivery count per state (``prepared``, ...).
        unhealthy_after_ms: unhealthy evidence records newer than the ``since_ms``
            asked for (ms since the epoch).
    """

    tasks_by_state: dict[str, int]
    deliveries_by_state: dict[str, int]
    unhealthy_after_ms: int
