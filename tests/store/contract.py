"""The task store contract suite: what every :class:`TaskStore` backend must do.

:class:`TaskStoreContract` is not collected by itself. A backend's test module
subclasses it once per variant and implements :meth:`TaskStoreContract.open_store`
(see ``test_contract_sqlite.py``); the tests then run unchanged against it. They use
only the contract (``taskplane.store.contract`` and ``taskplane.store.records``) and
the model, never a backend's internals, so a new backend runs them as they are.

Covered per operation: result shapes, refusals (and that a refusal records nothing),
idempotency, atomicity (a failing operation in a batch changes nothing while the
others commit), group commit (concurrent operations share one transaction), the
after-commit hook, and cancellation of a caller after hand-over.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import attrs
import pytest
import trio
import trio.testing

from taskplane.errors import (
    ActorGone,
    DuplicateMessageId,
    InvalidRequest,
    StoreUnavailable,
    TaskNotFound,
    UnsupportedOperation,
    VersionConflict,
)
from taskplane.model.enums import Role, TaskState
from taskplane.model.lifecycle import timestamp
from taskplane.model.types import Message, Part, Task, TaskStatus
from taskplane.scope import Scope
from taskplane.store.contract import TaskStore
from taskplane.store.records import (
    RETENTION_MS,
    Accepted,
    Activation,
    Delivery,
    EvidenceRecord,
    JournalRecord,
    Locator,
    StoredTask,
    TaskChange,
    TaskQuery,
)

ALICE = Scope("", "alpha")
BOB = Scope("", "beta")
LOCATOR = Locator("http://127.0.0.1:8788")
NOW = 1_800_000_000_000  # ms since the epoch
SUBMITTED = TaskState.TASK_STATE_SUBMITTED
WORKING = TaskState.TASK_STATE_WORKING
COMPLETED = TaskState.TASK_STATE_COMPLETED
INPUT_REQUIRED = TaskState.TASK_STATE_INPUT_REQUIRED


def activation(
    dedupe_key: str,
    text: str = "hello",
    *,
    scope: Scope = ALICE,
    source: str = "a2a",
    task_id: str | None = None,
    context_id: str | None = None,
    conversation_key: str | None = None,
    reply_to: str | None = None,
    minted_task_id: str | None = None,
) -> Activation:
    """An intake item with fresh minted IDs and a digest over ``text``."""
    message = Message(message_id=dedupe_key, role=Role.ROLE_USER, parts=(Part.from_text(text),))
    return Activation(
        scope=scope,
        source=source,
        dedupe_key=dedupe_key,
        digest="sha256:" + hashlib.sha256(text.encode()).hexdigest(),
        message=message,
        explicit_task_id=task_id,
        requested_context_id=context_id,
        conversation_key=conversation_key,
        minted_task_id=minted_task_id or str(uuid.uuid4()),
        minted_context_id=str(uuid.uuid4()),
        received_at_ms=NOW,
        reply_to=reply_to,
    )


def asking(task: Task, now_ms: int, question: str = "which colour?") -> Task:
    """``task`` in INPUT_REQUIRED with an agent question as its newest history entry."""
    ask = Message(
        message_id=str(uuid.uuid4()),
        role=Role.ROLE_AGENT,
        parts=(Part.from_text(question),),
        task_id=task.id,
        context_id=task.context_id,
    )
    status = TaskStatus(state=INPUT_REQUIRED, message=ask, timestamp=timestamp(now_ms))
    return attrs.evolve(task, status=status, history=(*task.history, ask))


def moved(task: Task, state: TaskState, now_ms: int) -> Task:
    return attrs.evolve(task, status=TaskStatus(state=state, timestamp=timestamp(now_ms)))


def stored_of(accepted: Accepted) -> StoredTask:
    assert accepted.stored is not None, accepted
    return accepted.stored


class TaskStoreContract:
    """The contract tests. Subclasses implement :meth:`open_store`."""

    def open_store(self, tmp_path: Path) -> AbstractAsyncContextManager[TaskStore]:
        """A running, empty store of the backend under test (closed on exit)."""
        raise NotImplementedError

    @pytest.fixture
    async def store(self, tmp_path: Path) -> AsyncIterator[TaskStore]:
        async with self.open_store(tmp_path) as store:
            yield store

    async def snapshot(self, store: TaskStore) -> tuple[object, ...]:
        """Everything a caller can read back, to show an operation changed nothing."""
        tasks = []
        for scope in (ALICE, BOB):
            tasks.append(await store.list_tasks(TaskQuery(scope, page_size=100)))
        return (tuple(tasks), await store.journal(), await store.evidence())

    # --- accept: a new Task --------------------------------------------------------

    async def test_accept_creates_a_submitted_task_with_claim_evidence_and_accepted(
        self, store: TaskStore
    ) -> None:
        act = activation("m-1")
        accepted = await store.accept(act, LOCATOR, NOW)
        stored = stored_of(accepted)
        assert accepted.disposition == "created"
        assert accepted.activation_id == act.activation_id and accepted.reply is None
        assert (stored.scope, stored.source, stored.version) == (ALICE, "a2a", 1)
        task = stored.task
        assert accepted.task == task
        assert (task.id, task.context_id) == (act.minted_task_id, act.minted_context_id)
        assert task.status == TaskStatus(state=SUBMITTED, timestamp=timestamp(NOW))
        (first,) = task.history
        assert (first.message_id, first.task_id, first.context_id) == (
            "m-1",
            task.id,
            task.context_id,
        )
        assert await store.find_task(task.id) == stored
        assert await store.load_task(ALICE, task.id) == stored
        journal = await store.journal(activation_id=act.activation_id)
        assert [e.kind for e in journal] == ["CLAIM", "ACCEPTED"]
        assert all(e.task_id == task.id and e.recorded_at_ms == NOW for e in journal)
        assert journal[0].fields["digest"] == act.digest
        assert journal[0].fields["intendedRoute"] == "created"
        (evidence,) = await store.evidence(task_id=task.id)
        assert evidence.record_type == "task.activation"
        assert evidence.activation_id == act.activation_id
        assert evidence.fields["contentDigest"] == act.digest
        assert evidence.fields["locator"] == LOCATOR.for_task("", task.id)

    async def test_accept_again_returns_the_prior_outcome_and_records_nothing(
        self, store: TaskStore
    ) -> None:
        first = await store.accept(activation("m-1"), LOCATOR, NOW)
        before = await self.snapshot(store)
        again = await store.accept(activation("m-1"), LOCATOR, NOW + 5)
        assert again.disposition == "duplicate"
        assert again.activation_id == first.activation_id
        assert again.task == first.task and again.pending_wake
        assert await self.snapshot(store) == before
        task_id = stored_of(first).task.id
        woken = JournalRecord("WOKEN", first.activation_id, task_id, {"wokenAt": NOW})
        await store.append([woken], NOW)
        assert not (await store.accept(activation("m-1"), LOCATOR, NOW)).pending_wake

    async def test_accept_refuses_a_reused_identity_with_another_payload(
        self, store: TaskStore
    ) -> None:
        await store.accept(activation("m-1", "hello"), LOCATOR, NOW)
        before = await self.snapshot(store)
        with pytest.raises(DuplicateMessageId):
            await store.accept(activation("m-1", "something else"), LOCATOR, NOW)
        with pytest.raises(DuplicateMessageId):
            await store.find_duplicate(activation("m-1", "something else"))
        assert await self.snapshot(store) == before

    async def test_the_dedupe_identity_is_per_principal_and_source(self, store: TaskStore) -> None:
        mine = await store.accept(activation("m-1"), LOCATOR, NOW)
        theirs = await store.accept(activation("m-1", scope=BOB), LOCATOR, NOW)
        native = await store.accept(activation("m-1", source="spool"), LOCATOR, NOW)
        assert [a.disposition for a in (mine, theirs, native)] == ["created"] * 3
        assert len({a.activation_id for a in (mine, theirs, native)}) == 3

    async def test_find_duplicate_is_none_for_new_work_and_the_outcome_after(
        self, store: TaskStore
    ) -> None:
        act = activation("m-1")
        assert await store.find_duplicate(act) is None
        accepted = await store.accept(act, LOCATOR, NOW)
        prior = await store.find_duplicate(act)
        assert prior is not None and prior.disposition == "duplicate"
        assert prior.task == accepted.task

    # --- accept: contexts ----------------------------------------------------------

    async def test_an_owned_context_is_joined_and_an_unowned_one_is_mapped_once(
        self, store: TaskStore
    ) -> None:
        first = stored_of(await store.accept(activation("m-1"), LOCATOR, NOW)).task
        joined = stored_of(
            await store.accept(activation("m-2", context_id=first.context_id), LOCATOR, NOW)
        ).task
        assert joined.context_id == first.context_id
        foreign = [
            stored_of(
                await store.accept(
                    activation(f"b-{n}", scope=BOB, context_id=first.context_id), LOCATOR, NOW
                )
            ).task
            for n in range(2)
        ]
        assert foreign[0].context_id != first.context_id
        assert foreign[0].context_id == foreign[1].context_id

    async def test_a_conversation_key_shares_one_context(self, store: TaskStore) -> None:
        one, two = [
            stored_of(
                await store.accept(
                    activation(f"e-{n}", source="spool", conversation_key="thread-1"), LOCATOR, NOW
                )
            ).task
            for n in range(2)
        ]
        assert one.id != two.id and one.context_id == two.context_id

    # --- accept: explicit continuation ---------------------------------------------

    async def test_an_explicit_continuation_appends_to_a_waiting_task(
        self, store: TaskStore
    ) -> None:
        created = stored_of(await store.accept(activation("m-1"), LOCATOR, NOW))
        waiting = await store.apply(TaskChange(created, asking(created.task, NOW + 1), NOW + 1))
        act = activation("m-2", "blue", task_id=created.task.id)
        accepted = await store.accept(act, LOCATOR, NOW + 2)
        stored = stored_of(accepted)
        assert accepted.disposition == "continued"
        assert stored.version == waiting.version + 1
        assert stored.task.status.state is SUBMITTED
        assert [m.message_id for m in stored.task.history][-1] == "m-2"
        assert stored.task.history[-1].context_id == created.task.context_id
        claim = (await store.journal(activation_id=act.activation_id))[0]
        assert claim.fields["intendedRoute"] == "continued"

    async def test_a_refused_continuation_records_nothing(self, store: TaskStore) -> None:
        created = stored_of(await store.accept(activation("m-1"), LOCATOR, NOW))
        task_id = created.task.id
        before = await self.snapshot(store)
        with pytest.raises(InvalidRequest):  # SUBMITTED: not waiting for input
            await store.accept(activation("m-2", task_id=task_id), LOCATOR, NOW)
        assert await self.snapshot(store) == before
        waiting = await store.apply(TaskChange(created, asking(created.task, NOW), NOW))
        before = await self.snapshot(store)
        refusals: list[tuple[Activation, type[Exception]]] = [
            (activation("m-3", task_id="no-such-task"), TaskNotFound),
            (activation("m-4", task_id=task_id, scope=BOB), TaskNotFound),
            (activation("m-5", task_id=task_id, context_id="another-context"), InvalidRequest),
        ]
        for act, error in refusals:
            with pytest.raises(error):
                await store.accept(act, LOCATOR, NOW)
        assert await self.snapshot(store) == before
        await store.apply(TaskChange(waiting, moved(waiting.task, COMPLETED, NOW), NOW))
        before = await self.snapshot(store)
        with pytest.raises(UnsupportedOperation):
            await store.accept(activation("m-6", task_id=task_id), LOCATOR, NOW)
        assert await self.snapshot(store) == before

    # --- direct replies ------------------------------------------------------------

    async def test_accept_direct_stores_the_reply_in_its_context_once(
        self, store: TaskStore
    ) -> None:
        act = activation("m-1", "ping")
        reply = Message(message_id="r-1", role=Role.ROLE_AGENT, parts=(Part.from_text("pong"),))
        accepted = await store.accept_direct(act, reply, NOW)
        assert accepted.disposition == "created" and accepted.stored is None
        assert accepted.reply == attrs.evolve(reply, context_id=act.minted_context_id)
        again = await store.accept_direct(activation("m-1", "ping"), reply, NOW)
        assert again.disposition == "duplicate" and again.reply == accepted.reply
        prior = await store.find_duplicate(act)
        assert prior is not None and prior.reply == accepted.reply
        with pytest.raises(DuplicateMessageId):
            await store.accept_direct(activation("m-1", "other"), reply, NOW)
        assert (await store.list_tasks(TaskQuery(ALICE))).total_size == 0

    # --- reply anchors -------------------------------------------------------------

    async def test_a_verified_reply_anchor_continues_its_waiting_task(
        self, store: TaskStore
    ) -> None:
        first = activation("e-1", source="slack", conversation_key="thread")
        created = stored_of(await store.accept(first, LOCATOR, NOW))
        reply = activation("e-2", "blue", source="slack", reply_to="provider-7")
        assert await store.anchor_target(reply) is None  # no anchor yet
        await store.record_anchor(ALICE, "slack", "provider-7", created.task.id, NOW)
        assert await store.anchor_target(reply) is None  # the Task is not asking
        asked = await store.apply(TaskChange(created, asking(created.task, NOW), NOW))
        assert await store.anchor_target(reply) is None  # its response is not sent yet
        question = Delivery(asked.task.id, "slack", "reply:q-1", "sha256:aa", "lookup")
        for unsent in ("sending", "failed", "ambiguous"):
            await store.save_delivery(question, unsent, NOW)  # type: ignore[arg-type]
            assert await store.anchor_target(reply) is None, unsent
        await store.save_delivery(question, "delivered", NOW, response_id="provider-7")
        assert await store.anchor_target(reply) == created.task.id
        stranger = activation("e-2", "blue", scope=BOB, source="slack", reply_to="provider-7")
        assert await store.anchor_target(stranger) is None
        accepted = await store.accept(reply, LOCATOR, NOW + 1)
        assert accepted.disposition == "continued"
        assert stored_of(accepted).task.id == created.task.id
        assert await store.anchor_target(reply) is None  # answered: no longer waiting

    async def test_an_anchor_counts_only_for_the_response_that_was_delivered(
        self, store: TaskStore
    ) -> None:
        """Condition 2 of a verified reply anchor: Channels sent a provider response for
        that Task. A delivery of another response, of another Task, or from another
        source does not make the anchor count."""
        created = stored_of(await store.accept(activation("e-1", source="slack"), LOCATOR, NOW))
        asked = await store.apply(TaskChange(created, asking(created.task, NOW), NOW))
        other = stored_of(await store.accept(activation("e-9", source="slack"), LOCATOR, NOW))
        await store.record_anchor(ALICE, "slack", "provider-7", asked.task.id, NOW)
        reply = activation("e-2", "blue", source="slack", reply_to="provider-7")
        for task_id, source, response_id in (
            (asked.task.id, "slack", "provider-8"),
            (other.task.id, "slack", "provider-7"),
            (asked.task.id, "relay", "provider-7"),
        ):
            sent = Delivery(task_id, source, f"reply:{response_id}", "sha256:aa", "lookup")
            await store.save_delivery(sent, "delivered", NOW, response_id=response_id)
            assert await store.anchor_target(reply) is None, (task_id, source, response_id)
        sent = Delivery(asked.task.id, "slack", "reply:q", "sha256:bb", "lookup")
        await store.save_delivery(sent, "delivered", NOW, response_id="provider-7")
        assert await store.anchor_target(reply) == asked.task.id

    async def test_a_failed_anchor_creates_a_new_task_instead(self, store: TaskStore) -> None:
        created = stored_of(await store.accept(activation("e-1", source="slack"), LOCATOR, NOW))
        await store.record_anchor(ALICE, "slack", "provider-7", created.task.id, NOW)
        reply = activation("e-2", source="slack", reply_to="provider-7")
        accepted = await store.accept(reply, LOCATOR, NOW)
        assert accepted.disposition == "created"
        assert stored_of(accepted).task.id != created.task.id

    # --- health (design rule "Readiness tells the truth") -----------------------------

    async def test_the_write_probe_commits_and_no_failure_is_reported(
        self, store: TaskStore
    ) -> None:
        """A healthy store reports no commit failure; its write probe commits (again and
        again: it rewrites one record); ``commit_failed`` waits through successes."""
        assert store.statistics().commit_failure is None
        failures: list[str] = []

        async def watch() -> None:
            failures.append(await store.commit_failed())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch)
            await store.probe_commit(NOW)
            await store.probe_commit(NOW + 1)
            await store.accept(activation("m-probe"), LOCATOR, NOW)
            await trio.testing.wait_all_tasks_blocked()
            nursery.cancel_scope.cancel()
        assert failures == []
        assert store.statistics().commit_failure is None

    # --- Task reads ----------------------------------------------------------------

    async def test_task_reads_are_scoped(self, store: TaskStore) -> None:
        created = stored_of(await store.accept(activation("m-1"), LOCATOR, NOW))
        assert await store.find_task("no-such-task") is None
        with pytest.raises(TaskNotFound):
            await store.load_task(ALICE, "no-such-task")
        with pytest.raises(TaskNotFound):
            await store.load_task(BOB, created.task.id)
        assert (await store.list_tasks(TaskQuery(BOB))).tasks == ()

    async def test_list_tasks_pages_newest_status_first_with_filters(
        self, store: TaskStore
    ) -> None:
        tasks = []
        for n in range(5):
            created = stored_of(await store.accept(activation(f"m-{n}"), LOCATOR, NOW + n))
            tasks.append(created.task)
        one = stored_of(
            await store.accept(activation("x", context_id=tasks[0].context_id), LOCATOR, NOW + 9)
        )
        done = await store.apply(TaskChange(one, moved(one.task, COMPLETED, NOW + 10), NOW + 10))
        newest_first = [done.task.id, *(t.id for t in reversed(tasks))]
        seen: list[str] = []
        token: str | None = None
        while True:
            page = await store.list_tasks(TaskQuery(ALICE, page_size=2, page_token=token))
            assert page.total_size == 6 and len(page.tasks) <= 2
            seen += [t.id for t in page.tasks]
            token = page.next_page_token
            if not token:
                break
        assert seen == newest_first
        by_context = await store.list_tasks(TaskQuery(ALICE, context_id=tasks[0].context_id))
        assert [t.id for t in by_context.tasks] == [done.task.id, tasks[0].id]
        by_state = await store.list_tasks(TaskQuery(ALICE, state=COMPLETED))
        assert [t.id for t in by_state.tasks] == [done.task.id]
        recent = await store.list_tasks(TaskQuery(ALICE, status_after=timestamp(NOW + 3)))
        assert [t.id for t in recent.tasks] == newest_first[:3]
        assert recent.total_size == 3
        with pytest.raises(InvalidRequest):
            await store.list_tasks(TaskQuery(ALICE, page_token="not-a-token"))

    # --- apply ---------------------------------------------------------------------

    async def test_apply_stores_the_change_and_its_records_together(self, store: TaskStore) -> None:
        accepted = await store.accept(activation("m-1"), LOCATOR, NOW)
        before = stored_of(accepted)
        woken = JournalRecord("WOKEN", accepted.activation_id, before.task.id, {"wokenAt": 7})
        note = EvidenceRecord("activation.unhealthy", {"error": "x"}, task_id=before.task.id)
        after = await store.apply(
            TaskChange(before, moved(before.task, WORKING, NOW + 1), NOW + 1, (woken, note))
        )
        assert after.version == 2 and after.updated_at_ms == NOW + 1
        assert after.task.status.state is WORKING
        assert await store.find_task(before.task.id) == after
        kinds = [e.kind for e in await store.journal(task_id=before.task.id)]
        assert kinds == ["CLAIM", "ACCEPTED", "WOKEN"]
        (entry,) = await store.evidence(record_type="activation.unhealthy")
        assert entry.fields["error"] == "x" and entry.fields["recordedAt"] == NOW + 1

    async def test_counts_give_tasks_by_state_and_unhealthy_evidence_after_an_instant(
        self, store: TaskStore
    ) -> None:
        assert (await store.counts(0)).tasks_by_state == {}
        first = stored_of(await store.accept(activation("m-1"), LOCATOR, NOW))
        await store.accept(activation("m-2"), LOCATOR, NOW)
        note = EvidenceRecord("activation.unhealthy", {"error": "x"}, task_id=first.task.id)
        await store.apply(TaskChange(first, moved(first.task, WORKING, NOW + 5), NOW + 5, (note,)))
        counts = await store.counts(NOW)
        assert counts.tasks_by_state == {"TASK_STATE_SUBMITTED": 1, "TASK_STATE_WORKING": 1}
        assert counts.deliveries_by_state == {}
        assert counts.unhealthy_after_ms == 1
        assert (await store.counts(NOW + 5)).unhealthy_after_ms == 0

    async def test_apply_on_a_stale_version_changes_nothing(self, store: TaskStore) -> None:
        accepted = await store.accept(activation("m-1"), LOCATOR, NOW)
        stale = stored_of(accepted)
        await store.apply(TaskChange(stale, moved(stale.task, WORKING, NOW), NOW))
        before = await self.snapshot(store)
        woken = JournalRecord("WOKEN", accepted.activation_id, stale.task.id, {"wokenAt": 7})
        with pytest.raises(VersionConflict):
            await store.apply(TaskChange(stale, moved(stale.task, COMPLETED, NOW), NOW, (woken,)))
        assert await self.snapshot(store) == before

    # --- claim index ---------------------------------------------------------------

    async def test_scan_claims_folds_every_claimed_key(self, store: TaskStore) -> None:
        def fold(count: int, keys: Iterator[str]) -> tuple[int, set[str]]:
            return count, set(keys)

        assert await store.scan_claims(fold) == (0, set())
        sends = [activation("m-1"), activation("m-2"), activation("m-3", scope=BOB)]
        for act in sends:
            await store.accept(act, LOCATOR, NOW)
        await store.accept(activation("m-1"), LOCATOR, NOW)  # a duplicate claims nothing
        assert await store.scan_claims(fold) == (3, {a.provider_key for a in sends})

    # --- journal, wake state, replay -----------------------------------------------

    async def test_wake_state_reads_the_journal_and_the_task_together(
        self, store: TaskStore
    ) -> None:
        unknown = await store.wake_state("activation-none", "no-such-task")
        assert unknown.stored is None and unknown.activation.kinds == frozenset()
        assert unknown.activation.deliveries == 0
        first = await store.accept(activation("m-1"), LOCATOR, NOW)
        task = stored_of(first)
        state = await store.wake_state(first.activation_id, task.task.id)
        assert state.stored == task and state.activation.task_id == task.task.id
        assert state.activation.kinds == {"CLAIM", "ACCEPTED"}
        assert not state.activation.newer_claim_exists
        records = [
            JournalRecord("WOKEN", first.activation_id, task.task.id, {"wokenAt": NOW}),
            JournalRecord("WAKE_DELIVERED", first.activation_id, task.task.id, {"delivery": 1}),
            JournalRecord("WAKE_DELIVERED", first.activation_id, task.task.id, {"delivery": 2}),
        ]
        await store.append(records, NOW)
        waiting = await store.apply(TaskChange(task, asking(task.task, NOW), NOW))
        await store.accept(activation("m-2", task_id=task.task.id), LOCATOR, NOW)
        state = await store.wake_state(first.activation_id, task.task.id)
        assert state.activation.deliveries == 2
        assert state.activation.kinds == {"CLAIM", "ACCEPTED", "WOKEN", "WAKE_DELIVERED"}
        assert state.activation.newer_claim_exists
        assert state.stored is not None and state.stored.version == waiting.version + 1

    async def test_pending_activations_follow_durable_task_state(self, store: TaskStore) -> None:
        accepted = [await store.accept(activation(f"m-{n}"), LOCATOR, NOW + n) for n in range(5)]
        fresh, failed, finished, asked, continued = accepted
        ids = {a.activation_id: stored_of(a) for a in accepted}
        await store.append(
            [
                JournalRecord(
                    "WAKE_FAILED", failed.activation_id, ids[failed.activation_id].task.id, {}
                )
            ],
            NOW,
        )
        done = ids[finished.activation_id]
        await store.apply(TaskChange(done, moved(done.task, COMPLETED, NOW), NOW))
        for woken in (asked, continued):
            task = ids[woken.activation_id]
            record = JournalRecord("WOKEN", woken.activation_id, task.task.id, {})
            await store.apply(TaskChange(task, asking(task.task, NOW), NOW, (record,)))
        again = await store.accept(
            activation("m-9", task_id=ids[continued.activation_id].task.id), LOCATOR, NOW + 9
        )
        pending = await store.pending_activations()
        assert [(p.activation_id, p.task_id) for p in pending] == [
            (fresh.activation_id, ids[fresh.activation_id].task.id),
            (again.activation_id, ids[continued.activation_id].task.id),
        ]

    async def test_journal_and_evidence_filter_and_keep_order(self, store: TaskStore) -> None:
        one = await store.accept(activation("m-1"), LOCATOR, NOW)
        two = await store.accept(activation("m-2"), LOCATOR, NOW)
        task_one = stored_of(one).task.id
        await store.append(
            [
                JournalRecord("QUARANTINED", "activation-x", None, {"why": "test"}),
                EvidenceRecord("activation.unhealthy", {"n": 1}, "activation-x", task_one),
            ],
            NOW + 1,
        )
        everything = await store.journal()
        assert [e.kind for e in everything] == ["CLAIM", "ACCEPTED"] * 2 + ["QUARANTINED"]
        assert everything[-1].fields == {
            "kind": "QUARANTINED",
            "activationId": "activation-x",
            "why": "test",
        }
        assert [e.activation_id for e in await store.journal(task_id=task_one)] == [
            one.activation_id
        ] * 2
        assert len(await store.journal(activation_id=two.activation_id)) == 2
        assert [e.record_type for e in await store.evidence(task_id=task_one)] == [
            "task.activation",
            "activation.unhealthy",
        ]
        assert len(await store.evidence(record_type="task.activation")) == 2

    def test_journal_records_never_forge_claims(self) -> None:
        with pytest.raises(ValueError):
            JournalRecord("CLAIM", "activation-x", None, {})  # type: ignore[arg-type]

    # --- deliveries ----------------------------------------------------------------

    async def test_deliveries_move_through_their_states(self, store: TaskStore) -> None:
        delivery = Delivery("task-1", "slack", "reply:m-1", "sha256:aa", "lookup")
        assert await store.load_delivery(delivery.delivery_id) is None
        await store.save_delivery(delivery, "sending", NOW)
        record = await store.load_delivery(delivery.delivery_id)
        assert record is not None
        assert (record.state, record.payload_digest, record.provider_response_id) == (
            "sending",
            "sha256:aa",
            None,
        )
        await store.save_delivery(delivery, "delivered", NOW, response_id="p-1")
        record = await store.load_delivery(delivery.delivery_id)
        assert record is not None and (record.state, record.provider_response_id) == (
            "delivered",
            "p-1",
        )
        note = EvidenceRecord("activation.unhealthy", {"deliveryId": delivery.delivery_id})
        await store.save_delivery(delivery, "ambiguous", NOW, error="lost", records=(note,))
        record = await store.load_delivery(delivery.delivery_id)
        assert record is not None and (record.state, record.error) == ("ambiguous", "lost")
        assert [e.fields["deliveryId"] for e in await store.evidence()] == [delivery.delivery_id]

    # --- compaction ----------------------------------------------------------------

    async def test_compaction_keeps_live_work_and_frees_pruned_identities(
        self, store: TaskStore
    ) -> None:
        live = stored_of(await store.accept(activation("m-live"), LOCATOR, NOW))
        old = stored_of(await store.accept(activation("m-old"), LOCATOR, NOW))
        await store.apply(TaskChange(old, moved(old.task, COMPLETED, NOW), NOW))
        sending = Delivery(old.task.id, "slack", "reply:1", "sha256:aa", "lookup")
        delivered = Delivery(old.task.id, "slack", "reply:2", "sha256:bb", "lookup")
        await store.save_delivery(sending, "sending", NOW)
        await store.save_delivery(delivered, "delivered", NOW, response_id="p")
        nothing = await store.compact(NOW + RETENTION_MS - 1)
        assert attrs.astuple(nothing) == (0,) * 7
        report = await store.compact(NOW + RETENTION_MS + 1)
        assert (report.tasks, report.journal, report.deliveries) == (1, 2, 1)
        assert await store.find_task(old.task.id) is None
        assert await store.find_task(live.task.id) == live
        assert await store.load_delivery(sending.delivery_id) is not None
        assert await store.load_delivery(delivered.delivery_id) is None
        again = await store.accept(activation("m-old"), LOCATOR, NOW + RETENTION_MS + 2)
        assert again.disposition == "created" and stored_of(again).task.id != old.task.id
        live_again = await store.accept(activation("m-live"), LOCATOR, NOW)
        assert live_again.disposition == "duplicate"

    # --- transactions: group commit, atomicity, hooks, cancellation ----------------

    async def test_concurrent_operations_share_one_transaction(self, store: TaskStore) -> None:
        before = store.statistics()
        results: list[Accepted] = []

        async def one(n: int) -> None:
            results.append(await store.accept(activation(f"m-{n}"), LOCATOR, NOW))

        async with trio.open_nursery() as nursery:
            for n in range(20):
                nursery.start_soon(one, n)
        after = store.statistics()
        assert [r.disposition for r in results] == ["created"] * 20
        assert after.transactions - before.transactions == 1
        assert after.operations - before.operations == 20
        assert after.largest_batch >= 20

    async def test_a_failing_operation_in_a_batch_changes_nothing_and_spares_the_others(
        self, store: TaskStore
    ) -> None:
        base = stored_of(await store.accept(activation("m-0", "first"), LOCATOR, NOW))
        await store.apply(TaskChange(base, moved(base.task, WORKING, NOW), NOW))
        before = await self.snapshot(store)
        transactions = store.statistics().transactions
        outcomes: dict[str, object] = {}

        async def run(name: str, call: object) -> None:
            try:
                outcomes[name] = await call  # type: ignore[misc]
            except Exception as exc:
                outcomes[name] = exc

        stale_record = JournalRecord("WOKEN", "activation-y", base.task.id, {})
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run, "good-1", store.accept(activation("m-1"), LOCATOR, NOW))
            nursery.start_soon(run, "dup", store.accept(activation("m-0", "other"), LOCATOR, NOW))
            nursery.start_soon(
                run,
                "stale",
                store.apply(
                    TaskChange(base, moved(base.task, COMPLETED, NOW), NOW, (stale_record,))
                ),
            )
            nursery.start_soon(run, "good-2", store.accept(activation("m-2"), LOCATOR, NOW))
        assert store.statistics().transactions == transactions + 1
        assert isinstance(outcomes["dup"], DuplicateMessageId)
        assert isinstance(outcomes["stale"], VersionConflict)
        good = [outcomes["good-1"], outcomes["good-2"]]
        assert all(isinstance(g, Accepted) and g.disposition == "created" for g in good)
        created = {g.activation_id for g in good if isinstance(g, Accepted)}
        _, journal, evidence = await self.snapshot(store)
        assert journal[: len(before[1])] == before[1]
        added = journal[len(before[1]) :]  # two CLAIM + ACCEPTED pairs, nothing else
        assert sorted(e.kind for e in added) == ["ACCEPTED", "ACCEPTED", "CLAIM", "CLAIM"]
        assert {e.activation_id for e in added} == created
        assert {e.activation_id for e in evidence[len(before[2]) :]} == created
        assert (await store.list_tasks(TaskQuery(ALICE))).total_size == 3
        assert (await store.find_task(base.task.id)) is not None
        assert (await store.load_task(ALICE, base.task.id)).task.status.state is WORKING

    async def test_an_operation_that_fails_after_writing_leaves_no_trace(
        self, store: TaskStore
    ) -> None:
        taken = stored_of(await store.accept(activation("m-1"), LOCATOR, NOW)).task.id
        before = await self.snapshot(store)
        clash = activation("e-1", source="spool", conversation_key="thread", minted_task_id=taken)
        with pytest.raises(StoreUnavailable):
            await store.accept(clash, LOCATOR, NOW)
        assert await self.snapshot(store) == before
        retry = activation("e-1", source="spool", conversation_key="thread")
        accepted = await store.accept(retry, LOCATOR, NOW)
        assert accepted.disposition == "created"
        # The failed attempt's context mapping was rolled back with it: the retry's
        # minted context is the conversation's first.
        assert stored_of(accepted).task.context_id == retry.minted_context_id

    async def test_after_commit_hooks_see_each_committed_acceptance(self, store: TaskStore) -> None:
        seen: list[Accepted] = []
        accepted = await store.accept(activation("m-1"), LOCATOR, NOW, after_commit=seen.append)
        assert seen == [accepted]
        duplicate = await store.accept(activation("m-1"), LOCATOR, NOW, after_commit=seen.append)
        assert seen == [accepted, duplicate]
        with pytest.raises(DuplicateMessageId):
            await store.accept(activation("m-1", "x"), LOCATOR, NOW, after_commit=seen.append)
        assert len(seen) == 2  # a refusal runs no hook

    async def test_a_failing_hook_does_not_lose_the_answer(
        self, store: TaskStore, caplog: pytest.LogCaptureFixture
    ) -> None:
        def broken(_: Accepted) -> None:
            raise RuntimeError("hook bug")

        accepted = await store.accept(activation("m-1"), LOCATOR, NOW, after_commit=broken)
        assert accepted.disposition == "created"
        assert "after-commit hook failed" in caplog.text

    async def test_a_cancelled_caller_still_commits_and_runs_its_hook(
        self, store: TaskStore
    ) -> None:
        hooked = trio.Event()
        act = activation("m-1")
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(
                    lambda: store.accept(act, LOCATOR, NOW, after_commit=lambda _: hooked.set())
                )
                await trio.testing.wait_all_tasks_blocked()
                scope.cancel()
        with trio.fail_after(10):
            await hooked.wait()
        prior = await store.find_duplicate(act)
        assert prior is not None and prior.disposition == "duplicate"

    async def test_a_closed_store_answers_actor_gone(self, tmp_path: Path) -> None:
        async with self.open_store(tmp_path) as store:
            await store.accept(activation("m-1"), LOCATOR, NOW)
        with pytest.raises(ActorGone):
            await store.find_task("any")
