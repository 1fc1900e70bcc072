"""Idempotency under concurrency: scope (principal, messageId), full prior result.

Design document, "Contract decisions": a duplicate returns the Task it created (or the
direct Message verbatim); a different payload under the same id is 409
DUPLICATE_MESSAGE_ID; concurrent identical sends mint one Task.
"""

from __future__ import annotations

from typing import Any

import httpx
import trio

from tests.acceptance._support import (
    COMPLETED,
    IMMEDIATE,
    INPUT_REQUIRED,
    assert_error,
    get_task,
    send,
    send_task,
    store_view,
)
from tests.support.plane import send_body

CONCURRENCY = 50


async def concurrently(
    client: httpx.AsyncClient, bodies: list[dict[str, Any]]
) -> list[httpx.Response]:
    """POST every body to ``/message:send`` at once; the responses in body order."""
    responses: list[httpx.Response | None] = [None] * len(bodies)

    async def one(index: int) -> None:
        responses[index] = await client.post("/message:send", json=bodies[index])

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            for index in range(len(bodies)):
                nursery.start_soon(one, index)
    assert all(r is not None for r in responses)
    return [r for r in responses if r is not None]


async def test_fifty_concurrent_identical_blocking_sends_produce_one_task_and_fifty_identical_answers(  # noqa: E501
    client: httpx.AsyncClient,
) -> None:
    responses = await concurrently(client, [send_body("same work", "idem-block-1")] * CONCURRENCY)
    assert [r.status_code for r in responses] == [200] * CONCURRENCY, [
        r.text for r in responses if r.status_code != 200
    ]
    answers = [r.json() for r in responses]
    assert all(answer == answers[0] for answer in answers)
    task = answers[0]["task"]
    assert task["status"]["state"] == COMPLETED
    assert len(task["history"]) == 1
    view = await store_view(client)
    assert view["totalSize"] == 1
    assert view["tasks"][0]["id"] == task["id"]


async def test_fifty_concurrent_return_immediately_sends_produce_one_task_id(
    client: httpx.AsyncClient,
) -> None:
    bodies = [send_body("quick", "idem-immediate-1", configuration=IMMEDIATE)] * CONCURRENCY
    responses = await concurrently(client, bodies)
    assert [r.status_code for r in responses] == [200] * CONCURRENCY
    ids = {r.json()["task"]["id"] for r in responses}
    assert len(ids) == 1
    # A blocking duplicate waits for the same Task to settle.
    settled = await send_task(client, "quick", "idem-immediate-1")
    assert {settled["id"]} == ids
    assert settled["status"]["state"] == COMPLETED
    assert len(settled["history"]) == 1
    assert (await store_view(client))["totalSize"] == 1


async def test_fifty_concurrent_identical_direct_messages_return_one_stored_reply(
    client: httpx.AsyncClient,
) -> None:
    responses = await concurrently(client, [send_body("ping", "idem-direct-1")] * CONCURRENCY)
    assert [r.status_code for r in responses] == [200] * CONCURRENCY
    assert len({r.content for r in responses}) == 1
    assert responses[0].json()["message"]["parts"] == [{"text": "pong"}]
    assert (await store_view(client))["totalSize"] == 0


async def test_concurrent_identical_first_messages_with_the_same_client_context_id_produce_one_task(
    client: httpx.AsyncClient,
) -> None:
    context_id = (await send_task(client, "opening", "idem-ctx-0"))["contextId"]
    responses = await concurrently(
        client, [send_body("follow-on work", "idem-ctx-1", contextId=context_id)] * CONCURRENCY
    )
    assert [r.status_code for r in responses] == [200] * CONCURRENCY
    tasks = [r.json()["task"] for r in responses]
    assert len({t["id"] for t in tasks}) == 1
    assert {t["contextId"] for t in tasks} == {context_id}
    listed = (await client.get("/tasks", params={"contextId": context_id})).json()
    assert listed["totalSize"] == 2


