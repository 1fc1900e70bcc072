"""The acceptance transaction: one activation claimed, projected and queued atomically.

Design rules "Durable first, then visible" and "Idempotency is mandatory": an item
is accepted when its Task, wake and evidence are durably committed. Here that is one
store op (one transaction, or one SAVEPOINT of a batch): the ``CLAIM``, the Task
created or continued with the caller's history entry, the context mapping, the
origin with the ``outfitter-task/v1`` locator, the ``task.activation`` evidence and
``ACCEPTED``. Nothing is written when any check fails.

Two paths, one outcome. The common case, a new Task in a fresh context (no explicit
``taskId``, reply, client ``contextId`` or conversation key), is one statement
(:data:`_NEW_TASK`): its writes chain from ``INSERT ... ON CONFLICT DO NOTHING`` on
the claim, so a duplicate writes nothing and falls through to the general path,
which decides in Python as the SQLite store does. Every acceptance first takes a
transaction advisory lock on its provider key, so two sessions accepting one
identity at once are serialized and the second finds the first's claim.

Blocking functions of a psycopg connection, called only inside store ops.
"""

from __future__ import annotations

import json
from typing import Literal

import attrs

from taskplane.errors import DuplicateMessageId, InvalidRequest
from taskplane.model.codec import decode_json, encode_json
from taskplane.model.lifecycle import awaits_reply, continue_task, new_task
from taskplane.model.types import Message
from taskplane.store.paging import status_ts
from taskplane.store.postgres import anchors, evidence, journal, tasks
from taskplane.store.postgres.schema import Connection
from taskplane.store.postgres.writes import evidence_json
from taskplane.store.records import (
    Accepted,
    Activation,
    EvidenceRecord,
    Locator,
    StoredTask,
    short_hash,
)

_LOCK_KEY = "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))"

_NEW_TASK = """
WITH lock AS (SELECT pg_advisory_xact_lock(hashtextextended(%(key)s, 0))),
claim AS (
    INSERT INTO journal (kind, activation_id, provider_key, task_id, record_json,
                         recorded_at_ms)
    SELECT 'CLAIM', %(act)s, %(key)s, %(task)s, %(claim)s, %(now)s FROM lock
    ON CONFLICT (provider_key) WHERE kind = 'CLAIM' DO NOTHING
    RETURNING seq
), task AS (
    INSERT INTO tasks (task_id, tenant, principal, source, context_id, state, status_ts,
                       task_json, version, created_at_ms, updated_at_ms)
    SELECT %(task)s, %(tenant)s, %(principal)s, %(source)s, %(context)s, %(state)s,
           %(ts)s, %(task_json)s, 1, %(now)s, %(now)s FROM claim
), ctx AS (
    INSERT INTO contexts (tenant, principal, source, conversation_key, context_id,
                          last_active_at_ms)
    SELECT %(tenant)s, %(principal)s, %(source)s, %(context)s, %(context)s, %(now)s
    FROM claim
    ON CONFLICT (tenant, principal, source, conversation_key)
    DO UPDATE SET last_active_at_ms = excluded.last_active_at_ms
), origin AS (
    INSERT INTO origins (origin_id, activation_id, task_id, relation, locator_json,
                         recorded_at_ms)
    SELECT %(origin)s, %(act)s, %(task)s, 'created', %(locator)s, %(now)s FROM claim
    ON CONFLICT (origin_id) DO NOTHING
), ev AS (
    INSERT INTO evidence (record_type, activation_id, task_id, record_json, recorded_at_ms)
    SELECT 'task.activation', %(act)s, %(task)s, %(evidence)s, %(now)s FROM claim
), accepted AS (
    INSERT INTO journal (kind, activation_id, task_id, record_json, recorded_at_ms)
    SELECT 'ACCEPTED', %(act)s, %(task)s, %(accepted)s, %(now)s FROM claim
)
SELECT count(*) FROM claim
"""


