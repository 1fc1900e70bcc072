"""The wake queue as rows: the cluster-wide bound, per-context order, turn leases.

Design rules "Wake admission is bounded", "Wake authority begins at delivery", "Wake
recovery follows durable Task state" and "Turn authority is a lease", on a store
shared by several nodes. Three tables (:mod:`taskplane.store.postgres.schema`):

* ``wakes``: one row per accepted activation that should wake the agent: its Task,
  its *lane* (:func:`~taskplane.store.wake_rows.lane_of`: the Task's contextId, else
  ``task:`` + its ID), ``seq`` (allocation order), ``state`` (``pending`` ->
  ``running`` -> ``done``, or ``paused`` until ``not_before``), and while running
  the lease: ``node_id``, ``epoch``, ``lease_until``. Every time is the database's
  (``now()``), never a node's.
* ``wake_lanes``: one row per lane, ``running_activation`` set while one of its
  wakes runs. The row is the lane's lock: a claim locks it ``FOR UPDATE SKIP
  LOCKED``, so turns of one context never overlap or reorder on any node.
* ``wake_slots``: ``WAKE_SLOTS`` rows; a pending wake admitted by an acceptance
  holds one (taken with ``SKIP LOCKED`` in the acceptance's own transaction, so the
  bound is exact and has no hot counter row). The slot frees when the wake is first
  claimed for a turn. Wakes restored from durable state (startup backfill), reclaimed
  or back from a pause hold none, as in one process.

The claim is the *guarded* one: it locks the lane row, then moves the wake only if
the wake is still in the state (and epoch) the pick read, and retries otherwise.
Under READ COMMITTED a lock wait re-checks only the locked row's new version, so a
wake read before the lock may already be claimed or done; the unguarded claim
double-claims there. Every lane lock is taken before the wake row it guards (claim,
completion, pause), so two nodes never wait on each other in opposite orders.

A wake row written by an acceptance carries its Task's source (``accepted_source``);
its first claim (epoch 1: no node ever delivered it) hands it on
(:attr:`~taskplane.store.wake_rows.Claimed.accepted_source`), so the first delivery
reads neither the journal nor the Task row: nothing of the activation is journaled
yet, and the grant checks the Task. A reclaimed, resumed or restored wake reads the
journal as before, so the delivery cap counts every delivery.

Design rule "A wake waits for its node": a wake row written by an acceptance names
the node that accepted it (``accepted_by``) and when (``queued_at``). For
:data:`AFFINITY_S` after that only that node claims it; then any node may. The node
that accepted a send holds its owner, its blocking reply and its subscribers, so a
turn run there needs no other node to catch up on the Task; a node that cannot take
its own wakes in time (every turn slot busy, paused, dead) loses them to the others
after the grace; until a wake has waited :data:`STARVATION_S`, another node takes
it only after its own, so busy nodes keep their own backlogs. Rows restored, back
from a pause or written by no node have no preference. FIFO among contexts
therefore holds per node, and among all wakes that waited past ``STARVATION_S``;
order within a context always holds.

A fence (:class:`~taskplane.store.records.Fence`) is current while its wake row is
``running`` under that node and epoch and its lease has not expired on ``now()``;
:func:`check_fences` locks the row ``FOR SHARE``, so a reclaim waits for the write it
judged current to commit (and a write after a reclaim sees the new epoch).

Blocking functions of a psycopg connection, called inside a transaction.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from taskplane.errors import Fenced, Overloaded
from taskplane.store.postgres.schema import WAKE_SLOTS, Connection
from taskplane.store.records import Fence, PendingActivation
from taskplane.store.wake_rows import Claimed, Renewal, lane_of

AFFINITY_S = 0.2
"""Seconds a wake is claimed only by the node that accepted it (design rule "A wake
waits for its node"); below the claim poll (``taskplane.cluster.wake.POLL_S``), so
another node's next poll after the grace finds it."""
STARVATION_S = 2.0
"""Seconds after which a waiting wake goes first by age on every node. Between the
grace and this, a node takes another node's wakes only after its own (so two busy
nodes do not trade their backlogs); past it, age alone orders, so no wake waits
behind a busy node's stream for long."""


def full_error() -> Overloaded:
    """The 503 an acceptance gets when no slot is free (nothing was recorded)."""
    return Overloaded(f"the agent has {WAKE_SLOTS} tasks waiting; retry shortly", retry_after_s=1)


_ENQUEUE = """
WITH free AS (
    SELECT slot FROM wake_slots WHERE activation_id IS NULL
    ORDER BY slot LIMIT 1 FOR UPDATE SKIP LOCKED
), taken AS (
    UPDATE wake_slots s SET activation_id = %(a)s FROM free WHERE s.slot = free.slot
    RETURNING s.slot
), lane AS (
    INSERT INTO wake_lanes (lane) SELECT %(lane)s FROM taken ON CONFLICT DO NOTHING
), wake AS (
    INSERT INTO wakes (activation_id, task_id, context_id, lane, accepted_source, accepted_by)
    SELECT %(a)s, %(t)s, %(c)s, %(lane)s, %(source)s, %(by)s FROM taken
)
SELECT count(*) FROM taken
"""


def enqueue(
    conn: Connection,
    activation_id: str,
    task_id: str,
    context_id: str | None,
    source: str | None = None,
    accepted_by: str | None = None,
) -> None:
    """Queue the wake of a just-accepted activation, taking one slot of the bound.
    ``source``: its Task's source, carried on the row for the first delivery (see the
    module docstring); ``None`` carries none (that delivery reads the journal).
    ``accepted_by``: the accepting node, which alone claims it for ``AFFINITY_S``
    (``None``: any node at once).

    Raises:
        Overloaded: no slot is free; the wake is not queued and the caller's
            transaction must record nothing (its op raises, so it is rolled back).
    """
    params = {
        "a": activation_id,
        "t": task_id,
        "c": context_id,
        "lane": lane_of(task_id, context_id),
        "source": source,
        "by": accepted_by,
    }
    row = conn.execute(_ENQUEUE, params).fetchone()
    if not row or row[0] != 1:
        raise full_error()


def restore(conn: Connection, pending: Sequence[PendingActivation]) -> int:
    """Give each accepted activation of ``pending`` (from ``pending_activations()``)
    a wake row if it has none (a database from before the wake rows); no slot is
    taken (accepted work). Idempotent; returns how many rows were added."""
    if not pending:
        return 0
    params = {
        "a": [p.activation_id for p in pending],
        "t": [p.task_id for p in pending],
        "c": [p.context_id for p in pending],
        "lane": [lane_of(p.task_id, p.context_id) for p in pending],
    }
    conn.execute(
        "INSERT INTO wake_lanes (lane) SELECT DISTINCT l FROM unnest(%(lane)s::text[]) AS l"
        " ON CONFLICT DO NOTHING",
        params,
    )
    added = conn.execute(
        "INSERT INTO wakes (activation_id, task_id, context_id, lane)"
        " SELECT a, t, c, l FROM unnest(%(a)s::text[], %(t)s::text[], %(c)s::text[],"
        " %(lane)s::text[]) WITH ORDINALITY AS x(a, t, c, l, n) ORDER BY n"
        " ON CONFLICT (activation_id) DO NOTHING",
        params,
    )
    return added.rowcount


_PICK = """
SELECT w.activation_id, w.task_id, w.context_id, w.lane, w.state, w.epoch,
       w.accepted_source, w.seq,
       (w.state <> 'running' AND w.accepted_by IS DISTINCT FROM %(node)s
        AND w.accepted_by IS NOT NULL
        AND w.queued_at > now() - make_interval(secs => %(starve)s)) AS later
FROM wakes w JOIN wake_lanes l ON l.lane = w.lane
WHERE w.state <> 'done'
  AND NOT (w.lane = ANY(%(held)s::text[]))
  AND (
    (w.state = 'running' AND w.lease_until < now() AND l.running_activation = w.activation_id)
    OR (l.running_activation IS NULL
        AND (w.state = 'pending' OR (w.state = 'paused' AND w.not_before <= now()))
        AND (w.accepted_by IS NULL OR w.accepted_by = %(node)s
             OR w.queued_at <= now() - make_interval(secs => %(affinity)s))
        AND NOT EXISTS (
            SELECT 1 FROM wakes e
            WHERE e.lane = w.lane AND e.seq < w.seq AND e.state <> 'done'
              AND NOT (e.state = 'paused' AND e.not_before > now())))
  )
ORDER BY later, w.seq
LIMIT %(limit)s
FOR UPDATE OF l SKIP LOCKED
"""
"""The claimable wakes: at most one per lane (the first open wake of a lane that runs
nothing, if it is this node's or its grace is over, or the running one whose lease
expired), each lane row locked; first by ``seq`` those of this node, of no node,
reclaims and those waiting past ``STARVATION_S``, then by ``seq`` other nodes'
wakes past their grace (``later``)."""

_MOVE = """
UPDATE wakes SET state = 'running', node_id = %(node)s, epoch = epoch + 1,
                 lease_until = now() + make_interval(secs => %(ttl)s), not_before = NULL
WHERE activation_id = %(a)s AND state = %(state)s AND epoch = %(epoch)s
  AND (state <> 'running' OR lease_until < now())
RETURNING epoch
"""

_CLAIM = f"""
WITH picked AS ({_PICK.strip()}
), moved AS (
    UPDATE wakes w SET state = 'running', node_id = %(node)s, epoch = w.epoch + 1,
                       lease_until = now() + make_interval(secs => %(ttl)s),
                       not_before = NULL
    FROM picked p
    WHERE w.activation_id = p.activation_id AND w.state = p.state AND w.epoch = p.epoch
      AND (w.state <> 'running' OR w.lease_until < now())
    RETURNING w.activation_id, w.lane, w.epoch
), marked AS (
    UPDATE wake_lanes l SET running_activation = m.activation_id
    FROM moved m WHERE l.lane = m.lane
), freed AS (
    UPDATE wake_slots s SET activation_id = NULL
    FROM moved m WHERE s.activation_id = m.activation_id
    RETURNING m.activation_id
)
SELECT p.activation_id, p.task_id, p.context_id, p.state, p.accepted_source, m.epoch,
       f.activation_id IS NOT NULL, p.lane
FROM picked p
LEFT JOIN moved m ON m.activation_id = p.activation_id
LEFT JOIN freed f ON f.activation_id = p.activation_id
ORDER BY p.later, p.seq
"""
"""One round trip for a whole claim: the pick (``_PICK``, each lane row locked), the
guarded move of every wake picked (as ``_MOVE``: only if it is still in the state and
epoch the pick read), and only for the wakes it moved, their lanes marked running and
their slots freed. Each picked wake comes back, in the pick's order, with its new
epoch, or ``NULL`` if it moved meanwhile (a lost race). The wake rows are updated
only through ``picked``, so every lane lock is taken before the wake row it guards;
the tables the parts write are distinct, so they never see each other's rows."""

MAX_CLAIM_RACES = 8
"""Picks a claim may lose to another node (its wake moved meanwhile) before it stops."""


def claim(
    conn: Connection,
    node_id: str,
    ttl_s: float,
    limit: int,
    held: Collection[str] = (),
    *,
    affinity_s: float = AFFINITY_S,
    starvation_s: float = STARVATION_S,
) -> list[Claimed]:
    """Claim up to ``limit`` wakes for ``node_id`` with a lease of ``ttl_s`` seconds:
    the first claimable wakes by ``seq`` whose lane runs nothing (FIFO among contexts,
    order within one), or running wakes whose lease expired (reclaim). Each claim
    bumps the epoch, frees the wake's slot and marks its lane running. One statement
    (``_CLAIM``) for all of them, again only if a pick lost a race. Another node's
    fresh wake is left to it for ``affinity_s``, and taken after this node's own
    until it has waited ``starvation_s`` (design rule "A wake waits for its node").

    ``held``: lanes (:func:`lane_of`) whose turns still run on this node, perhaps
    unwinding after a lost lease (none of their wakes is claimed here until they
    end). The guarded claim: see the module docstring.
    """
    claimed: list[Claimed] = []
    held = list(held)
    races = 0
    while len(claimed) < limit and races <= MAX_CLAIM_RACES:
        rows = conn.execute(
            _CLAIM,
            {
                "node": node_id,
                "ttl": ttl_s,
                "held": held,
                "limit": limit - len(claimed),
                "affinity": affinity_s,
                "starve": starvation_s,
            },
        ).fetchall()
        lost = 0
        for activation, task_id, context_id, state, source, epoch, freed, lane in rows:
            if epoch is None:
                lost += 1  # another node moved it after this pick read it
                continue
            new_epoch = int(epoch)
            fence = Fence(activation, new_epoch, node_id)
            # Epoch 1: the wake's first claim ever, so never delivered on any node.
            accepted = source if new_epoch == 1 else None
            claimed.append(
                Claimed(fence, task_id, context_id, state == "running", accepted, bool(freed))
            )
            held.append(lane)
        if not lost:
            break
        races += lost
    return claimed


def move(
    conn: Connection, node_id: str, ttl_s: float, activation_id: str, state: str, epoch: int
) -> int | None:
    """The guard of a claim: start ``activation_id``'s lease for ``node_id`` if its row
    is still in the ``state`` and ``epoch`` the pick read (a running one only with its
    lease expired); its new epoch, or ``None`` (it moved meanwhile: nothing written)."""
    moved = conn.execute(
        _MOVE,
        {"node": node_id, "ttl": ttl_s, "a": activation_id, "state": state, "epoch": epoch},
    ).fetchone()
    return None if moved is None else int(moved[0])


_RENEW = """
WITH current AS (
    SELECT w.activation_id FROM wakes w
    JOIN unnest(%(a)s::text[], %(e)s::bigint[]) AS f(a, e)
      ON w.activation_id = f.a AND w.epoch = f.e
    WHERE w.node_id = %(node)s AND w.state = 'running' AND w.lease_until >= now()
), free AS (
    SELECT w.activation_id FROM wakes w JOIN current c USING (activation_id)
    FOR NO KEY UPDATE OF w SKIP LOCKED
), renewed AS (
    UPDATE wakes w SET lease_until = now() + make_interval(secs => %(ttl)s)
    FROM free WHERE w.activation_id = free.activation_id
    RETURNING w.activation_id
)
SELECT activation_id, true FROM renewed
UNION ALL
SELECT activation_id, false FROM current
WHERE activation_id NOT IN (SELECT activation_id FROM renewed)
"""
"""Every current lease among the fences, renewed unless a write committing now holds
its row (``SKIP LOCKED``: such a lease comes back ``false``, busy)."""


def renew(conn: Connection, fences: Sequence[Fence], ttl_s: float) -> Renewal:
    """Extend every lease of ``fences`` still current to ``now() + ttl_s``, in one
    statement, but none whose row a write committing now holds: a fenced write holds
    its lease row ``FOR SHARE`` (and a turn's end, for update) until its batch
    commits, and a renewal waiting for it while that batch waits for another row the
    renewal holds would deadlock. Those come back ``busy`` (still current); a lease
    in neither set is lost."""
    if not fences:
        return Renewal(frozenset())
    rows = conn.execute(
        _RENEW,
        {
            "ttl": ttl_s,
            "a": [f.activation_id for f in fences],
            "e": [f.epoch for f in fences],
            "node": fences[0].node_id,
        },
    ).fetchall()
    return Renewal(frozenset(r[0] for r in rows if r[1]), frozenset(r[0] for r in rows if not r[1]))


_CURRENT = (
    " WHERE activation_id = %(a)s AND epoch = %(e)s AND node_id = %(node)s"
    " AND state = 'running' AND lease_until >= now()"
)


def _release(conn: Connection, fence: Fence, assignments: str, params: dict[str, object]) -> bool:
    """Move ``fence``'s running wake out of ``running`` (``assignments``) and free its
    lane, if the lease is still current; ``False`` (nothing written) if not.

    One round trip: the lane row locked first (the wake's update reads it, so the
    lane lock precedes the wake row's, as in a claim), then the wake moved, and only
    if it moved, its lane freed."""
    keys = {"a": fence.activation_id, "e": fence.epoch, "node": fence.node_id, **params}
    row = conn.execute(
        "WITH lane AS (SELECT l.lane FROM wakes w JOIN wake_lanes l ON l.lane = w.lane"
        " WHERE w.activation_id = %(a)s FOR UPDATE OF l),"
        f" moved AS (UPDATE wakes SET {assignments}, lease_until = NULL"
        f" FROM lane{_CURRENT} AND wakes.lane = lane.lane RETURNING wakes.lane),"
        " freed AS (UPDATE wake_lanes l SET running_activation = NULL"
        " FROM moved WHERE l.lane = moved.lane AND l.running_activation = %(a)s)"
        " SELECT count(*) FROM moved",
        keys,
    ).fetchone()
    return row is not None and row[0] == 1


def complete(conn: Connection, fence: Fence) -> bool:
    """The wake of ``fence`` is over (``done``); ``False``: its lease was not current
    (another node holds it now, or it expired), and nothing was written."""
    return _release(conn, fence, "state = 'done'", {})


def pause(conn: Connection, fence: Fence, delay_s: float) -> bool:
    """Park ``fence``'s wake until ``now() + delay_s`` (a recovery pause, surviving any
    node's death), behind the wakes queued so far (a fresh ``seq``), for any node to
    resume; ``False``: its lease was not current, and nothing was written."""
    return _release(
        conn,
        fence,
        "state = 'paused', node_id = NULL, accepted_by = NULL, seq = nextval('wake_seq'),"
        " not_before = now() + make_interval(secs => %(delay)s)",
        {"delay": delay_s},
    )


def check_fences(conn: Connection, fences: Sequence[Fence]) -> None:
    """Refuse a write made under a lease that is not current (see the module docstring).

    One statement for all of ``fences`` (those of a whole batch).

    Raises:
        Fenced: one of ``fences`` is stale (the first, in order, is named); the
            caller's op must write nothing.
    """
    if not fences:
        return
    rows = conn.execute(CHECK_FENCES_SQL, fence_params(fences)).fetchall()
    refuse_stale(fences, {Fence(r[0], int(r[1]), r[2]) for r in rows})


def fence_params(fences: Sequence[Fence]) -> dict[str, list[object]]:
    """The parameters of :data:`CHECK_FENCES_SQL` for ``fences``."""
    return {
        "a": [f.activation_id for f in fences],
        "e": [f.epoch for f in fences],
        "node": [f.node_id for f in fences],
    }


def refuse_stale(fences: Sequence[Fence], current: Collection[Fence]) -> None:
    """Raise ``Fenced`` for the first of ``fences`` not in ``current`` (the leases
    :data:`CHECK_FENCES_SQL` found current).

    Raises:
        Fenced: that fence is stale; the caller's op must write nothing.
    """
    for fence in fences:
        if fence not in current:
            raise Fenced(
                f"the turn lease of activation {fence.activation_id} (epoch {fence.epoch},"
                f" node {fence.node_id}) is no longer current; nothing was recorded"
            )


CHECK_FENCES_SQL = """
SELECT w.activation_id, w.epoch, w.node_id
FROM wakes w JOIN unnest(%(a)s::text[], %(e)s::bigint[], %(node)s::text[]) AS f(a, e, node)
  ON w.activation_id = f.a AND w.epoch = f.e AND w.node_id = f.node
WHERE w.state = 'running' AND w.lease_until >= now()
FOR SHARE OF w
"""
"""Every current lease among the fences given, each row locked ``FOR SHARE``: one
statement for all the fences of a batch (also the first part of ``apply``'s
statement, :mod:`taskplane.store.postgres.writes`)."""


def forget_pruned(conn: Connection) -> int:
    """Delete the wake rows of Tasks that are gone (retention), freeing any slot or
    lane they hold; how many rows. Lane rows themselves stay (a lane row deleted while
    an acceptance adds a wake to it would strand that wake)."""
    gone = [
        r[0]
        for r in conn.execute(
            "DELETE FROM wakes w WHERE NOT EXISTS"
            " (SELECT 1 FROM tasks t WHERE t.task_id = w.task_id) RETURNING w.activation_id"
        ).fetchall()
    ]
    forget(conn, gone, deleted=True)
    return len(gone)


def forget(conn: Connection, activations: Sequence[str], *, deleted: bool = False) -> None:
    """Delete the wake rows of ``activations`` (unless ``deleted`` already) and free
    the slots and lanes they held (their Tasks are gone)."""
    if not activations:
        return
    ids = list(activations)
    if not deleted:
        conn.execute("DELETE FROM wakes WHERE activation_id = ANY(%s::text[])", (ids,))
    conn.execute(
        "UPDATE wake_slots SET activation_id = NULL WHERE activation_id = ANY(%s::text[])", (ids,)
    )
    conn.execute(
        "UPDATE wake_lanes SET running_activation = NULL"
        " WHERE running_activation = ANY(%s::text[])",
        (ids,),
    )


def waiting(conn: Connection) -> int:
    """Slots of the bound taken now (wakes admitted and not yet claimed)."""
    row = conn.execute("SELECT count(activation_id) FROM wake_slots").fetchone()
    return int(row[0]) if row else 0
