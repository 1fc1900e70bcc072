"""Task changes and the records written beside them, one statement per batch.

``apply`` is a compare-and-swap on the Task's ``version``. Every change of a batch
(usually one) goes into one data-modifying statement (:data:`_APPLY`): a multi-row
``UPDATE ... FROM unnest(...)`` that moves only the Tasks whose version is still the
one the change was decided on, chained to the journal and evidence inserts of the
changes that moved (``unnest ... WITH ORDINALITY``, so ``seq`` follows their order).
A change whose swap failed wrote nothing. Records without a change (``append``) are
one statement of the same inserts.

Fencing (design rule "Turn authority is a lease"): a change or an append made under
a turn's wake lease (``change.fence`` / ``fence``) checks that lease in the same
transaction. An append checks first (:func:`taskplane.store.postgres.wakes.check_fences`);
``apply`` checks in its own statement: the current leases among the batch's fences
are locked ``FOR SHARE`` (as ``check_fences`` locks them) and a change moves only if
its lease is among them, so a stale one raises :class:`~taskplane.errors.Fenced` and
the statement's writes are rolled back (nothing of the op is recorded).

Blocking functions of a psycopg connection, called only inside store ops.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import attrs

from taskplane.errors import Internal
from taskplane.store import task_rows
from taskplane.store.postgres.schema import Connection
from taskplane.store.postgres.wakes import (
    CHECK_FENCES_SQL,
    check_fences,
    fence_params,
    refuse_stale,
)
from taskplane.store.records import Fence, JournalRecord, Record, StoredTask, TaskChange
from taskplane.store.rows import evidence_json, record_json

_RECORDS = """
j AS (
    INSERT INTO journal (kind, activation_id, task_id, record_json, recorded_at_ms)
    SELECT x.k, x.a, x.t, x.r, x.at
    FROM unnest(%(jo)s::text[], %(jk)s::text[], %(ja)s::text[], %(jt)s::text[],
                %(jr)s::text[], %(jat)s::bigint[]) WITH ORDINALITY AS x(o, k, a, t, r, at, n)
    {join}
    ORDER BY x.n
), e AS (
    INSERT INTO evidence (record_type, activation_id, task_id, record_json, recorded_at_ms)
    SELECT x.k, x.a, x.t, x.r, x.at
    FROM unnest(%(eo)s::text[], %(ek)s::text[], %(ea)s::text[], %(et)s::text[],
                %(er)s::text[], %(eat)s::bigint[]) WITH ORDINALITY AS x(o, k, a, t, r, at, n)
    {join}
    ORDER BY x.n
)
"""

_APPEND = "WITH " + _RECORDS.format(join="") + "SELECT 1"

_APPLY = (
    """