def find_duplicate(conn: Connection, act: Activation) -> Accepted | None:
    """The prior outcome of ``act``'s identity, or ``None`` if it is new work.

    A claim whose Task was pruned is forgotten here, so the identity is accepted as
    new work (design rule "Idempotency is mandatory", retention).

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
        "SELECT 1 FROM journal WHERE activation_id = %s AND kind IN ('WOKEN', 'WAKE_FAILED')",
        (claim.activation_id,),
    ).fetchone()
    return Accepted("duplicate", claim.activation_id, stored=stored, pending_wake=woken is None)


def accept(conn: Connection, act: Activation, locator: Locator, now_ms: int) -> Accepted:
    """Claim, project and queue ``act`` in the current transaction.

    Raises:
        DuplicateMessageId: same identity, different payload.
        TaskNotFound: ``explicit_task_id`` is unknown or not this principal's.
        InvalidRequest: ``explicit_task_id`` with a different ``contextId``.
        UnsupportedOperation / InvalidRequest: the continuation is refused (terminal
            Task, Task not waiting for input).
    """
    if _is_plain_new_task(act):
        created = _accept_new_task(conn, act, locator, now_ms)
        if created is not None:
            return created
    else:
        conn.execute(_LOCK_KEY, (act.provider_key,))
    prior = find_duplicate(conn, act)
    if prior is not None:
        return prior
    message = act.message
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
        created_task = new_task(act.minted_task_id, context_id, message, now_ms)
        stored = tasks.insert(conn, created_task, act.scope, act.source, now_ms)
        route = "created"
    task = stored.task
    journal.append(
        conn,
        "CLAIM",
        act.activation_id,
        _claim_record(act, route, task.id, task.context_id, None, now_ms),
        now_ms,
        task_id=task.id,
        key=act.provider_key,
    )
    origin_id, task_locator = _origin(act, locator, task.id)
    conn.execute(
        "INSERT INTO origins (origin_id, activation_id, task_id, relation, locator_json,"
        " recorded_at_ms) VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (origin_id) DO NOTHING",
        (origin_id, act.activation_id, task.id, route, json.dumps(task_locator), now_ms),
    )
    evidence.append(conn, _activation_evidence(act, task.id, task_locator), now_ms)
    journal.append(
        conn, "ACCEPTED", act.activation_id, {"acceptedAt": now_ms}, now_ms, task_id=task.id
    )
    return Accepted(route, act.activation_id, stored=stored)


def _is_plain_new_task(act: Activation) -> bool:
    """``act`` can only be new work in its minted context (or a duplicate)."""
    return (
        act.explicit_task_id is None
        and act.reply_to is None
        and act.requested_context_id is None
        and act.conversation_key is None
    )


def _accept_new_task(
    conn: Connection, act: Activation, locator: Locator, now_ms: int
) -> Accepted | None:
    """The new Task of a plain ``act`` in one statement, or ``None`` if its identity
    is already claimed (nothing was written; the caller decides what it is)."""
    task = new_task(act.minted_task_id, act.minted_context_id, act.message, now_ms)
    origin_id, task_locator = _origin(act, locator, task.id)
    claim = _claim_record(act, "created", task.id, task.context_id, None, now_ms)
    row = conn.execute(
        _NEW_TASK,
        {
            "key": act.provider_key,
            "act": act.activation_id,
            "task": task.id,
            "claim": journal.record_json("CLAIM", act.activation_id, claim),
            "now": now_ms,
            "tenant": act.scope.tenant,
            "principal": act.scope.principal,
            "source": act.source,
            "context": task.context_id,
            "state": task.status.state.name,
            "ts": status_ts(task),
            "task_json": encode_json(task).decode(),
            "origin": origin_id,
            "locator": json.dumps(task_locator),
            "evidence": evidence_json(_activation_evidence(act, task.id, task_locator), now_ms),
            "accepted": journal.record_json("ACCEPTED", act.activation_id, {"acceptedAt": now_ms}),
        },
    ).fetchone()
    if not row or row[0] != 1:
        return None
    return Accepted(
        "created", act.activation_id, stored=StoredTask(task, act.scope, act.source, 1, now_ms)
    )


def _origin(act: Activation, locator: Locator, task_id: str) -> tuple[str, dict[str, str]]:
    """The origin id and ``taskLocator`` of ``act``'s Task ``task_id``."""
    origin_id = "origin-" + short_hash(
        act.activation_id,
        locator.agent_interface,
        locator.protocol_binding,
        locator.protocol_version,
        act.scope.tenant,
        task_id,
    )
    return origin_id, locator.for_task(act.scope.tenant, task_id)


def _activation_evidence(
    act: Activation, task_id: str, task_locator: dict[str, str]
) -> EvidenceRecord:
    return EvidenceRecord(
        "task.activation",
        {
            "activationId": act.activation_id,
            "taskId": task_id,
            "contentDigest": act.digest,
            "locator": task_locator,
        },
        activation_id=act.activation_id,
        task_id=task_id,
    )


