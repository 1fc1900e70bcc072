"""The acceptance transaction: one activation claimed, projected and queued atomically.

Design rules "Durable first, then visible" and "Idempotency is mandatory": an item
is accepted when its Task, wake and evidence are durably committed. Here that is one
store op (one transaction, or one SAVEPOINT of a batch): the ``CLAIM``, the Task
created or continued with the caller's history entry, the context mapping, the
origin with the ``outfitter-task/v1`` locator, the ``task.activation`` evidence and
``ACCEPTED``. Nothing is written when any check fails.

Two paths, one outcome. The common case, a new Task in a fresh context (no explicit
``taskId``, reply, client ``contextId`` or conversation key), is one statement
(:mod:`taskplane.store.postgres.new_tasks`), shared by every such acceptance of a
batch (:class:`PlainAcceptance`); an identity already claimed writes nothing there
and falls through to the general path, which decides in Python as the SQLite store
does. Every acceptance first takes a
transaction advisory lock on its provider key, so two sessions accepting one
identity at once are serialized and the second finds the first's claim.

Blocking functions of a psycopg connection, called only inside store ops.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Literal

import attrs

from taskplane.errors import DuplicateMessageId, InvalidRequest
from taskplane.model.codec import decode_json, encode_json
from taskplane.model.lifecycle import awaits_reply, continue_task, new_task
from taskplane.model.types import Message
from taskplane.store import rows
from taskplane.store.postgres import anchors, evidence, journal, new_tasks, tasks
from taskplane.store.postgres.schema import Connection
from taskplane.store.records import (
    Accepted,
    Activation,
    Locator,
    StoredTask,
)

_LOCK_KEY = "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))"


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
    if new_tasks.is_plain(act):
        (created,) = new_tasks.accept_plain(conn, [(act, locator, now_ms)])
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
        rows.claim_record(act, route, task.id, task.context_id, None, now_ms),
        now_ms,
        task_id=task.id,
        key=act.provider_key,
    )
    origin_id, task_locator = rows.origin(act, locator, task.id)
    conn.execute(
        "INSERT INTO origins (origin_id, activation_id, task_id, relation, locator_json,"
        " recorded_at_ms) VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (origin_id) DO NOTHING",
        (origin_id, act.activation_id, task.id, route, json.dumps(task_locator), now_ms),
    )
    evidence.append(conn, rows.activation_evidence(act, task.id, task_locator), now_ms)
    journal.append(
        conn, "ACCEPTED", act.activation_id, {"acceptedAt": now_ms}, now_ms, task_id=task.id
    )
    return Accepted(route, act.activation_id, stored=stored)


@attrs.frozen
class PlainAcceptance:
    """The op of a plain activation's acceptance (see :mod:`new_tasks`). The batch
    runner may run every such op of a batch together (:meth:`run_fused`): one
    statement for all of their new Tasks."""

    act: Activation
    locator: Locator
    now_ms: int

    def __call__(self, conn: Connection) -> Accepted:
        return accept(conn, self.act, self.locator, self.now_ms)

    @staticmethod
    def run_fused(conn: Connection, ops: Sequence[PlainAcceptance]) -> list[Accepted]:
        """Each op's outcome, as if each had run alone, in order; the new Tasks in
        one statement, the already claimed identities through :func:`accept`.

        Raises:
            DuplicateMessageId: one identity was reused with another payload (the
                batch runner then runs the ops one by one).
        """
        created = new_tasks.accept_plain(conn, [(o.act, o.locator, o.now_ms) for o in ops])
        return [
            c if c is not None else accept(conn, o.act, o.locator, o.now_ms)
            for o, c in zip(ops, created, strict=True)
        ]


def accept_op(act: Activation, locator: Locator, now_ms: int) -> Callable[[Connection], Accepted]:
    """The store op that accepts ``act`` (a :class:`PlainAcceptance` when it is plain)."""
    if new_tasks.is_plain(act):
        return PlainAcceptance(act, locator, now_ms)
    return lambda conn: accept(conn, act, locator, now_ms)


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
    record = rows.claim_record(
        act, "direct", None, reply.context_id, encode_json(reply).decode(), now_ms
    )
    journal.append(conn, "CLAIM", act.activation_id, record, now_ms, key=act.provider_key)
    journal.append(conn, "ACCEPTED", act.activation_id, {"acceptedAt": now_ms}, now_ms)
    return Accepted("created", act.activation_id, reply=reply)


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
