"""The acceptance transaction: one activation claimed, projected and queued atomically.

Design rules "Task and conversation semantics" and "Contract decisions": an item
is accepted when its Task, wake and evidence are durably committed. Here that is one
store op (so one SQLite transaction): the ``CLAIM``, the Task created or continued
with the caller's history entry, the context mapping, the origin record with the
``outfitter-task/v1`` locator, the ``task.activation`` evidence and ``ACCEPTED``. A
claim that is ``ACCEPTED`` and not yet ``WOKEN`` is the queued wake. Nothing is
written when any check fails.

Blocking functions of a ``sqlite3.Connection``, called only inside store ops.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Literal

import attrs

from taskplane.errors import DuplicateMessageId, InvalidRequest
from taskplane.model.codec import decode_json, encode_json
from taskplane.model.lifecycle import awaits_reply, continue_task, new_task
from taskplane.model.types import Message
from taskplane.store import rows
from taskplane.store.records import (
    Accepted,
    Activation,
    Locator,
    StoredTask,
)
from taskplane.store.sqlite import anchors, evidence, journal, tasks


def find_duplicate(conn: sqlite3.Connection, act: Activation) -> Accepted | None:
    """The prior outcome of ``act``'s identity, or ``None`` if it is new work.

    A claim whose Task was pruned is forgotten here, so the identity is accepted as
    new work (design rule: "Once that Task and its claim have been pruned...").

    Raises:
        DuplicateMessageId: the identity was used with a different payload.
    """
    claim = journal.find_claim(conn, act.provider_key)
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
    stored = tasks.load(conn, claim.task_id) if claim.task_id else None
    if stored is None or stored.scope != act.scope:
        journal.forget_activation(conn, claim.activation_id)
        return None
    woken = conn.execute(
        "SELECT 1 FROM journal WHERE activation_id = ? AND kind IN ('WOKEN', 'WAKE_FAILED')",
        (claim.activation_id,),
    ).fetchone()
    return Accepted("duplicate", claim.activation_id, stored=stored, pending_wake=woken is None)


def accept(conn: sqlite3.Connection, act: Activation, locator: Locator, now_ms: int) -> Accepted:
    """Claim, project and queue ``act`` in the current transaction.

    Raises:
        DuplicateMessageId: same identity, different payload.
        TaskNotFound: ``explicit_task_id`` is unknown or not this principal's.
        InvalidRequest: ``explicit_task_id`` with a different ``contextId``.
        UnsupportedOperation / InvalidRequest: the continuation is refused (terminal
            Task, Task not waiting for input).
    """
    message = act.message
    prior = find_duplicate(conn, act)
    if prior is not None:
        return prior
    anchored = _verified_anchor(conn, act)
    if anchored is not None:
        stored = tasks.update(conn, anchored, continue_task(anchored.task, message, now_ms), now_ms)
        route: Literal["created", "continued"] = "continued"
    elif act.explicit_task_id is not None:
        stored = tasks.load_scoped(conn, act.scope, act.explicit_task_id)
        if act.requested_context_id not in (None, stored.task.context_id):
            raise InvalidRequest(
                f"message.contextId {act.requested_context_id} does not match the context "
                f"of task {stored.task.id}",
                field_violations=[("message.contextId", "differs from the task's contextId")],
            )
        stored = tasks.update(conn, stored, continue_task(stored.task, message, now_ms), now_ms)
        _touch_context(conn, act, stored.task.context_id or act.minted_context_id, now_ms)
        route = "continued"
    else:
        context_id = _resolve_context(conn, act, now_ms)
        created = new_task(act.minted_task_id, context_id, message, now_ms)
        stored = tasks.insert(conn, created, act.scope, act.source, now_ms)
        route = "created"
    task = stored.task
    journal.append(
        conn,
        "CLAIM",
        act.activation_id,
        rows.claim_record(act, route, task.id, task.context_id, None, now_ms),
        now_ms,
        task_id=task.id,
        key=act.provider_key,
    )
    origin_id, task_locator = rows.origin(act, locator, task.id)
    conn.execute(
        "INSERT OR IGNORE INTO origins (origin_id, activation_id, task_id, relation,"
        " locator_json, recorded_at_ms) VALUES (?, ?, ?, ?, ?, ?)",
        (origin_id, act.activation_id, task.id, route, json.dumps(task_locator), now_ms),
    )
    evidence.append(conn, rows.activation_evidence(act, task.id, task_locator), now_ms)
    journal.append(
        conn, "ACCEPTED", act.activation_id, {"acceptedAt": now_ms}, now_ms, task_id=task.id
    )
    return Accepted(route, act.activation_id, stored=stored)


def anchor_target(conn: sqlite3.Connection, act: Activation) -> str | None:
    """The Task a native event's reply anchor points at, if the anchor is verified."""
    stored = _verified_anchor(conn, act)
    return None if stored is None else stored.task.id


