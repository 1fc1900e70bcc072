"""Plain new Tasks, accepted in one statement however many share a batch.

A *plain* activation (no explicit ``taskId``, reply, client ``contextId`` or
conversation key) can only be new work in its minted context, or a duplicate. Its
whole acceptance (CLAIM, Task, context, origin, evidence, ACCEPTED, and the wake row
holding one slot of the cluster-wide bound, :mod:`taskplane.store.postgres.wakes`)
is a row of arrays in :data:`_INSERT`; every write chains from the claims' ``INSERT ... ON
CONFLICT DO NOTHING``, so an activation whose identity is already claimed writes
nothing and is handed back for the general path to decide. The statement first
takes the transaction advisory lock of every provider key, in hash order (so two
batches never wait on each other's keys in opposite orders). A batch of many plain
acceptances is one round trip and one execution, not one per acceptance.

Blocking functions of a psycopg connection, called only inside store ops.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from taskplane.model.codec import encode_json
from taskplane.model.lifecycle import new_task
from taskplane.store import rows
from taskplane.store.paging import status_ts
from taskplane.store.postgres import wakes
from taskplane.store.postgres.schema import Connection
from taskplane.store.records import Accepted, Activation, Fence, Locator, StoredTask, TurnClaim
from taskplane.store.rows import evidence_json

_COLUMNS = (
    "act", "key", "task", "claim", "accepted", "now", "tenant", "principal", "source",
    "context", "state", "ts", "task_json", "origin", "locator", "evidence", "ahead",
)  # fmt: skip
_TYPES = {"now": "bigint[]", "ahead": "boolean[]"}

_INSERT = f"""
WITH lock AS (
    SELECT count(pg_advisory_xact_lock(h)) AS locked
    FROM (SELECT hashtextextended(k, 0) AS h FROM unnest(%(key)s::text[]) AS k ORDER BY h) s
), v AS (
    SELECT x.* FROM lock, unnest(
        {", ".join(f"%({c})s::{_TYPES.get(c, 'text[]')}" for c in _COLUMNS)}
    ) WITH ORDINALITY AS x({", ".join(_COLUMNS)}, n)
), claim AS (
    INSERT INTO journal (kind, activation_id, provider_key, task_id, record_json,
                         recorded_at_ms)
    SELECT 'CLAIM', v.act, v.key, v.task, v.claim, v.now FROM v ORDER BY v.n
    ON CONFLICT (provider_key) WHERE kind = 'CLAIM' DO NOTHING
    RETURNING activation_id
), fresh AS (
    SELECT v.* FROM v JOIN claim ON claim.activation_id = v.act
), task AS (
    INSERT INTO tasks (task_id, tenant, principal, source, context_id, state, status_ts,
                       task_json, version, created_at_ms, updated_at_ms)
    SELECT task, tenant, principal, source, context, state, ts, task_json, 1, now, now
    FROM fresh
), ctx AS (
    INSERT INTO contexts (tenant, principal, source, conversation_key, context_id,
                          last_active_at_ms)
    SELECT tenant, principal, source, context, context, now FROM fresh
    ON CONFLICT (tenant, principal, source, conversation_key)
    DO UPDATE SET last_active_at_ms = excluded.last_active_at_ms
), origin AS (
    INSERT INTO origins (origin_id, activation_id, task_id, relation, locator_json,
                         recorded_at_ms)
    SELECT origin, act, task, 'created', locator, now FROM fresh
    ON CONFLICT (origin_id) DO NOTHING
), ev AS (
    INSERT INTO evidence (record_type, activation_id, task_id, record_json, recorded_at_ms)
    SELECT 'task.activation', act, task, evidence, now FROM fresh ORDER BY n
), accepted AS (
    INSERT INTO journal (kind, activation_id, task_id, record_json, recorded_at_ms)
    SELECT 'ACCEPTED', act, task, accepted, now FROM fresh ORDER BY n
), queued AS (
    SELECT act, n FROM fresh WHERE NOT ahead
), free AS (
    SELECT slot FROM wake_slots WHERE activation_id IS NULL
    ORDER BY slot LIMIT (SELECT count(*) FROM queued) FOR UPDATE SKIP LOCKED
), free_n AS (
    SELECT slot, row_number() OVER (ORDER BY slot) AS r FROM free
), fresh_n AS (
    SELECT act, row_number() OVER (ORDER BY n) AS r FROM queued
), taken AS (
    UPDATE wake_slots s SET activation_id = f.act
    FROM free_n JOIN fresh_n f ON f.r = free_n.r WHERE s.slot = free_n.slot
    RETURNING s.slot
), lanes AS (
    INSERT INTO wake_lanes (lane, running_activation)
    SELECT context, CASE WHEN ahead THEN act END FROM fresh ON CONFLICT DO NOTHING
), wake AS (
    INSERT INTO wakes (activation_id, task_id, context_id, lane, accepted_source, accepted_by,
                       state, node_id, epoch, lease_until)
    SELECT act, task, context, context, source, %(by)s::text,
           CASE WHEN ahead THEN 'running' ELSE 'pending' END,
           CASE WHEN ahead THEN %(turn_node)s::text END,
           CASE WHEN ahead THEN 1 ELSE 0 END,
           CASE WHEN ahead THEN now() + make_interval(secs => %(ttl)s::float8) END
    FROM fresh ORDER BY n
)
SELECT activation_id, (SELECT count(*) FROM taken), (SELECT count(*) FROM queued) FROM claim
"""


def is_plain(act: Activation) -> bool:
    """``act`` can only be new work in its minted context (or a duplicate)."""
    return (
        act.explicit_task_id is None
        and act.reply_to is None
        and act.requested_context_id is None
        and act.conversation_key is None
    )


def accept_plain(
    conn: Connection,
    items: Sequence[tuple[Activation, Locator, int, TurnClaim | None]],
    accepted_by: str | None = None,
) -> list[Accepted | None]:
    """Create the new Task of each plain ``(activation, locator, now_ms, turn)``, in
    one statement; per item its ``created`` outcome, or ``None`` where the identity is
    already claimed (also by an earlier item of ``items``), which wrote nothing.
    ``accepted_by``: the accepting node, on the wake rows (see ``wakes.enqueue``).
    An item with a ``turn`` (design rule "A wake waits for its node") has its wake
    born running under that turn's lease, epoch 1, its lane marked running (the
    context is new: nothing runs or waits in it), no slot of the bound taken, and the
    lease in its outcome's ``fence``; every such turn of one call is one node's.

    Raises:
        Overloaded: fewer slots of the wake bound were free than new Tasks; the
            statement's writes are the caller's to roll back (its op raises).
    """
    values: dict[str, list[object]] = {c: [] for c in _COLUMNS}
    outcomes: list[Accepted | None] = []
    keys: set[str] = set()
    turns = {turn for *_, turn in items if turn is not None}
    assert len(turns) <= 1, "one node's acceptances: one node id and lease length"
    turn = next(iter(turns), None)
    for act, locator, now_ms, ahead in items:
        if act.provider_key in keys:
            outcomes.append(None)
            continue
        keys.add(act.provider_key)
        task = new_task(act.minted_task_id, act.minted_context_id, act.message, now_ms)
        origin_id, task_locator = rows.origin(act, locator, task.id)
        claim = rows.claim_record(act, "created", task.id, task.context_id, None, now_ms)
        evidence = rows.activation_evidence(act, task.id, task_locator)
        row: dict[str, object] = {
            "act": act.activation_id,
            "key": act.provider_key,
            "task": task.id,
            "claim": rows.record_json("CLAIM", act.activation_id, claim),
            "accepted": rows.record_json("ACCEPTED", act.activation_id, {"acceptedAt": now_ms}),
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
            "evidence": evidence_json(evidence, now_ms),
            "ahead": ahead is not None,
        }
        for column in _COLUMNS:
            values[column].append(row[column])
        stored = StoredTask(task, act.scope, act.source, 1, now_ms)
        fence = None if ahead is None else Fence(act.activation_id, 1, ahead.node_id)
        outcomes.append(Accepted("created", act.activation_id, stored=stored, fence=fence))
    params = {
        **values,
        "by": accepted_by,
        "turn_node": None if turn is None else turn.node_id,
        "ttl": None if turn is None else turn.ttl_s,
    }
    found = conn.execute(_INSERT, params).fetchall()
    claimed = {r[0] for r in found}
    if found and found[0][1] < found[0][2]:
        raise wakes.full_error()
    return [o if o is not None and o.activation_id in claimed else None for o in outcomes]
