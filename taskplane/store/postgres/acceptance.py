"""PostgreSQL's half of the acceptance transaction (:mod:`taskplane.store.acceptance`
decides; this module reads and writes), and what PostgreSQL does before the decision.

Design rules "Durable first, then visible" and "Idempotency is mandatory". Two
paths, one outcome. The common case, a new Task in a fresh context (no explicit
``taskId``, reply, client ``contextId`` or conversation key), is one statement
(:mod:`taskplane.store.postgres.new_tasks`), shared by every such acceptance of a
batch (:class:`PlainAcceptance`); an identity already claimed writes nothing there
and falls through to the general path, the shared decision. Every acceptance first
takes a transaction advisory lock on its provider key, so two sessions accepting one
identity at once are serialized and the second finds the first's claim.

Design rule "Wake admission is bounded", on every node at once: an accepted
activation's wake row is written in the same transaction, taking one slot of the
cluster-wide bound (:mod:`taskplane.store.postgres.wakes`); with no slot free the
acceptance raises ``Overloaded`` and records nothing. A duplicate writes nothing.

Blocking functions of a psycopg connection, called only inside store ops.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs

from taskplane.model.types import Message
from taskplane.scope import Scope
from taskplane.store import acceptance as decide
from taskplane.store.postgres import anchors, evidence, journal, new_tasks, tasks, wakes
from taskplane.store.postgres.schema import Connection
from taskplane.store.records import Accepted, Activation, Locator, TurnClaim

_LOCK_KEY = "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))"

_UPSERT_CONTEXT = (
    "INSERT INTO contexts (tenant, principal, source, conversation_key, context_id,"
    " last_active_at_ms) VALUES (%s, %s, %s, %s, %s, %s)"
    " ON CONFLICT (tenant, principal, source, conversation_key)"
    " DO UPDATE SET last_active_at_ms = excluded.last_active_at_ms"
    " RETURNING context_id"
)


class _Recorder:
    """The :class:`~taskplane.store.acceptance.AcceptanceRecorder` of PostgreSQL."""

    find_claim = staticmethod(journal.find_claim)
    forget_activation = staticmethod(journal.forget_activation)
    load = staticmethod(tasks.load)
    load_scoped = staticmethod(tasks.load_scoped)
    insert = staticmethod(tasks.insert)
    update = staticmethod(tasks.update)
    lookup_anchor = staticmethod(anchors.lookup)
    append_journal = staticmethod(journal.append)
    append_evidence = staticmethod(evidence.append)

    @staticmethod
    def wake_settled(conn: Connection, activation: str) -> bool:
        row = conn.execute(
            "SELECT 1 FROM journal WHERE activation_id = %s AND kind IN ('WOKEN', 'WAKE_FAILED')",
            (activation,),
        ).fetchone()
        return row is not None

    @staticmethod
    def insert_origin(
        conn: Connection,
        origin_id: str,
        activation_id: str,
        task_id: str,
        relation: str,
        locator_json: str,
        now_ms: int,
    ) -> None:
        conn.execute(
            "INSERT INTO origins (origin_id, activation_id, task_id, relation, locator_json,"
            " recorded_at_ms) VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (origin_id) DO NOTHING",
            (origin_id, activation_id, task_id, relation, locator_json, now_ms),
        )

    @staticmethod
    def owns_context(conn: Connection, scope: Scope, context_id: str) -> bool:
        owned = conn.execute(
            "SELECT 1 FROM contexts WHERE tenant = %s AND principal = %s AND context_id = %s"
            " LIMIT 1",
            (scope.tenant, scope.principal, context_id),
        ).fetchone()
        return bool(owned)

    @staticmethod
    def touch_context(
        conn: Connection, scope: Scope, source: str, key: str, context_id: str, now_ms: int
    ) -> None:
        conn.execute(
            _UPSERT_CONTEXT, (scope.tenant, scope.principal, source, key, context_id, now_ms)
        )

    @staticmethod
    def upsert_conversation(
        conn: Connection, scope: Scope, source: str, key: str, context_id: str, now_ms: int
    ) -> str:
        row = conn.execute(
            _UPSERT_CONTEXT, (scope.tenant, scope.principal, source, key, context_id, now_ms)
        ).fetchone()
        assert row is not None
        return str(row[0])


_REC = _Recorder()


def find_duplicate(conn: Connection, act: Activation) -> Accepted | None:
    """See :func:`taskplane.store.acceptance.find_duplicate`."""
    return decide.find_duplicate(_REC, conn, act)


def accept(
    conn: Connection,
    act: Activation,
    locator: Locator,
    now_ms: int,
    accepted_by: str | None = None,
    turn: TurnClaim | None = None,
) -> Accepted:
    """Claim, project and queue ``act`` in the current transaction: a plain one by
    :mod:`new_tasks` when its identity is new (its wake born running under ``turn``
    if given), else under the provider key's advisory lock by
    :func:`taskplane.store.acceptance.accept` (its errors), its wake row queued beside
    it, naming ``accepted_by`` (the accepting node, see ``wakes.enqueue``).

    Raises:
        Overloaded: new work while every slot of the wake bound is taken; the op
            raises, so nothing of it is recorded.
    """
    if new_tasks.is_plain(act):
        (created,) = new_tasks.accept_plain(conn, [(act, locator, now_ms, turn)], accepted_by)
        if created is not None:
            return created
    else:
        conn.execute(_LOCK_KEY, (act.provider_key,))
    accepted = decide.accept(_REC, conn, act, locator, now_ms)
    if accepted.disposition != "duplicate" and accepted.stored is not None:
        task = accepted.stored.task
        wakes.enqueue(
            conn,
            accepted.activation_id,
            task.id,
            task.context_id,
            accepted.stored.source,
            accepted_by,
        )
    return accepted


@attrs.frozen
class PlainAcceptance:
    """The op of a plain activation's acceptance (see :mod:`new_tasks`). The batch
    runner may run every such op of a batch together (:meth:`run_fused`): one
    statement for all of their new Tasks."""

    act: Activation
    locator: Locator
    now_ms: int
    accepted_by: str | None = None
    turn: TurnClaim | None = None

    def __call__(self, conn: Connection) -> Accepted:
        return accept(conn, self.act, self.locator, self.now_ms, self.accepted_by, self.turn)

    @staticmethod
    def run_fused(conn: Connection, ops: Sequence[PlainAcceptance]) -> list[Accepted]:
        """Each op's outcome, as if each had run alone, in order; the new Tasks in
        one statement, the already claimed identities through :func:`accept`.

        Raises:
            DuplicateMessageId: one identity was reused with another payload (the
                batch runner then runs the ops one by one).
            Overloaded: fewer slots of the wake bound were free than new Tasks
                (likewise: one by one, each then takes a slot or is refused alone).
        """
        by = ops[0].accepted_by  # one node's batch: every op names it
        items = [(o.act, o.locator, o.now_ms, o.turn) for o in ops]
        created = new_tasks.accept_plain(conn, items, by)
        return [
            c if c is not None else accept(conn, o.act, o.locator, o.now_ms, o.accepted_by)
            for o, c in zip(ops, created, strict=True)
        ]


def accept_op(
    act: Activation,
    locator: Locator,
    now_ms: int,
    accepted_by: str | None = None,
    turn: TurnClaim | None = None,
) -> Callable[[Connection], Accepted]:
    """The store op that accepts ``act`` (a :class:`PlainAcceptance` when it is plain,
    whose new wake ``turn`` may claim) on node ``accepted_by`` (``None``: no node; see
    ``wakes.enqueue``)."""
    if new_tasks.is_plain(act):
        return PlainAcceptance(act, locator, now_ms, accepted_by, turn)
    return lambda conn: accept(conn, act, locator, now_ms, accepted_by)


def anchor_target(conn: Connection, act: Activation) -> str | None:
    """See :func:`taskplane.store.acceptance.anchor_target`."""
    return decide.anchor_target(_REC, conn, act)


def record_direct(conn: Connection, act: Activation, reply: Message, now_ms: int) -> Accepted:
    """See :func:`taskplane.store.acceptance.record_direct` (under the provider key's
    advisory lock, so a concurrent send of one identity finds the first's claim)."""
    conn.execute(_LOCK_KEY, (act.provider_key,))
    return decide.record_direct(_REC, conn, act, reply, now_ms)
