"""Native intake through the trusted sink: conversations, contexts and dedupe.

Gates from the design document's "Verification gates" and CONTRACTS.md §i.
"""

from __future__ import annotations

import pytest
import trio

from taskplane.actors.outbound import DeliveryFailed, ProviderRejected
from taskplane.actors.plane import TaskPlane
from taskplane.app import PlaneOptions
from taskplane.model.types import Part
from taskplane.scope import Scope
from taskplane.store.records import Delivery

ALICE = Scope("", "alpha")
SOURCE = "spool"


def text(value: str) -> list[Part]:
    return [Part.from_text(value)]


async def test_a_redelivered_duplicate_provider_event_returns_the_prior_task(
    plane: TaskPlane,
) -> None:
    first = await plane.ingest(ALICE, SOURCE, "event-1", "thread-1", text("hello"))
    again = await plane.ingest(ALICE, SOURCE, "event-1", "thread-1", text("hello"))
    assert first.disposition == "created"
    assert again.disposition == "duplicate"
    assert first.task is not None and again.task is not None
    assert again.task.id == first.task.id
    page = await plane.list_tasks(
        ALICE, context_id=None, state=None, status_after=None, page_size=100, page_token=None
    )
    assert page.total_size == 1


async def test_two_messages_in_one_provider_thread_create_two_tasks_in_one_context(
    plane: TaskPlane,
) -> None:
    one = await plane.ingest(ALICE, SOURCE, "event-1", "thread-1", text("first"))
    two = await plane.ingest(ALICE, SOURCE, "event-2", "thread-1", text("second"))
    assert one.task is not None and two.task is not None
    assert one.task.id != two.task.id
    assert one.task.context_id == two.task.context_id


async def test_a_later_thread_message_creates_a_new_task(plane: TaskPlane) -> None:
    first = await plane.ingest(ALICE, SOURCE, "event-1", "thread-1", text("hello"))
    assert first.task is not None
    done = await plane.wait_settled(ALICE, first.task.id, 5)
    later = await plane.ingest(ALICE, SOURCE, "event-2", "thread-1", text("later"))
    assert later.disposition == "created" and later.task is not None
    assert later.task.id != done.id
    assert later.task.context_id == done.context_id


async def test_concurrent_first_messages_resolve_one_context_id_through_the_atomic_upsert(
    plane: TaskPlane,
) -> None:
    contexts: list[str | None] = []

    async def first_message(n: int) -> None:
        accepted = await plane.ingest(ALICE, SOURCE, f"event-{n}", "new-thread", text(str(n)))
        assert accepted.task is not None
        contexts.append(accepted.task.context_id)

    async with trio.open_nursery() as nursery:
        for n in range(20):
            nursery.start_soon(first_message, n)
    assert len(contexts) == 20
    assert len(set(contexts)) == 1


async def test_the_trusted_interface_creates_a_new_task_in_an_existing_context(
    plane: TaskPlane,
) -> None:
    first = await plane.ingest(ALICE, SOURCE, "event-1", "thread-1", text("hello"))
    assert first.task is not None
    context = first.task.context_id
    created = await plane.ingest(ALICE, "scheduler", "job-1", None, text("run"), context_id=context)
    assert created.task is not None
    assert created.task.context_id == context
    assert created.task.id != first.task.id


async def test_a_task_id_embedded_in_a_provider_message_body_neither_selects_nor_continues_a_task(
    plane: TaskPlane,
) -> None:
    waiting = await plane.ingest(ALICE, SOURCE, "event-1", "thread-1", text("hello"))
    assert waiting.task is not None
    task_id = waiting.task.id
    asked = await plane.wait_settled(ALICE, task_id, 5)
    body = f'{{"taskId": "{task_id}"}} taskId={task_id}'
    reply = await plane.ingest(ALICE, SOURCE, "event-2", "thread-1", text(body))
    assert reply.task is not None and reply.task.id != task_id
    unchanged = await plane.get_task(ALICE, task_id)
    assert unchanged.history == asked.history
    assert unchanged.status.state.name == asked.status.state.name


async def test_another_principals_event_in_the_same_conversation_gets_its_own_context(
    plane: TaskPlane,
) -> None:
    mine = await plane.ingest(ALICE, SOURCE, "event-1", "thread-1", text("a"))
    theirs = await plane.ingest(Scope("", "beta"), SOURCE, "event-1", "thread-1", text("a"))
    assert mine.task is not None and theirs.task is not None
    assert theirs.disposition == "created"
    assert mine.task.context_id != theirs.task.context_id