async def test_concurrent_distinct_messages_naming_an_owned_context_create_separate_tasks_in_that_context(  # noqa: E501
    client: httpx.AsyncClient,
) -> None:
    context_id = (await send_task(client, "opening", "idem-owned-0"))["contextId"]
    bodies = [
        send_body(f"message {n}", f"idem-owned-{n + 1}", contextId=context_id) for n in range(20)
    ]
    responses = await concurrently(client, bodies)
    assert [r.status_code for r in responses] == [200] * 20
    tasks = [r.json()["task"] for r in responses]
    assert len({t["id"] for t in tasks}) == 20
    assert {t["contextId"] for t in tasks} == {context_id}
    listed = (await client.get("/tasks", params={"contextId": context_id})).json()
    assert listed["totalSize"] == 21


async def test_concurrent_first_messages_naming_an_unknown_context_id_never_join_it(
    client: httpx.AsyncClient, beta: httpx.AsyncClient
) -> None:
    beta_context = (await send_task(beta, "beta's conversation", "idem-unknown-0"))["contextId"]
    for context_id in ("client-chosen-context", beta_context):
        bodies = [
            send_body(f"message {n}", f"idem-unknown-{context_id}-{n}", contextId=context_id)
            for n in range(10)
        ]
        responses = await concurrently(client, bodies)
        assert [r.status_code for r in responses] == [200] * 10
        contexts = {r.json()["task"]["contextId"] for r in responses}
        assert context_id not in contexts
        assert (await client.get("/tasks", params={"contextId": context_id})).json()[
            "totalSize"
        ] == 0
    assert (await beta.get("/tasks", params={"contextId": beta_context})).json()["totalSize"] == 1


async def test_duplicates_of_a_continuation_return_the_prior_task(
    client: httpx.AsyncClient,
) -> None:
    asked = await send_task(client, "ask: again?", "idem-cont-1")
    assert asked["status"]["state"] == INPUT_REQUIRED
    continuation = send_body("yes", "idem-cont-2", taskId=asked["id"])

    responses = await concurrently(client, [continuation] * 20)
    assert [r.status_code for r in responses] == [200] * 20, [r.text for r in responses]
    assert {r.json()["task"]["id"] for r in responses} == {asked["id"]}
    answered = await get_task(client, asked["id"])
    assert answered["status"]["state"] == COMPLETED
    assert [m["messageId"] for m in answered["history"]].count("idem-cont-2") == 1

    # Later duplicates (the Task is terminal now) still return the prior Task, never
    # UNSUPPORTED_OPERATION, and append nothing.
    again = await client.post("/message:send", json=continuation)
    assert again.status_code == 200, again.text
    assert again.json()["task"] == answered
    assert await get_task(client, asked["id"]) == answered
    assert_error(
        await send(client, "no", "idem-cont-2", taskId=asked["id"]), 409, "DUPLICATE_MESSAGE_ID"
    )
    assert (await store_view(client))["totalSize"] == 1


async def test_concurrent_sends_of_one_message_id_with_two_payloads_keep_one_outcome(
    client: httpx.AsyncClient,
) -> None:
    bodies = [send_body("left" if n % 2 else "right", "idem-race-1") for n in range(40)]
    responses = await concurrently(client, bodies)
    winners = [(b, r) for b, r in zip(bodies, responses, strict=True) if r.status_code == 200]
    losers = [r for r in responses if r.status_code != 200]
    assert winners
    texts = {b["message"]["parts"][0]["text"] for b, _ in winners}
    assert len(texts) == 1
    assert {r.json()["task"]["id"] for _, r in winners} == {winners[0][1].json()["task"]["id"]}
    assert len(losers) == 20
    for loser in losers:
        assert_error(loser, 409, "DUPLICATE_MESSAGE_ID")
    assert (await store_view(client))["totalSize"] == 1


async def test_message_id_idempotency_is_scoped_to_the_principal(
    client: httpx.AsyncClient, beta: httpx.AsyncClient
) -> None:
    alpha_task = await send_task(client, "shared id", "idem-scope-1")
    beta_task = await send_task(beta, "a different payload", "idem-scope-1")
    assert beta_task["id"] != alpha_task["id"]
    assert (await store_view(client))["totalSize"] == 1
    assert (await store_view(beta))["totalSize"] == 1
    assert (await send_task(beta, "a different payload", "idem-scope-1"))["id"] == beta_task["id"]
