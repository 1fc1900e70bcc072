"""The acceptance decision, once for every backend: claim, duplicate or ``409`` by
digest, continuation, context, and the records an accepted activation writes.

Design rules "Durable first, then visible", "Idempotency is mandatory" and "Task and
conversation semantics": an item is accepted when its Task, wake and evidence are
durably committed. Here that is one store op (one transaction, or one SAVEPOINT of
a batch): the ``CLAIM``, the Task created or continued with the caller's history
entry, the context mapping, the origin record with the ``outfitter-task/v1``
locator, the ``task.activation`` evidence and ``ACCEPTED``. A claim that is
``ACCEPTED`` and not yet ``WOKEN`` is the queued wake. Nothing is written when any
check fails.

What a backend supplies is an :class:`AcceptanceRecorder`: the reads and writes of
its engine (SQL dialect, placeholders, driver). Anything a backend does before the
decision (PostgreSQL's advisory lock and single-statement path for plain new Tasks)
stays in that backend. Blocking functions, called only inside store ops.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal, Protocol, TypeVar

import attrs

from taskplane.errors import DuplicateMessageId, InvalidRequest
from taskplane.model.codec import decode_json, encode_json
from taskplane.model.lifecycle import awaits_reply, continue_task, new_task
from taskplane.model.types import Message, Task
from taskplane.scope import Scope
from taskplane.store import rows
from taskplane.store.records import Accepted, Activation, EvidenceRecord, Locator, StoredTask
from taskplane.store.rows import Claim

C = TypeVar("C")
C_contra = TypeVar("C_contra", contravariant=True)


class AcceptanceRecorder(Protocol[C_contra]):
    """The engine's half of an acceptance, over connection ``C``: each a blocking
    function run inside the store op's transaction."""

    def find_claim(self, conn: C_contra, key: str) -> Claim | None:
        """The CLAIM under provider key ``key``, or ``None``."""
        ...

    def forget_activation(self, conn: C_contra, activation: str) -> None:
        """Delete every journal record of ``activation``."""
        ...

    def wake_settled(self, conn: C_contra, activation: str) -> bool:
        """Whether ``activation`` has a ``WOKEN`` or ``WAKE_FAILED`` record."""
        ...

    def load(self, conn: C_contra, task_id: str) -> StoredTask | None: ...

    def load_scoped(self, conn: C_contra, scope: Scope, task_id: str) -> StoredTask: ...

    def insert(
        self, conn: C_contra, task: Task, scope: Scope, source: str, now_ms: int
    ) -> StoredTask: ...

    def update(self, conn: C_contra, stored: StoredTask, task: Task, now_ms: int) -> StoredTask: ...

    def lookup_anchor(
        self, conn: C_contra, scope: Scope, source: str, provider_response_id: str
    ) -> str | None: ...

    def append_journal(
        self,
        conn: C_contra,
        kind: str,
        activation: str,
        record: Mapping[str, Any],
        now_ms: int,
        *,
        task_id: str | None = None,
        key: str | None = None,
    ) -> None: ...

    def insert_origin(
        self,
        conn: C_contra,
        origin_id: str,
        activation_id: str,
        task_id: str,
        relation: str,
        locator_json: str,
        now_ms: int,
    ) -> None:
        """Record an origin row once (a second insert of ``origin_id`` is a no-op)."""
        ...

    def append_evidence(self, conn: C_contra, record: EvidenceRecord, now_ms: int) -> None: ...

    def owns_context(self, conn: C_contra, scope: Scope, context_id: str) -> bool:
        """Whether ``scope`` has a context mapping to ``context_id``."""
        ...

    def touch_context(
        self, conn: C_contra, scope: Scope, source: str, key: str, context_id: str, now_ms: int
    ) -> None:
        """Upsert ``(tenant, principal, source, key) -> context_id``, refreshing its
        last activity on conflict (the stored contextId is kept)."""
        ...

    def upsert_conversation(
        self, conn: C_contra, scope: Scope, source: str, key: str, context_id: str, now_ms: int
    ) -> str:
        """:meth:`touch_context`, returning the contextId that is stored (the first
        writer's)."""
        ...


def find_duplicate(rec: AcceptanceRecorder[C], conn: C, act: Activation) -> Accepted | None:
    """The prior outcome of ``act``'s identity, or ``None`` if it is new work.

    A claim whose Task was pruned is forgotten here, so the identity is accepted as
    new work (design rule "Idempotency is mandatory", retention).

    Raises:
        DuplicateMessageId: the identity was used with a different payload.
    """
    claim = rec.find_claim(conn, act.provider_key)
    if claim is None:
        return None
    if claim.digest != act.digest:
        raise DuplicateMessageId(
            f"messageId {act.dedupe_key} was already used with a different payload",
            metadata={"messageId": act.dedupe_key},
        )
    if claim.route == "direct":
        assert claim.outcome_message_json is not None
        reply = decode_json(claim.outcome_message_json, Message)
        return Accepted("duplicate", claim.activation_id, reply=reply)
    stored = rec.load(conn, claim.task_id) if claim.task_id else None
    if stored is None or stored.scope != act.scope:
        rec.forget_activation(conn, claim.activation_id)
        return None
    pending = not rec.wake_settled(conn, claim.activation_id)
    return Accepted("duplicate", claim.activation_id, stored=stored, pending_wake=pending)