def _verified_anchor(conn: sqlite3.Connection, act: Activation) -> StoredTask | None:
    """The Task ``act`` continues through a verified reply anchor, else ``None``.

    Every condition of the design rules must hold (a waiting Task of this
    principal with an unanswered request, anchored at the response ``act`` directly
    replies to); if any fails, the event creates a new Task instead: anchor failure is
    never a rejection.
    """
    if act.reply_to is None or act.explicit_task_id is not None:
        return None
    task_id = anchors.lookup(conn, act.scope, act.source, act.reply_to)
    stored = tasks.load(conn, task_id) if task_id is not None else None
    if stored is None or stored.scope != act.scope or not awaits_reply(stored.task):
        return None
    return stored


def record_direct(
    conn: sqlite3.Connection, act: Activation, reply: Message, now_ms: int
) -> Accepted:
    """Record ``reply`` (a direct Message, no Task) as the stored outcome of ``act``,
    in the context it joins.

    Raises:
        DuplicateMessageId: same identity, different payload (a concurrent send).
    """
    prior = find_duplicate(conn, act)
    if prior is not None:
        return prior
    reply = attrs.evolve(reply, context_id=_resolve_context(conn, act, now_ms))
    record = rows.claim_record(
        act, "direct", None, reply.context_id, encode_json(reply).decode(), now_ms
    )
    journal.append(conn, "CLAIM", act.activation_id, record, now_ms, key=act.provider_key)
    journal.append(conn, "ACCEPTED", act.activation_id, {"acceptedAt": now_ms}, now_ms)
    return Accepted("created", act.activation_id, reply=reply)


def _resolve_context(conn: sqlite3.Connection, act: Activation, now_ms: int) -> str:
    """The contextId of a new Task: an owned client context, the conversation's, or fresh.

    A client ``contextId`` this principal does not own (unknown, or another
    principal's) never joins that context: it is mapped, by the same atomic upsert as a
    conversation key, to one fresh context of this principal, so concurrent first
    messages naming it share one context (design rule "Contract decisions").
    """
    scope = act.scope
    requested = act.requested_context_id
    if requested is not None:
        owned = conn.execute(
            "SELECT 1 FROM contexts WHERE tenant = ? AND principal = ? AND context_id = ? LIMIT 1",
            (scope.tenant, scope.principal, requested),
        ).fetchone()
        if owned:
            _touch_context(conn, act, requested, now_ms)
            return requested
        return _upsert_conversation(conn, act, "client-context:" + requested, now_ms)
    if act.conversation_key is not None:
        return _upsert_conversation(conn, act, act.conversation_key, now_ms)
    _touch_context(conn, act, act.minted_context_id, now_ms)
    return act.minted_context_id


def _upsert_conversation(conn: sqlite3.Connection, act: Activation, key: str, now_ms: int) -> str:
    """The atomic upsert ``(tenant, principal, source, key) -> contextId``: the first
    writer's minted contextId wins, later ones read it."""
    scope = act.scope
    conn.execute(
        "INSERT INTO contexts (tenant, principal, source, conversation_key, context_id,"
        " last_active_at_ms) VALUES (?, ?, ?, ?, ?, ?)"
        " ON CONFLICT (tenant, principal, source, conversation_key)"
        " DO UPDATE SET last_active_at_ms = excluded.last_active_at_ms",
        (scope.tenant, scope.principal, act.source, key, act.minted_context_id, now_ms),
    )
    row = conn.execute(
        "SELECT context_id FROM contexts WHERE tenant = ? AND principal = ? AND source = ?"
        " AND conversation_key = ?",
        (scope.tenant, scope.principal, act.source, key),
    ).fetchone()
    return str(row[0])


def _touch_context(conn: sqlite3.Connection, act: Activation, context_id: str, now_ms: int) -> None:
    """Record that ``act.scope`` owns ``context_id`` and was active in it now."""
    key = act.conversation_key if act.conversation_key is not None else context_id
    conn.execute(
        "INSERT INTO contexts (tenant, principal, source, conversation_key, context_id,"
        " last_active_at_ms) VALUES (?, ?, ?, ?, ?, ?)"
        " ON CONFLICT (tenant, principal, source, conversation_key)"
        " DO UPDATE SET last_active_at_ms = excluded.last_active_at_ms",
        (act.scope.tenant, act.scope.principal, act.source, key, context_id, now_ms),
    )