def anchor_target(conn: Connection, act: Activation) -> str | None:
    """The Task a native event's reply anchor points at, if the anchor is verified."""
    stored = _verified_anchor(conn, act)
    return None if stored is None else stored.task.id


def _verified_anchor(conn: Connection, act: Activation) -> StoredTask | None:
    """The Task ``act`` continues through a verified reply anchor, else ``None``: a
    waiting Task of this principal with an unanswered request, anchored at the
    response ``act`` directly replies to. Anchor failure is never a rejection."""
    if act.reply_to is None or act.explicit_task_id is not None:
        return None
    task_id = anchors.lookup(conn, act.scope, act.source, act.reply_to)
    stored = tasks.load(conn, task_id) if task_id is not None else None
    if stored is None or stored.scope != act.scope or not awaits_reply(stored.task):
        return None
    return stored


def record_direct(conn: Connection, act: Activation, reply: Message, now_ms: int) -> Accepted:
    """Record ``reply`` (a direct Message, no Task) as the stored outcome of ``act``,
    in the context it joins.

    Raises:
        DuplicateMessageId: same identity, different payload (a concurrent send).
    """
    conn.execute(_LOCK_KEY, (act.provider_key,))
    prior = find_duplicate(conn, act)
    if prior is not None:
        return prior
    reply = attrs.evolve(reply, context_id=_resolve_context(conn, act, now_ms))
    record = _claim_record(
        act, "direct", None, reply.context_id, encode_json(reply).decode(), now_ms
    )
    journal.append(conn, "CLAIM", act.activation_id, record, now_ms, key=act.provider_key)
    journal.append(conn, "ACCEPTED", act.activation_id, {"acceptedAt": now_ms}, now_ms)
    return Accepted("created", act.activation_id, reply=reply)


def _claim_record(
    act: Activation,
    route: str,
    task_id: str | None,
    context_id: str | None,
    outcome_json: str | None,
    now_ms: int,
) -> dict[str, object]:
    record: dict[str, object] = {
        "providerKey": act.provider_key,
        "taskId": task_id,
        "contextId": context_id,
        "intendedRoute": route,
        "digest": act.digest,
        "input": {
            "principal": act.scope.principal,
            "tenant": act.scope.tenant,
            "source": act.source,
            "providerEventId": act.dedupe_key,
            "conversationKey": act.conversation_key,
            "receivedAt": act.received_at_ms,
        },
        "claimedAt": now_ms,
    }
    if outcome_json is not None:
        record["outcome"] = outcome_json
    return record


def _resolve_context(conn: Connection, act: Activation, now_ms: int) -> str:
    """The contextId of a new Task: an owned client context, the conversation's, or
    fresh. A client ``contextId`` this principal does not own is mapped, by the same
    atomic upsert as a conversation key, to one fresh context of this principal."""
    scope = act.scope
    requested = act.requested_context_id
    if requested is not None:
        owned = conn.execute(
            "SELECT 1 FROM contexts WHERE tenant = %s AND principal = %s AND context_id = %s"
            " LIMIT 1",
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


_UPSERT_CONTEXT = (
    "INSERT INTO contexts (tenant, principal, source, conversation_key, context_id,"
    " last_active_at_ms) VALUES (%s, %s, %s, %s, %s, %s)"
    " ON CONFLICT (tenant, principal, source, conversation_key)"
    " DO UPDATE SET last_active_at_ms = excluded.last_active_at_ms"
    " RETURNING context_id"
)


def _upsert_conversation(conn: Connection, act: Activation, key: str, now_ms: int) -> str:
    """The atomic upsert ``(tenant, principal, source, key) -> contextId``: the first
    writer's minted contextId wins, later ones read it."""
    scope = act.scope
    row = conn.execute(
        _UPSERT_CONTEXT,
        (scope.tenant, scope.principal, act.source, key, act.minted_context_id, now_ms),
    ).fetchone()
    assert row is not None
    return str(row[0])


def _touch_context(conn: Connection, act: Activation, context_id: str, now_ms: int) -> None:
    """Record that ``act.scope`` owns ``context_id`` and was active in it now."""
    key = act.conversation_key if act.conversation_key is not None else context_id
    scope = act.scope
    conn.execute(
        _UPSERT_CONTEXT, (scope.tenant, scope.principal, act.source, key, context_id, now_ms)
    )