ANCHORED = "mail"


@pytest.fixture
def plane_options() -> PlaneOptions:
    return PlaneOptions(anchor_sources=frozenset({ANCHORED}))


async def _waiting_task(plane: TaskPlane, scope: Scope, text_: str) -> str:
    asked = await plane.ingest(scope, ANCHORED, "event-1", "thread-1", text(text_))
    assert asked.task is not None
    task = await plane.wait_settled(scope, asked.task.id, 5)
    assert task.status.state.is_interrupted
    await plane.record_reply_anchor(scope, ANCHORED, "sent-1", task.id)
    await _send_question(plane, task.id, "sent-1")
    return task.id


async def _send_question(plane: TaskPlane, task_id: str, response_id: str) -> None:
    """Deliver the Task's question as a source does: its anchor counts from now on."""

    async def send() -> str:
        return response_id

    question = Delivery(task_id, ANCHORED, f"reply:{response_id}", "sha256:q", "idempotent")
    assert await plane.outbound.deliver(question, send) == response_id


@pytest.mark.parametrize("command", ["ask: which colour?", "auth: sign in please"])
async def test_a_verified_direct_reply_continues_one_waiting_task_including_from_auth_required(
    plane: TaskPlane, command: str
) -> None:
    task_id = await _waiting_task(plane, ALICE, command)
    reply = await plane.ingest(
        ALICE, ANCHORED, "event-2", "thread-1", text("blue"), reply_to="sent-1"
    )
    assert reply.disposition == "continued"
    assert reply.task is not None and reply.task.id == task_id
    done = await plane.wait_settled(ALICE, task_id, 5)
    assert done.status.state.name == "TASK_STATE_COMPLETED"
    second = await plane.ingest(
        ALICE, ANCHORED, "event-3", "thread-1", text("again"), reply_to="sent-1"
    )
    assert second.disposition == "created"  # answered: the anchor no longer continues it


async def test_an_anchor_whose_response_was_not_delivered_continues_nothing(
    plane: TaskPlane,
) -> None:
    """Condition 2: Channels sent a provider response for that Task. An anchor recorded
    before the send counts only once the delivery reached ``delivered``."""
    asked = await plane.ingest(ALICE, ANCHORED, "event-1", "thread-1", text("ask: colour?"))
    assert asked.task is not None
    task_id = (await plane.wait_settled(ALICE, asked.task.id, 5)).id
    await plane.record_reply_anchor(ALICE, ANCHORED, "sent-1", task_id)

    async def refused() -> str:
        raise ProviderRejected("the provider refused the question")

    question = Delivery(task_id, ANCHORED, "reply:sent-1", "sha256:q", "idempotent")
    with pytest.raises(DeliveryFailed):
        await plane.outbound.deliver(question, refused)
    early = await plane.ingest(
        ALICE, ANCHORED, "event-2", "thread-1", text("blue"), reply_to="sent-1"
    )
    assert early.disposition == "created"
    assert early.task is not None and early.task.id != task_id
    await _send_question(plane, task_id, "sent-1")
    late = await plane.ingest(
        ALICE, ANCHORED, "event-3", "thread-1", text("blue"), reply_to="sent-1"
    )
    assert late.disposition == "continued"
    assert late.task is not None and late.task.id == task_id


async def test_a_reply_anchor_from_a_principal_that_cannot_access_the_task_creates_a_new_task(
    plane: TaskPlane,
) -> None:
    task_id = await _waiting_task(plane, ALICE, "ask: which colour?")
    before = await plane.get_task(ALICE, task_id)
    other = await plane.ingest(
        Scope("", "beta"), ANCHORED, "event-2", "thread-1", text("blue"), reply_to="sent-1"
    )
    assert other.disposition == "created"
    assert other.task is not None and other.task.id != task_id
    assert (await plane.get_task(ALICE, task_id)).history == before.history


async def test_a_reply_to_a_thread_root_or_unknown_message_creates_a_new_task(
    plane: TaskPlane,
) -> None:
    task_id = await _waiting_task(plane, ALICE, "ask: which colour?")
    other = await plane.ingest(
        ALICE, ANCHORED, "event-2", "thread-1", text("blue"), reply_to="thread-root"
    )
    assert other.disposition == "created"
    assert other.task is not None and other.task.id != task_id