def accept(
    rec: AcceptanceRecorder[C], conn: C, act: Activation, locator: Locator, now_ms: int
) -> Accepted:
    """Claim, project and queue ``act`` in the current transaction (or return its
    prior outcome).

    Raises:
        DuplicateMessageId: same identity, different payload.
        TaskNotFound: ``explicit_task_id`` is unknown or not this principal's.
        InvalidRequest: ``explicit_task_id`` with a different ``contextId``.
        UnsupportedOperation / InvalidRequest: the continuation is refused (terminal
            Task, Task not waiting for input).
    """
    prior = find_duplicate(rec, conn, act)
    if prior is not None:
        return prior
    message = act.message
    anchored = _verified_anchor(rec, conn, act)
    if anchored is not None:
        stored = rec.update(conn, anchored, continue_task(anchored.task, message, now_ms), now_ms)
        route: Literal["created", "continued"] = "continued"
    elif act.explicit_task_id is not None:
        stored = rec.load_scoped(conn, act.scope, act.explicit_task_id)
        if act.requested_context_id not in (None, stored.task.context_id):
            raise InvalidRequest(
                f"message.contextId {act.requested_context_id} does not match the context "
                f"of task {stored.task.id}",
                field_violations=[("message.contextId", "differs from the task's contextId")],
            )
        stored = rec.update(conn, stored, continue_task(stored.task, message, now_ms), now_ms)
        _touch_context(rec, conn, act, stored.task.context_id or act.minted_context_id, now_ms)
        route = "continued"
    else:
        context_id = _resolve_context(rec, conn, act, now_ms)
        created = new_task(act.minted_task_id, context_id, message, now_ms)
        stored = rec.insert(conn, created, act.scope, act.source, now_ms)
        route = "created"
    task = stored.task
    rec.append_journal(
        conn,
        "CLAIM",
        act.activation_id,
        rows.claim_record(act, route, task.id, task.context_id, None, now_ms),
        now_ms,
        task_id=task.id,
        key=act.provider_key,
    )
    origin_id, task_locator = rows.origin(act, locator, task.id)
    rec.insert_origin(
        conn, origin_id, act.activation_id, task.id, route, json.dumps(task_locator), now_ms
    )
    rec.append_evidence(conn, rows.activation_evidence(act, task.id, task_locator), now_ms)
    rec.append_journal(
        conn, "ACCEPTED", act.activation_id, {"acceptedAt": now_ms}, now_ms, task_id=task.id
    )
    return Accepted(route, act.activation_id, stored=stored)


def anchor_target(rec: AcceptanceRecorder[C], conn: C, act: Activation) -> str | None:
    """The Task a native event's reply anchor points at, if the anchor is verified."""
    stored = _verified_anchor(rec, conn, act)
    return None if stored is None else stored.task.id


def record_direct(
    rec: AcceptanceRecorder[C], conn: C, act: Activation, reply: Message, now_ms: int
) -> Accepted:
    """Record ``reply`` (a direct Message, no Task) as the stored outcome of ``act``,
    in the context it joins (or return its prior outcome).

    Raises:
        DuplicateMessageId: same identity, different payload (a concurrent send).
    """
    prior = find_duplicate(rec, conn, act)
    if prior is not None:
        return prior
    reply = attrs.evolve(reply, context_id=_resolve_context(rec, conn, act, now_ms))
    record = rows.claim_record(
        act, "direct", None, reply.context_id, encode_json(reply).decode(), now_ms
    )
    rec.append_journal(conn, "CLAIM", act.activation_id, record, now_ms, key=act.provider_key)
    rec.append_journal(conn, "ACCEPTED", act.activation_id, {"acceptedAt": now_ms}, now_ms)
    return Accepted("created", act.activation_id, reply=reply)


def _verified_anchor(rec: AcceptanceRecorder[C], conn: C, act: Activation) -> StoredTask | None:
    """The Task ``act`` continues through a verified reply anchor, else ``None``.

    Every condition of the design rules must hold (a waiting Task of this
    principal with an unanswered request, anchored at the response ``act`` directly
    replies to); if any fails, the event creates a new Task instead: anchor failure is
    never a rejection.
    """
    if act.reply_to is None or act.explicit_task_id is not None:
        return None
    task_id = rec.lookup_anchor(conn, act.scope, act.source, act.reply_to)
    stored = rec.load(conn, task_id) if task_id is not None else None
    if stored is None or stored.scope != act.scope or not awaits_reply(stored.task):
        return None
    return stored


def _resolve_context(rec: AcceptanceRecorder[C], conn: C, act: Activation, now_ms: int) -> str:
    """The contextId of a new Task: an owned client context, the conversation's, or fresh.

    A client ``contextId`` this principal does not own (unknown, or another
    principal's) never joins that context: it is mapped, by the same atomic upsert as a
    conversation key, to one fresh context of this principal, so concurrent first
    messages naming it share one context (design rule "Contract decisions").
    """
    scope = act.scope
    requested = act.requested_context_id
    if requested is not None:
        if rec.owns_context(conn, scope, requested):
            _touch_context(rec, conn, act, requested, now_ms)
            return requested
        return rec.upsert_conversation(
            conn, scope, act.source, "client-context:" + requested, act.minted_context_id, now_ms
        )
    if act.conversation_key is not None:
        return rec.upsert_conversation(
            conn, scope, act.source, act.conversation_key, act.minted_context_id, now_ms
        )
    _touch_context(rec, conn, act, act.minted_context_id, now_ms)
    return act.minted_context_id


def _touch_context(
    rec: AcceptanceRecorder[C], conn: C, act: Activation, context_id: str, now_ms: int
) -> None:
    """Record that ``act.scope`` owns ``context_id`` and was active in it now."""
    key = act.conversation_key if act.conversation_key is not None else context_id
    rec.touch_context(conn, act.scope, act.source, key, context_id, now_ms)
