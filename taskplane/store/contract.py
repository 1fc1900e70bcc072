"""The task store contract: the named operations every store backend provides.

The rest of the plane talks to durable state only through :class:`TaskStore`, over
the plain records of :mod:`taskplane.store.records`; no caller sees a connection, a
driver or its errors. The SQLite backend (:mod:`taskplane.store.sqlite`) is one
implementation; ``tests/store/contract.py`` is the suite every backend must pass.

Rules every operation keeps (design rule "Durable first, then visible", "All or
nothing per acceptance"):

- **Atomic.** Each operation is all or nothing: if it raises, it recorded nothing.
- **Answered after commit.** An operation returns only once what it wrote is durable.
- **Group commit.** Operations waiting when a transaction starts may share it (one
  fsync for all); each still succeeds or fails alone.
- **Errors.** A refusal is the :class:`~taskplane.errors.TaskplaneError` named in the
  operation's docstring. Any operation may also raise
  :class:`~taskplane.errors.StoreUnavailable` (the transaction could not commit;
  nothing was recorded; retrying is safe) or :class:`~taskplane.errors.ActorGone`
  (the store stopped before answering; the outcome is unknown).
- **Cancellation.** Cancelling a caller after its operation was handed over does not
  stop it: it commits (or not) as a whole; only the answer is lost.
- **Scope.** Every caller-facing read is scoped: another (tenant, principal)'s Task
  is indistinguishable from a missing one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Protocol, TypeVar

from taskplane.model.types import Message
from taskplane.scope import Scope
from taskplane.store.records import (
    Accepted,
    Activation,
    CompactionReport,
    Delivery,
    DeliveryRecord,
    DeliveryState,
    EvidenceEntry,
    Fence,
    JournalEntry,
    Locator,
    PendingActivation,
    Record,
    StoreCounts,
    StoredTask,
    StoreStatistics,
    TaskChange,
    TaskPage,
    TaskQuery,
    TurnClaim,
    WakeState,
)

AfterCommit = Callable[[Accepted], None]
"""Runs on the trio thread right after the commit that made an acceptance durable,
whether or not its caller still waits. Must not block; an exception is logged."""


T = TypeVar("T")


class TaskStore(Protocol):
    """Durable Tasks, the activation journal, evidence, anchors and deliveries."""

    # --- intake --------------------------------------------------------------------

    async def accept(
        self,
        act: Activation,
        locator: Locator,
        now_ms: int,
        *,
        after_commit: AfterCommit | None = None,
        turn: TurnClaim | None = None,
    ) -> Accepted:
        """Claim, project and queue ``act`` in one transaction; or its prior outcome.

        New work is, in order of precedence: a continuation through a verified reply
        anchor (``act.reply_to``), an explicit ``taskId`` continuation, or a new Task
        (``act.minted_task_id``) in the requested, conversation or minted context. It
        writes the CLAIM, the Task (created or continued by the caller's message),
        the context mapping, the origin with ``locator``, ``task.activation`` evidence
        and ACCEPTED. A claim whose identity was already used with the same digest
        returns ``disposition="duplicate"`` and writes nothing; ``pending_wake`` says
        it was never woken.

        Args:
            after_commit: called with the result after the commit (not after a
                refusal), also for a duplicate.
            turn: claim the new wake for this turn at once where the store can
                (:class:`~taskplane.store.records.TurnClaim`; ``Accepted.fence`` says
                whether it did).
        Raises:
            DuplicateMessageId: the identity was used with a different payload.
            TaskNotFound: ``explicit_task_id`` is unknown or not this principal's.
            InvalidRequest: an explicit continuation with another ``contextId``, or
                of a Task that is not waiting for input.
            UnsupportedOperation: a continuation of a terminal Task.
            StoreUnavailable: also when ``minted_task_id`` is already taken.
        """
        ...

    async def accept_direct(self, act: Activation, reply: Message, now_ms: int) -> Accepted:
        """Record ``reply`` (a direct Message answer, no Task) as ``act``'s outcome.

        The reply is stored and returned with the context it joins (the requested
        context if owned, else the conversation's or a fresh one) as its
        ``context_id``. A duplicate returns the prior outcome and writes nothing.

        Raises:
            DuplicateMessageId: the identity was used with a different payload.
        """
        ...

    async def find_duplicate(self, act: Activation) -> Accepted | None:
        """``act``'s prior outcome, or ``None`` if it is new work (read only).

        Raises:
            DuplicateMessageId: the identity was used with a different payload.
        """
        ...

    async def scan_claims(self, fold: Callable[[int, Iterator[str]], T]) -> T:
        """``fold(count, keys)`` over every recorded claim's provider key (unordered),
        inside one store operation; its result. ``fold`` must not block on anything
        but the iteration (it may run in the store's thread) and must depend on its
        arguments only (a backend may run it again after rolling a batch back). Used
        to build intake's claim index at startup."""
        ...

    async def anchor_target(self, act: Activation) -> str | None:
        """The Task id ``act.reply_to`` continues through a verified reply anchor, else
        ``None`` (read only; anchor failure is never a refusal)."""
        ...

    async def record_anchor(
        self, scope: Scope, source: str, provider_response_id: str, task_id: str, now_ms: int
    ) -> None:
        """Remember that ``provider_response_id`` (a provider message a source sent for
        ``task_id``) may be replied to directly; recording it again replaces it."""
        ...

    # --- Tasks ---------------------------------------------------------------------

    async def find_task(self, task_id: str) -> StoredTask | None:
        """The Task ``task_id`` of any scope, or ``None`` (internal callers only)."""
        ...

    async def load_task(self, scope: Scope, task_id: str) -> StoredTask:
        """The Task ``task_id`` if ``scope`` owns it.

        Raises:
            TaskNotFound: unknown, or owned by another tenant or principal.
        """
        ...

    async def list_tasks(self, query: TaskQuery) -> TaskPage:
        """One page of ``query.scope``'s Tasks, newest ``status.timestamp`` first (ties:
        greater task id first), filtered by context, state and status time.

        Raises:
            InvalidRequest: ``page_token`` is not one this store issued.
        """
        ...

    async def apply(self, change: TaskChange) -> StoredTask:
        """Store ``change.after`` and append ``change.records``; return the new version.

        Raises:
            VersionConflict: the Task's version moved since ``change.before`` (another
                writer committed first: owner(T) on another node), or it is gone;
                nothing was recorded. Design rule "One writer per Task": the caller
                reloads the Task, decides again and retries (bounded).
            Fenced: ``change.fence`` is no longer current; nothing was recorded.
        """
        ...

    # --- journal and evidence ------------------------------------------------------

    async def append(
        self, records: Sequence[Record], now_ms: int, *, fence: Fence | None = None
    ) -> None:
        """Append journal and evidence ``records`` in one transaction.

        Args:
            fence: the turn lease the records are written under (design rule "Turn
                authority is a lease"); ``None``: no turn's.
        Raises:
            Fenced: ``fence`` is no longer current; nothing was recorded.
        """
        ...

    async def wake_state(self, activation_id: str, task_id: str) -> WakeState:
        """The journal state of ``activation_id`` and the Task ``task_id``, read in one
        transaction (an unknown activation has no kinds and no deliveries)."""
        ...

    async def pending_activations(self) -> tuple[PendingActivation, ...]:
        """Activations eligible for a wake at startup, oldest claim first.

        Design rules "Wake recovery follows durable Task state": only the newest
        accepted activation of each non-terminal Task, even one already WOKEN; not one
        that WAKE_FAILED or was QUARANTINED; not an INPUT_REQUIRED/AUTH_REQUIRED Task
        whose newest activation was already woken (it waits for a continuation).
        """
        ...

    async def journal(
        self, *, task_id: str | None = None, activation_id: str | None = None
    ) -> tuple[JournalEntry, ...]:
        """Journal records, oldest first, optionally of one Task or activation."""
        ...

    async def evidence(
        self, *, record_type: str | None = None, task_id: str | None = None
    ) -> tuple[EvidenceEntry, ...]:
        """Evidence records, oldest first, optionally of one type or Task."""
        ...

    # --- outbound deliveries -------------------------------------------------------

    async def load_delivery(self, delivery_id: str) -> DeliveryRecord | None:
        """The stored state of ``delivery_id``, or ``None``."""
        ...

    async def save_delivery(
        self,
        delivery: Delivery,
        state: DeliveryState,
        now_ms: int,
        *,
        response_id: str | None = None,
        error: str | None = None,
        records: Sequence[Record] = (),
    ) -> None:
        """Create ``delivery`` in ``state`` or move it there (``response_id`` and
        ``error`` replace the stored ones), appending ``records`` atomically."""
        ...

    # --- maintenance ---------------------------------------------------------------

    async def compact(self, now_ms: int) -> CompactionReport:
        """Delete what the retention rules no longer keep (window ``RETENTION_MS``
        before ``now_ms``), in one transaction; report the counts removed.

        Kept: non-terminal Tasks and terminal ones updated within the window, with
        their journal, origins, evidence and anchors; pending claims; direct replies,
        quarantines, contexts, evidence and anchors recorded within the window or
        used by a kept Task; deliveries still ``sending``, with a ``fixed`` payload
        policy, of a kept Task or updated within the window. A pruned claim frees its
        identity (the same ``messageId`` is then new work).
        """
        ...

    def statistics(self) -> StoreStatistics:
        """Counters of this store since it was opened, and why writes fail now if
        they do (never blocks)."""
        ...

    async def probe_commit(self, now_ms: int) -> None:
        """Write and commit the smallest record there is (it replaces the previous
        probe): the test of "a commit succeeds again" while
        ``statistics().commit_failure`` is set (design rule "Readiness tells the truth").

        Raises:
            StoreUnavailable: the write still cannot commit.
        """
        ...

    async def commit_failed(self) -> str:
        """Wait until the next write fails to commit and return why (a failure from
        before the call does not count). Never raises; cancel it to stop waiting."""
        ...

    async def counts(self, since_ms: int) -> StoreCounts:
        """Tasks and deliveries by state, and unhealthy evidence recorded after
        ``since_ms`` (ms since the epoch): the readings of ``/readyz`` and ``/metrics``."""
        ...