WITH f AS ("""
    + CHECK_FENCES_SQL.strip()
    + """
), v AS (
    SELECT * FROM unnest(%(id)s::text[], %(version)s::bigint[], %(state)s::text[],
                         %(ts)s::text[], %(json)s::text[], %(now)s::bigint[],
                         %(fenced)s::text[])
    AS v(id, version, state, ts, json, now, fenced)
), u AS (
    UPDATE tasks t SET state = v.state, status_ts = v.ts, task_json = v.json,
                       version = t.version + 1, updated_at_ms = v.now
    FROM v WHERE t.task_id = v.id AND t.version = v.version
      AND (v.fenced IS NULL OR v.fenced IN (SELECT activation_id FROM f))
    RETURNING t.task_id
), """
    + _RECORDS.format(join="JOIN u ON u.task_id = x.o")
    + "SELECT task_id, NULL, NULL, NULL FROM u"
    + " UNION ALL SELECT NULL, activation_id, epoch, node_id FROM f"
)
"""Every change of a batch in one statement: the current leases among its fences
(``f``, each row locked ``FOR SHARE``), the swaps whose version still holds and
whose lease (if any) is current, and their records; it returns the Tasks moved and
the leases found current."""


_RECORD_COLUMNS = ("o", "k", "a", "t", "r", "at")


def _record_params(
    owned: Sequence[tuple[str | None, Sequence[Record], int]],
) -> dict[str, list[object]]:
    """The array parameters of :data:`_RECORDS`: each record with the Task whose
    change carries it (``o``) and its time."""
    params: dict[str, list[object]] = {
        f"{table}{column}": [] for table in "je" for column in _RECORD_COLUMNS
    }
    for owner, records, now_ms in owned:
        for r in records:
            table: str
            values: tuple[object, ...]
            if isinstance(r, JournalRecord):
                table = "j"
                stored = record_json(r.kind, r.activation_id, r.fields)
                values = (owner, r.kind, r.activation_id, r.task_id, stored, now_ms)
            else:
                table = "e"
                stored = evidence_json(r, now_ms)
                values = (owner, r.record_type, r.activation_id, r.task_id, stored, now_ms)
            for column, value in zip(_RECORD_COLUMNS, values, strict=True):
                params[table + column].append(value)
    return params


def append(
    conn: Connection, records: Sequence[Record], now_ms: int, fence: Fence | None = None
) -> None:
    """Append journal and evidence ``records``, in order, in one statement.

    Raises:
        Fenced: ``fence`` is not current; nothing was written.
    """
    # -- fence check (turn leases) --
    if fence is not None:
        check_fences(conn, (fence,))
    # --
    if records:
        conn.execute(_APPEND, _record_params([(None, records, now_ms)]))


@attrs.frozen
class ApplyChange:
    """The op of one ``apply``; the batch runner may run every such op of a batch
    together (:meth:`run_fused`): one statement for all of their changes. Alone in a
    batch it needs no transaction block (``stands_alone``): its one statement moves
    the Task only if the version and the lease hold, so when it raises (a version
    conflict, a stale lease) it wrote nothing."""

    change: TaskChange
    stands_alone: ClassVar[bool] = True

    def __call__(self, conn: Connection) -> StoredTask:
        return self.run_fused(conn, [self])[0]

    @staticmethod
    def run_fused(conn: Connection, ops: Sequence[ApplyChange]) -> list[StoredTask]:
        """Store each change whose Task's version is still its ``before``'s, with its
        records, in one statement; each op's new ``StoredTask``, in order.

        Raises:
            Fenced: a change's ``fence`` is not current; nothing was written.
            VersionConflict: a Task's version moved since its change was decided (or
                the Task is gone); Internal: two changes of one Task were fused.
                Either way nothing of the statement stays usable (the batch runner
                rolls it back and runs the ops one by one).
        """
        changes = [op.change for op in ops]
        ids = [c.before.task.id for c in changes]
        if len(set(ids)) != len(ids):
            raise Internal("two changes of one Task in one batch")
        params: dict[str, list[object]] = {
            k: [] for k in ("id", "version", "state", "ts", "json", "now", "fenced")
        }
        for c in changes:
            state, ts, task_json, now_ms, task_id, version = task_rows.update_params(
                c.before, c.after, c.now_ms
            )
            for key, value in zip(
                ("id", "version", "state", "ts", "json", "now"),
                (task_id, version, state, ts, task_json, now_ms),
                strict=True,
            ):
                params[key].append(value)
            params["fenced"].append(None if c.fence is None else c.fence.activation_id)
        params.update(_record_params([(c.after.id, c.records, c.now_ms) for c in changes]))
        fences = [c.fence for c in changes if c.fence is not None]
        params.update(fence_params(fences))
        moved: set[str] = set()
        current: set[Fence] = set()
        for task_id, activation_id, epoch, node_id in conn.execute(_APPLY, params).fetchall():
            if task_id is not None:
                moved.add(task_id)
            else:
                current.add(Fence(activation_id, int(epoch), node_id))
        refuse_stale(fences, current)  # before a version conflict: the turn must stop
        for c in changes:
            if c.after.id not in moved:
                raise task_rows.concurrent_write(c.after, c.before)
        return [task_rows.moved(c.before, c.after, c.now_ms) for c in changes]
