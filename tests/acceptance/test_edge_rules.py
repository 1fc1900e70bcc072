"""Edge rules of the HTTP+JSON binding: continuation checks, streams, request shape,
routing, ListTasks/GetTask parameters, tenants, media types and the §11.6 error body.

Every refused request is followed by a check that the store did not change and, for
sends, that the same ``messageId`` is later accepted as new work (nothing was recorded
as an idempotent outcome).
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from taskplane.app import PlaneOptions
from tests.acceptance._support import (
    COMPLETED,
    IMMEDIATE,
    INPUT_REQUIRED,
    SUBMITTED,
    WORKING,
    Server,
    assert_error,
    assert_new_work,
    field_violations,
    frame_kind,
    get_task,
    raw_stream,
    read_stream,
    send,
    send_task,
    serve,
    sse_frames,
    states_of,
    store_view,
    task_ids,
    ticking_clock,
)
from tests.support.plane import auth, send_body


@pytest.fixture
async def ticking(tmp_path: Path) -> AsyncIterator[Server]:
    """A server whose clock advances 1 ms per reading: status timestamps never tie."""
    async with serve(tmp_path / "ticking", options=PlaneOptions(now_ms=ticking_clock())) as s:
        yield s


async def create_tasks(client: httpx.AsyncClient, count: int, prefix: str) -> list[str]:
    """``count`` completed Tasks (concurrent blocking sends); their ids."""
    ids: list[str] = []

    async def one(n: int) -> None:
        task = await send_task(client, f"task {n}", f"{prefix}-{n}")
        assert task["status"]["state"] == COMPLETED
        ids.append(task["id"])

    async with trio.open_nursery() as nursery:
        for n in range(count):
            nursery.start_soon(one, n)
    return ids


# --- continuation rules -----------------------------------------------------------------------


async def test_a_follow_up_naming_a_task_id_with_a_different_context_id_is_invalid_and_records_nothing(  # noqa: E501
    client: httpx.AsyncClient,
) -> None:
    waiting = await send_task(client, "ask: which one?", "edge-ctx-1")
    other = await send_task(client, "another conversation", "edge-ctx-2")
    assert other["contextId"] != waiting["contextId"]
    before = await store_view(client)

    refused = await send(
        client, "this one", "edge-ctx-3", taskId=waiting["id"], contextId=other["contextId"]
    )
    error = assert_error(refused, 400, "INVALID_ARGUMENT")
    assert "message.contextId" in field_violations(error)
    assert await store_view(client) == before
    assert await get_task(client, waiting["id"]) == waiting

    # Nothing was recorded under edge-ctx-3: the corrected message is accepted (a recorded
    # claim would make this different payload a 409).
    answered = await send_task(
        client, "this one", "edge-ctx-3", taskId=waiting["id"], contextId=waiting["contextId"]
    )
    assert answered["id"] == waiting["id"]
    assert answered["status"]["state"] == COMPLETED


async def test_an_unknown_task_id_is_task_not_found_and_records_nothing(
    client: httpx.AsyncClient,
) -> None:
    await send_task(client, "existing work", "edge-unknown-0")
    before = await store_view(client)
    refused = await send(client, "hello?", "edge-unknown-1", taskId="no-such-task")
    error = assert_error(refused, 404, "TASK_NOT_FOUND")
    assert error["details"][0]["metadata"]["taskId"] == "no-such-task"
    assert await store_view(client) == before
    await assert_new_work(client, "edge-unknown-1", before, text="hello?")


@pytest.mark.parametrize("route", ["/message:send", "/message:stream"])
async def test_a_message_to_a_terminal_task_is_unsupported_operation_as_plain_json(
    client: httpx.AsyncClient, route: str
) -> None:
    done = await send_task(client, "all done", "edge-terminal-0")
    before = await store_view(client)
    refused = await client.post(route, json=send_body("more", "edge-terminal-1", taskId=done["id"]))
    assert_error(refused, 400, "UNSUPPORTED_OPERATION")
    assert not refused.headers["content-type"].startswith("text/event-stream")
    assert await store_view(client) == before
    await assert_new_work(client, "edge-terminal-1", before, text="more")


# --- streams ------------------------------------------------------------------------------------


async def test_message_stream_ends_at_input_required(live: httpx.AsyncClient) -> None:
    with trio.fail_after(10):
        async with live.stream(
            "POST", "/message:stream", json=send_body("ask: your name?", "edge-stream-1")
        ) as response:
            assert response.status_code == 200
            frames = await read_stream(response)
    assert frame_kind(frames[0]) == "task"
    assert states_of(frames)[-1] == INPUT_REQUIRED
    assert frame_kind(frames[-1]) in {"task", "statusUpdate"}
    task = await get_task(live, frames[0]["task"]["id"])
    assert task["status"]["state"] == INPUT_REQUIRED


async def test_subscribe_stays_open_through_input_required_and_ends_only_at_terminal(
    live: httpx.AsyncClient,
) -> None:
    # Occupy the agent so the subscription attaches before the question is asked.
    await send_task(live, "sleep: 300", "edge-sub-0", configuration=IMMEDIATE)
    task = await send_task(live, "ask: your name?", "edge-sub-1", configuration=IMMEDIATE)
    frames: list[dict[str, Any]] = []
    asked = trio.Event()

    async def subscriber() -> None:
        async with live.stream("GET", f"/tasks/{task['id']}:subscribe") as response:
            assert response.status_code == 200
            async for frame in sse_frames(response):
                frames.append(frame)
                if states_of(frames)[-1:] == [INPUT_REQUIRED]:
                    asked.set()

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(subscriber)
            await asked.wait()
            answered = await send_task(live, "Ada", "edge-sub-2", taskId=task["id"])
            assert answered["status"]["state"] == COMPLETED
    # The nursery closed only because the stream ended, after the terminal frame.
    states = states_of(frames)
    assert states[0] == SUBMITTED
    assert INPUT_REQUIRED in states
    assert states.index(INPUT_REQUIRED) < len(states) - 1
    assert WORKING in states[states.index(INPUT_REQUIRED) :]
    assert states[-1] == COMPLETED
    assert frame_kind(frames[-1]) == "statusUpdate"


async def test_the_post_subscribe_alias_works_with_an_empty_body(
    live: httpx.AsyncClient,
) -> None:
    task = await send_task(live, "ask: still waiting?", "edge-alias-1")
    for extra in ({}, {"Content-Type": "application/json"}):
        async with raw_stream(
            live.base_url,
            "POST",
            f"/tasks/{task['id']}:subscribe",
            headers={**auth(), **extra},
            body=b"",
        ) as stream:
            assert stream.status == 200
            assert stream.headers["content-type"].startswith("text/event-stream")
            (frame,) = await stream.take(1)
            assert frame["task"]["id"] == task["id"]
            assert frame["task"]["status"]["state"] == INPUT_REQUIRED
    assert await get_task(live, task["id"]) == task


async def test_get_tasks_abc_subscribe_is_not_read_as_task_id_abc_subscribe(
    client: httpx.AsyncClient,
) -> None:
    response = await client.get("/tasks/abc:subscribe")
    error = assert_error(response, 404, "TASK_NOT_FOUND")
    assert error["details"][0]["metadata"]["taskId"] == "abc"

    # And for a real Task, :subscribe is the subscribe operation, not a read.
    done = await send_task(client, "done", "edge-abc-1")
    assert_error(await client.get(f"/tasks/{done['id']}:subscribe"), 400, "UNSUPPORTED_OPERATION")
    assert_error(await client.post(f"/tasks/{done['id']}:subscribe"), 400, "UNSUPPORTED_OPERATION")


async def test_cancel_with_no_body_and_no_content_type_works(client: httpx.AsyncClient) -> None:
    task = await send_task(client, "ask: cancel me?", "edge-cancel-1")
    request = client.build_request("POST", f"/tasks/{task['id']}:cancel")
    assert "content-type" not in request.headers
    assert request.content == b""
    response = await client.send(request)
    assert response.status_code == 200, response.text
    assert response.json()["status"]["state"] == "TASK_STATE_CANCELED"


# --- version and request shape ------------------------------------------------------------------


async def test_a2a_version_1_0_3_counts_as_1_0(client: httpx.AsyncClient) -> None:
    headers = {"A2A-Version": "1.0.3"}
    sent = await client.post(
        "/message:send", json=send_body("patch", "edge-ver-1"), headers=headers
    )
    assert sent.status_code == 200, sent.text
    task_id = sent.json()["task"]["id"]
    assert (await client.get(f"/tasks/{task_id}", headers=headers)).status_code == 200
    assert (await client.get("/tasks", headers=headers)).json()["totalSize"] == 1


async def test_a_non_json_content_type_is_415_and_stores_nothing(
    client: httpx.AsyncClient,
) -> None:
    before = await store_view(client)
    body = json.dumps(send_body("typed", "edge-415-1")).encode()
    refused = await client.post(
        "/message:send", content=body, headers={"Content-Type": "text/plain"}
    )
    assert_error(refused, 415)
    untyped = client.build_request("POST", "/message:send", content=body)
    assert "content-type" not in untyped.headers
    assert_error(await client.send(untyped), 415)
    assert await store_view(client) == before
    await assert_new_work(client, "edge-415-1", before, text="typed")


async def test_malformed_json_is_400_and_stores_nothing(client: httpx.AsyncClient) -> None:
    before = await store_view(client)
    valid = json.dumps(send_body("almost", "edge-malformed-1"))
    for raw in (valid[:-1], valid.replace('"', "'"), valid + " trailing", valid + valid):
        refused = await client.post(
            "/message:send", content=raw.encode(), headers={"Content-Type": "application/json"}
        )
        assert_error(refused, 400, "INVALID_ARGUMENT")
    assert await store_view(client) == before
    await assert_new_work(client, "edge-malformed-1", before, text="almost")


async def test_a_body_over_1_mib_is_413_and_stores_nothing(client: httpx.AsyncClient) -> None:
    before = await store_view(client)
    big = json.dumps(send_body("x" * (1 << 20), "edge-413-1")).encode()
    assert len(big) > 1 << 20
    refused = await client.post(
        "/message:send", content=big, headers={"Content-Type": "application/json"}
    )
    assert_error(refused, 413)

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: chunked upload
        for start in range(0, len(big), 64 * 1024):
            yield big[start : start + 64 * 1024]

    streamed = await client.post(
        "/message:send", content=chunks(), headers={"Content-Type": "application/json"}
    )
    assert_error(streamed, 413)
    assert await store_view(client) == before
    await assert_new_work(client, "edge-413-1", before)


async def test_a_json_array_body_is_400(client: httpx.AsyncClient) -> None:
    before = await store_view(client)
    refused = await client.post("/message:send", json=[send_body("listed", "edge-array-1")])
    assert_error(refused, 400, "INVALID_ARGUMENT")
    assert await store_view(client) == before
    await assert_new_work(client, "edge-array-1", before)


async def test_a_missing_required_field_is_400_naming_the_field_path(
    client: httpx.AsyncClient,
) -> None:
    before = await store_view(client)
    no_id = {"message": {"role": "ROLE_USER", "parts": [{"text": "anonymous"}]}}
    error = assert_error(await client.post("/message:send", json=no_id), 400, "INVALID_ARGUMENT")
    assert "message.messageId" in field_violations(error)
    assert "message.messageId" in error["message"]

    no_parts = send_body("x", "edge-missing-1")
    no_parts["message"]["parts"] = []
    error = assert_error(await client.post("/message:send", json=no_parts), 400, "INVALID_ARGUMENT")
    assert "message.parts" in field_violations(error)

    no_message: dict[str, Any] = {"configuration": IMMEDIATE}
    error = assert_error(
        await client.post("/message:send", json=no_message), 400, "INVALID_ARGUMENT"
    )
    assert "message" in field_violations(error)
    assert await store_view(client) == before
    await assert_new_work(client, "edge-missing-1", before)


async def test_an_unknown_field_is_ignored_and_counted(
    client: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    # Issue 17, A2A §5.7: this test asserted the former 400; unknown fields are now
    # ignored (counted in /metrics, logged at DEBUG), on both bindings.
    caplog.set_level(logging.DEBUG, logger="taskplane.http")
    inner = send_body("extra", "edge-unknown-field-1", bogus=1)
    first = await client.post("/message:send", json=inner)
    assert first.status_code == 200, first.text
    assert first.json()["task"]["status"]["state"] == COMPLETED
    # The same message with another unknown field is the same message: a duplicate.
    outer = {**send_body("extra", "edge-unknown-field-1"), "bogus": True}
    again = await client.post("/message:send?bogusParam=1", json=outer)
    assert again.json()["task"]["id"] == first.json()["task"]["id"], again.text
    rpc = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x", "zz": 1}}
    assert (await client.post("/", json=rpc)).json()["error"]["code"] == -32001
    metrics = (await client.get("/metrics")).text
    assert 'taskplane_unknown_fields_total{request="SendMessageRequest"} 3.0' in metrics
    assert 'taskplane_unknown_fields_total{request="GetTaskRequest"} 1.0' in metrics
    logged = [r for r in caplog.records if getattr(r, "event", None) == "a2a_unknown_fields"]
    assert [(r.levelname, r.fields) for r in logged] == [
        ("DEBUG", ["message.bogus"]),
        ("DEBUG", ["bogusParam"]),
        ("DEBUG", ["bogus"]),
        ("DEBUG", ["zz"]),
    ]
    # A wrong type is still a 400 naming the field.
    wrong = send_body("extra", "edge-unknown-field-2", bogus=1, taskId=7)
    error = assert_error(await client.post("/message:send", json=wrong), 400, "INVALID_ARGUMENT")
    assert field_violations(error) == ["message.taskId"]


async def test_a_message_whose_role_is_not_user_is_400(client: httpx.AsyncClient) -> None:
    before = await store_view(client)
    agent = send_body("impersonating", "edge-role-1")
    agent["message"]["role"] = "ROLE_AGENT"
    error = assert_error(await client.post("/message:send", json=agent), 400, "INVALID_ARGUMENT")
    assert "message.role" in field_violations(error)
    assert await store_view(client) == before
    await assert_new_work(client, "edge-role-1", before)


async def test_send_configuration_history_length(client: httpx.AsyncClient) -> None:
    def configured(n: int, message_id: str) -> dict[str, Any]:
        return send_body("ask: how much?", message_id, configuration={"historyLength": n})

    none = await client.post("/message:send", json=configured(0, "edge-send-hist-1"))
    assert none.status_code == 200, none.text
    assert "history" not in none.json()["task"]
    newest = await client.post("/message:send", json=configured(1, "edge-send-hist-2"))
    task = newest.json()["task"]
    assert task["history"] == [task["status"]["message"]]
    assert len((await get_task(client, task["id"]))["history"]) == 2  # the store keeps all

    before = await store_view(client)
    negative = await client.post("/message:send", json=configured(-1, "edge-send-hist-3"))
    error = assert_error(negative, 400, "INVALID_ARGUMENT")
    assert any("historyLength" in field for field in field_violations(error))
    assert await store_view(client) == before
    await assert_new_work(client, "edge-send-hist-3", before)


async def test_a_send_asking_for_push_notifications_is_501_and_records_nothing(
    client: httpx.AsyncClient,
) -> None:
    before = await store_view(client)
    push = {"taskPushNotificationConfig": {"url": "https://example.com/webhook"}}
    refused = await client.post(
        "/message:send", json=send_body("notify me", "edge-push-1", configuration=push)
    )
    assert_error(refused, 501, "PUSH_NOTIFICATION_NOT_SUPPORTED")
    assert await store_view(client) == before
    await assert_new_work(client, "edge-push-1", before, text="notify me")


# --- routing ----------------------------------------------------------------------------------


async def test_an_unknown_route_is_404_in_the_11_6_shape(client: httpx.AsyncClient) -> None:
    before = await store_view(client)
    for method, path in (
        ("GET", "/nope"),
        ("POST", "/message:sendx"),
        ("POST", "/message"),
        ("GET", "/tasks/a/b"),
        ("GET", "/acme/tasks/a/b/c"),
    ):
        response = await client.request(method, path)
        assert_error(response, 404, "NOT_FOUND")
    assert await store_view(client) == before


async def test_a_wrong_method_is_405_with_allow(client: httpx.AsyncClient) -> None:
    before = await store_view(client)
    # Every GET route also answers HEAD, so Allow lists HEAD wherever it lists GET.
    for method, path, allowed in (
        ("GET", "/message:send", {"POST"}),
        ("PUT", "/message:stream", {"POST"}),
        ("DELETE", "/tasks", {"GET", "HEAD"}),
        ("POST", "/tasks/some-id", {"GET", "HEAD"}),
        ("GET", "/tasks/some-id:cancel", {"POST"}),
        ("DELETE", "/tasks/some-id:subscribe", {"GET", "HEAD", "POST"}),
        ("POST", "/.well-known/agent-card.json", {"GET", "HEAD"}),
        ("POST", "/acme/tasks", {"GET", "HEAD"}),
    ):
        response = await client.request(method, path)
        assert_error(response, 405)
        assert {m.strip() for m in response.headers["allow"].split(",")} == allowed
    assert await store_view(client) == before


# --- ListTasks --------------------------------------------------------------------------------


async def test_list_tasks_page_size_defaults_to_50_and_0_or_101_is_400(
    client: httpx.AsyncClient,
) -> None:
    ids = await create_tasks(client, 55, "edge-page-default")
    response = await client.get("/tasks")
    assert response.status_code == 200, response.text
    page = response.json()
    assert page["pageSize"] == 50
    assert len(page["tasks"]) == 50
    assert page["totalSize"] == 55
    assert page["nextPageToken"] != ""
    rest = (await client.get("/tasks", params={"pageToken": page["nextPageToken"]})).json()
    assert len(rest["tasks"]) == 5 and rest["nextPageToken"] == ""
    assert {t["id"] for t in page["tasks"] + rest["tasks"]} == set(ids)

    for size in ("0", "101", "-1", "ten"):
        error = assert_error(
            await client.get("/tasks", params={"pageSize": size}), 400, "INVALID_ARGUMENT"
        )
        assert "pageSize" in field_violations(error)
    for size in ("1", "100"):
        ok = await client.get("/tasks", params={"pageSize": size})
        assert ok.status_code == 200 and ok.json()["pageSize"] == int(size)


async def test_walking_every_list_page_yields_each_task_once_newest_first(
    ticking: Server,
) -> None:
    client = ticking.client
    ids = await create_tasks(client, 23, "edge-walk")
    seen: list[dict[str, Any]] = []
    token = None
    pages = 0
    while True:
        params = {"pageSize": "5"} | ({"pageToken": token} if token is not None else {})
        page = (await client.get("/tasks", params=params)).json()
        pages += 1
        assert "nextPageToken" in page
        assert page["totalSize"] == 23
        assert page["pageSize"] == 5
        seen.extend(page["tasks"])
        token = page["nextPageToken"]
        if token == "":
            break
        assert len(page["tasks"]) == 5
    assert pages == 5
    assert sorted(t["id"] for t in seen) == sorted(ids)
    stamps = [t["status"]["timestamp"] for t in seen]
    assert stamps == sorted(stamps, reverse=True)
    assert len(set(stamps)) == len(stamps)

    # An empty result still carries every required field.
    empty = (await client.get("/tasks", params={"contextId": "nobody"})).json()
    assert empty == {"tasks": [], "nextPageToken": "", "pageSize": 50, "totalSize": 0}


async def test_list_tasks_history_length(client: httpx.AsyncClient) -> None:
    waiting = await send_task(client, "ask: how long?", "edge-list-hist-1")
    assert len(waiting["history"]) == 2

    none = (await client.get("/tasks", params={"historyLength": "0"})).json()
    assert none["tasks"] and all("history" not in t for t in none["tasks"])
    one = (await client.get("/tasks", params={"historyLength": "1"})).json()
    assert one["tasks"][0]["history"] == waiting["history"][-1:]
    every = (await client.get("/tasks")).json()
    assert every["tasks"][0]["history"] == waiting["history"]
    error = assert_error(
        await client.get("/tasks", params={"historyLength": "-1"}), 400, "INVALID_ARGUMENT"
    )
    assert "historyLength" in field_violations(error)


async def test_list_tasks_include_artifacts(client: httpx.AsyncClient) -> None:
    done = await send_task(client, "with an artifact", "edge-list-art-1")
    assert done["artifacts"]
    for params in ({}, {"includeArtifacts": "false"}):
        listed = (await client.get("/tasks", params=params)).json()
        assert all("artifacts" not in t for t in listed["tasks"])
    included = (await client.get("/tasks", params={"includeArtifacts": "true"})).json()
    assert included["tasks"][0]["artifacts"] == done["artifacts"]
    assert_error(
        await client.get("/tasks", params={"includeArtifacts": "yes"}), 400, "INVALID_ARGUMENT"
    )


async def test_list_tasks_status_timestamp_after(ticking: Server) -> None:
    client = ticking.client
    older = await send_task(client, "older", "edge-after-1")
    newer = await send_task(client, "newer", "edge-after-2")
    older_ts, newer_ts = older["status"]["timestamp"], newer["status"]["timestamp"]
    assert older_ts < newer_ts

    async def after(stamp: str) -> list[str]:
        response = await client.get("/tasks", params={"statusTimestampAfter": stamp})
        assert response.status_code == 200, response.text
        assert response.json()["totalSize"] == len(response.json()["tasks"])
        return [t["id"] for t in response.json()["tasks"]]

    assert await after(newer_ts) == [newer["id"]]  # the bound is inclusive
    assert await after(older_ts) == [newer["id"], older["id"]]
    assert await after("2000-01-01T00:00:00Z") == [newer["id"], older["id"]]
    assert await after("2999-01-01T00:00:00Z") == []
    assert_error(
        await client.get("/tasks", params={"statusTimestampAfter": "yesterday"}),
        400,
        "INVALID_ARGUMENT",
    )


async def test_a_bad_page_token_is_400(client: httpx.AsyncClient) -> None:
    await create_tasks(client, 3, "edge-token")
    for token in ("not-a-token", "!!!", "eyJ4IjoxfQ"):
        error = assert_error(
            await client.get("/tasks", params={"pageToken": token}), 400, "INVALID_ARGUMENT"
        )
        assert "pageToken" in field_violations(error)


async def test_get_task_history_length(client: httpx.AsyncClient) -> None:
    waiting = await send_task(client, "ask: how much history?", "edge-get-hist-1")
    answered = await send_task(client, "all of it", "edge-get-hist-2", taskId=waiting["id"])
    history = answered["history"]
    assert len(history) == 3

    path = f"/tasks/{waiting['id']}"
    assert "history" not in (await client.get(path, params={"historyLength": "0"})).json()
    assert (await client.get(path, params={"historyLength": "1"})).json()["history"] == history[-1:]
    assert (await client.get(path, params={"historyLength": "2"})).json()["history"] == history[-2:]
    assert (await client.get(path, params={"historyLength": "50"})).json()["history"] == history
    assert (await client.get(path)).json()["history"] == history
    assert_error(await client.get(path, params={"historyLength": "-1"}), 400, "INVALID_ARGUMENT")


# --- tenants, media types, error bodies ---------------------------------------------------------


async def test_tenant_routes_work_and_are_isolated_from_the_plain_tenant_and_other_tenants(
    client: httpx.AsyncClient,
) -> None:
    acme = await send_task(client, "acme work", "edge-tenant-1", prefix="/acme")
    assert acme["status"]["state"] == COMPLETED
    assert (await get_task(client, acme["id"], prefix="/acme"))["id"] == acme["id"]
    assert task_ids(await store_view(client, "/acme")) == {acme["id"]}

    for prefix in ("", "/other"):
        assert_error(await client.get(f"{prefix}/tasks/{acme['id']}"), 404, "TASK_NOT_FOUND")
        assert_error(
            await client.post(f"{prefix}/tasks/{acme['id']}:cancel"), 404, "TASK_NOT_FOUND"
        )
        assert (await store_view(client, prefix))["totalSize"] == 0

    # Every operation routes by tenant: :subscribe on the acme route reaches the Task.
    assert_error(
        await client.get(f"/acme/tasks/{acme['id']}:subscribe"), 400, "UNSUPPORTED_OPERATION"
    )
    assert_error(await client.get(f"/tasks/{acme['id']}:subscribe"), 404, "TASK_NOT_FOUND")

    # Idempotency is per tenant: the same messageId elsewhere is new work.
    plain = await send_task(client, "acme work", "edge-tenant-1")
    assert plain["id"] != acme["id"]
    other_before = await store_view(client, "/other")
    refused = await send(client, "continue", "edge-tenant-2", prefix="/other", taskId=acme["id"])
    assert_error(refused, 404, "TASK_NOT_FOUND")
    assert await store_view(client, "/other") == other_before
    # The acme Task is still acme's, and still answers its own duplicate.
    again = await send(client, "acme work", "edge-tenant-1", prefix="/acme")
    assert again.json()["task"]["id"] == acme["id"]
    assert (await store_view(client, "/acme"))["totalSize"] == 1


async def test_accept_application_a2a_json_gets_that_content_type(
    client: httpx.AsyncClient,
) -> None:
    a2a = {"Accept": "application/a2a+json"}
    sent = await client.post(
        "/message:send", json=send_body("typed answer", "edge-accept-1"), headers=a2a
    )
    assert sent.status_code == 200
    assert sent.headers["content-type"].split(";")[0] == "application/a2a+json"
    listed = await client.get("/tasks", headers=a2a)
    assert listed.headers["content-type"].split(";")[0] == "application/a2a+json"
    missing = await client.get("/tasks/no-such-task", headers=a2a)
    assert_error(missing, 404, "TASK_NOT_FOUND", media_type="application/a2a+json")

    plain = await client.get("/tasks")
    assert plain.headers["content-type"].split(";")[0] == "application/json"
    wildcard = await client.get("/tasks", headers={"Accept": "*/*"})
    assert wildcard.headers["content-type"].split(";")[0] == "application/json"


async def test_every_error_body_has_the_11_6_shape(client: httpx.AsyncClient, app: Any) -> None:
    done = await send_task(client, "done", "edge-shape-1")
    before = await store_view(client)
    json_type = {"Content-Type": "application/json"}
    cases: list[tuple[str, str, dict[str, Any], int, str | None]] = [
        ("POST", "/message:send", {"content": b"{", "headers": json_type}, 400, "INVALID_ARGUMENT"),
        ("POST", "/message:send", {"json": send_body("x", "edge-shape-1", taskId=7)}, 400, None),
        ("GET", "/tasks", {"params": {"pageSize": "0"}}, 400, "INVALID_ARGUMENT"),
        ("GET", "/tasks", {"headers": {"A2A-Version": "9.9"}}, 400, "VERSION_NOT_SUPPORTED"),
        ("POST", f"/tasks/{done['id']}:cancel", {}, 400, "TASK_NOT_CANCELABLE"),
        ("GET", f"/tasks/{done['id']}:subscribe", {}, 400, "UNSUPPORTED_OPERATION"),
        ("POST", "/message:send", {"json": send_body("other", "edge-shape-1")}, 409,
         "DUPLICATE_MESSAGE_ID"),
        ("GET", "/tasks/missing", {}, 404, "TASK_NOT_FOUND"),
        ("GET", "/missing/route/here", {}, 404, None),
        ("PATCH", "/tasks", {}, 405, None),
        ("POST", "/message:send",
         {"content": b"x" * ((1 << 20) + 1), "headers": json_type}, 413, None),
        ("POST", "/message:send",
         {"content": b"{}", "headers": {"Content-Type": "text/plain"}}, 415, None),
        ("GET", f"/tasks/{done['id']}/pushNotificationConfigs", {}, 501,
         "PUSH_NOTIFICATION_NOT_SUPPORTED"),
        ("GET", "/extendedAgentCard", {}, 400, "UNSUPPORTED_OPERATION"),
    ]  # fmt: skip
    for method, path, kwargs, status, reason in cases:
        assert_error(await client.request(method, path, **kwargs), status, reason)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://test"
    ) as anonymous:
        assert_error(await anonymous.get("/tasks"), 401, "UNAUTHENTICATED")
    assert await store_view(client) == before
