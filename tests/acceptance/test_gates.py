"""The verification gates, by name.

Design document ``a2a-task-plane.md``, "Verification gates" (first paragraph), and the
upstream test titles of ``CONTRACTS.md`` §i (rows 1-18), which PYTHON-MAPPING makes
gates too. Each test is named after its gate in snake_case.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from taskplane.actors import logic
from taskplane.app import PlaneOptions
from taskplane.bridge.scripted import ScriptedRuntime
from taskplane.bridge.tool_api import TaskTools
from taskplane.errors import ToolError, UnsupportedOperation
from taskplane.extensions import ELICITATION_URI, OUTFITTER_TASK_KEY, OUTFITTER_TASK_URI
from taskplane.model.codec import decode
from taskplane.model.types import Artifact, Part, Task
from tests.acceptance._support import (
    AUTH_REQUIRED,
    CANCELED,
    COMPLETED,
    IMMEDIATE,
    INPUT_REQUIRED,
    SUBMITTED,
    TERMINAL,
    WORKING,
    assert_error,
    assert_new_work,
    frame_kind,
    get_task,
    raw_stream,
    read_stream,
    send,
    send_task,
    serve,
    states_of,
    store_view,
    task_ids,
    wait_for_state,
)
from tests.support.plane import PUBLIC_URL, auth, send_body

# --- design document gates ------------------------------------------------------------------


async def test_equal_task_ids_from_two_servers_do_not_collide(
    client: httpx.AsyncClient, tmp_path: Path
) -> None:
    one = await send_task(client, "minted on server one", "gate-ids-1")
    async with serve(tmp_path / "server-two") as two:
        other = await send_task(two.client, "minted on server two", "gate-ids-1")
        assert other["id"] != one["id"]
        # A task id resolves only on the server that minted it.
        assert_error(await two.client.get(f"/tasks/{one['id']}"), 404, "TASK_NOT_FOUND")
        assert_error(await client.get(f"/tasks/{other['id']}"), 404, "TASK_NOT_FOUND")
        assert (await get_task(client, one["id"]))["status"]["state"] == COMPLETED
        assert (await get_task(two.client, other["id"]))["status"]["state"] == COMPLETED
        # Neither server can continue or cancel the other's task either.
        before = await store_view(two.client)
        assert_error(
            await send(two.client, "continue", "gate-ids-2", taskId=one["id"]),
            404,
            "TASK_NOT_FOUND",
        )
        assert_error(await two.client.post(f"/tasks/{one['id']}:cancel"), 404, "TASK_NOT_FOUND")
        assert await store_view(two.client) == before
        assert task_ids(before) == {other["id"]}
        assert task_ids(await store_view(client)) == {one["id"]}
        await assert_new_work(two.client, "gate-ids-2", before, text="continue")


async def test_a_foreign_context_id_does_not_join_local_work(
    client: httpx.AsyncClient, beta: httpx.AsyncClient
) -> None:
    alpha_task = await send_task(client, "alpha's work", "gate-ctx-1")
    context_id = alpha_task["contextId"]

    beta_task = await send_task(beta, "beta tries to join", "gate-ctx-2", contextId=context_id)
    assert beta_task["contextId"] != context_id
    assert beta_task["history"][0]["contextId"] == beta_task["contextId"]

    # alpha's context still holds only alpha's work; beta sees nothing in it.
    alpha_view = await client.get("/tasks", params={"contextId": context_id})
    assert [t["id"] for t in alpha_view.json()["tasks"]] == [alpha_task["id"]]
    beta_view = await beta.get("/tasks", params={"contextId": context_id})
    assert beta_view.json()["tasks"] == [] and beta_view.json()["totalSize"] == 0

    # Control: the owner of the context does join it.
    again = await send_task(
        client, "alpha continues the conversation", "gate-ctx-3", contextId=context_id
    )
    assert again["contextId"] == context_id
    assert again["id"] != alpha_task["id"]


async def test_a_reconnect_can_miss_transient_messages_without_losing_critical_state(
    live: httpx.AsyncClient,
) -> None:
    task = await send_task(live, "sleep: 300", "gate-reconnect-1", configuration=IMMEDIATE)
    task_id = task["id"]

    # Connect, see the snapshot, then drop the connection before anything else happens.
    async with raw_stream(
        live.base_url, "GET", f"/tasks/{task_id}:subscribe", headers=auth()
    ) as stream:
        assert stream.status == 200
        assert stream.headers["content-type"].startswith("text/event-stream")
        (frame,) = await stream.take(1)
        assert frame_kind(frame) == "task"
        assert frame["task"]["status"]["state"] in {SUBMITTED, WORKING}

    # The transient WORKING update and the artifact update were missed; the durable
    # Task still carries the critical state.
    settled = await wait_for_state(live, task_id, TERMINAL)
    assert settled["status"]["state"] == COMPLETED
    assert [a["parts"] for a in settled["artifacts"]] == [[{"text": "Slept 300 ms."}]]
    assert len(settled["history"]) == 1
    assert settled["history"][0]["messageId"] == "gate-reconnect-1"

    # Reconnecting replays nothing: a terminal Task cannot be subscribed to again.
    assert_error(await live.get(f"/tasks/{task_id}:subscribe"), 400, "UNSUPPORTED_OPERATION")


async def test_a_simple_interaction_returns_a_direct_message_and_a_duplicate_direct_message_returns_its_prior_direct_result(  # noqa: E501
    client: httpx.AsyncClient,
) -> None:
    first = await send(client, "ping", "gate-direct-1")
    assert first.status_code == 200, first.text
    body = first.json()
    assert set(body) == {"message"}
    message = body["message"]
    assert message["role"] == "ROLE_AGENT"
    assert message["parts"] == [{"text": "pong"}]
    assert message["contextId"]
    assert "taskId" not in message

    duplicate = await send(client, "ping", "gate-direct-1")
    assert duplicate.status_code == 200, duplicate.text
    assert duplicate.json() == body
    assert duplicate.content == first.content

    # No Task ever existed.
    view = await store_view(client)
    assert view["tasks"] == [] and view["totalSize"] == 0


async def test_an_unsupported_a2a_version_fails_explicitly(client: httpx.AsyncClient) -> None:
    before = await store_view(client)
    body = send_body("versioned", "gate-version-1")

    refused = await client.post("/message:send", json=body, headers={"A2A-Version": "0.5"})
    assert_error(refused, 400, "VERSION_NOT_SUPPORTED")
    assert_error(
        await client.get("/tasks", headers={"A2A-Version": "2.0"}), 400, "VERSION_NOT_SUPPORTED"
    )

    # The query-parameter form (§3.6.1), without the header.
    request = client.build_request("POST", "/message:send?A2A-Version=0.5", json=body)
    del request.headers["A2A-Version"]
    assert_error(await client.send(request), 400, "VERSION_NOT_SUPPORTED")
    request = client.build_request("GET", "/tasks?A2A-Version=0.5")
    del request.headers["A2A-Version"]
    assert_error(await client.send(request), 400, "VERSION_NOT_SUPPORTED")

    assert await store_view(client) == before
    await assert_new_work(client, "gate-version-1", before, text="versioned")

    # A patch number does not influence negotiation: 1.0.3 is 1.0.
    accepted = await client.post(
        "/message:send",
        json=send_body("patched", "gate-version-2"),
        headers={"A2A-Version": "1.0.3"},
    )
    assert accepted.status_code == 200, accepted.text
    assert accepted.json()["task"]["status"]["state"] == COMPLETED
    request = client.build_request("GET", "/tasks?A2A-Version=1.0")
    del request.headers["A2A-Version"]
    listed = await client.send(request)
    assert listed.status_code == 200, listed.text
    assert listed.json()["totalSize"] == 2


async def test_subscribe_uses_get_streams_updates_and_rejects_terminal_tasks(
    live: httpx.AsyncClient,
) -> None:
    task = await send_task(live, "sleep: 500", "gate-subscribe-1", configuration=IMMEDIATE)
    task_id = task["id"]

    with trio.fail_after(10):
        async with live.stream("GET", f"/tasks/{task_id}:subscribe") as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            frames = await read_stream(response)

    kinds = [frame_kind(f) for f in frames]
    assert kinds[0] == "task"
    assert frames[0]["task"]["id"] == task_id
    assert frames[0]["task"]["status"]["state"] in {SUBMITTED, WORKING}
    assert "statusUpdate" in kinds and "artifactUpdate" in kinds
    for frame in frames[1:]:
        assert frame[frame_kind(frame)]["taskId"] == task_id
    assert kinds[-1] == "statusUpdate"
    assert frames[-1]["statusUpdate"]["status"]["state"] == COMPLETED
    assert states_of(frames).count(COMPLETED) == 1

    refused = await live.get(f"/tasks/{task_id}:subscribe")
    assert_error(refused, 400, "UNSUPPORTED_OPERATION")


# --- upstream test titles (CONTRACTS.md §i) ----------------------------------------------------


async def test_a_duplicate_message_id_that_created_a_task_returns_that_task_and_a_different_payload_under_the_same_id_is_an_explicit_error(  # noqa: E501
    client: httpx.AsyncClient,
) -> None:
    first = await send(client, "hello", "gate-dup-1")
    assert first.status_code == 200, first.text
    task = first.json()["task"]

    duplicate = await send(client, "hello", "gate-dup-1")
    assert duplicate.status_code == 200, duplicate.text
    assert duplicate.json()["task"]["id"] == task["id"]
    assert duplicate.json() == first.json()

    before = await store_view(client)
    conflicting = await send(client, "a different payload", "gate-dup-1")
    assert_error(conflicting, 409, "DUPLICATE_MESSAGE_ID")
    assert await store_view(client) == before
    assert before["totalSize"] == 1
    assert (await get_task(client, task["id"]))["history"] == task["history"]


async def test_a_blocking_send_waits_for_a_settled_task_return_immediately_returns_the_submitted_task(  # noqa: E501
    client: httpx.AsyncClient,
) -> None:
    submitted = await send_task(client, "sleep: 200", "gate-block-1", configuration=IMMEDIATE)
    assert submitted["status"]["state"] == SUBMITTED
    assert "artifacts" not in submitted

    settled = await send_task(client, "sleep: 50", "gate-block-2")
    assert settled["status"]["state"] == COMPLETED
    assert settled["artifacts"][0]["parts"] == [{"text": "Slept 50 ms."}]
    # The wake queue runs one turn at a time, in order: the first task is done too.
    assert (await get_task(client, submitted["id"]))["status"]["state"] == COMPLETED


async def test_input_required_settles_a_blocking_send_and_a_follow_up_message_continues_the_same_non_terminal_task(  # noqa: E501
    client: httpx.AsyncClient,
) -> None:
    asked = await send_task(client, "ask: Which colour?", "gate-input-1")
    assert asked["status"]["state"] == INPUT_REQUIRED
    question = asked["status"]["message"]
    assert question["role"] == "ROLE_AGENT"
    assert question["parts"] == [{"text": "Which colour?"}]

    answered = await send_task(client, "blue", "gate-input-2", taskId=asked["id"])
    assert answered["id"] == asked["id"]
    assert answered["contextId"] == asked["contextId"]
    assert answered["status"]["state"] == COMPLETED
    assert answered["artifacts"][0]["parts"] == [{"text": "You answered: blue"}]
    assert [m["role"] for m in answered["history"]] == ["ROLE_USER", "ROLE_AGENT", "ROLE_USER"]
    assert answered["history"][-1]["messageId"] == "gate-input-2"
    assert (await store_view(client))["totalSize"] == 1


async def test_a_refused_continuation_of_a_working_task_does_not_persist_the_callers_message(
    live: httpx.AsyncClient,
) -> None:
    task = await send_task(live, "sleep: 2000", "gate-refused-1", configuration=IMMEDIATE)
    working = await wait_for_state(live, task["id"], {WORKING})
    before = await store_view(live)

    refused = await send(live, "let me in", "gate-refused-2", taskId=task["id"])
    assert_error(refused, 400, "INVALID_ARGUMENT")

    assert await get_task(live, task["id"]) == working
    assert await store_view(live) == before
    await assert_new_work(live, "gate-refused-2", before, text="let me in", immediately=True)


async def test_continuing_a_terminal_task_fails_requests_without_a_bearer_token_fail_and_push_notification_routes_are_explicitly_unsupported(  # noqa: E501
    client: httpx.AsyncClient, app: Any
) -> None:
    done = await send_task(client, "finished work", "gate-terminal-1")
    assert done["status"]["state"] == COMPLETED
    before = await store_view(client)

    # Continuing a terminal Task.
    refused = await send(client, "one more thing", "gate-terminal-2", taskId=done["id"])
    assert_error(refused, 400, "UNSUPPORTED_OPERATION")
    assert await store_view(client) == before

    # Without a bearer token (or with an unknown one).
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://test"
    ) as anonymous:
        for headers in ({"A2A-Version": "1.0"}, {"Authorization": "Bearer not-a-token"}):
            for method, path, body in (
                ("POST", "/message:send", send_body("sneaky", "gate-terminal-3")),
                ("GET", "/tasks", None),
                ("GET", f"/tasks/{done['id']}", None),
                ("POST", f"/tasks/{done['id']}:cancel", None),
            ):
                response = await anonymous.request(method, path, json=body, headers=headers)
                assert_error(response, 401, "UNAUTHENTICATED")
                assert response.headers["www-authenticate"].lower().startswith("bearer")
    assert await store_view(client) == before

    # Push-notification config routes: explicitly unsupported (501).
    for method, path in (
        ("GET", f"/tasks/{done['id']}/pushNotificationConfigs"),
        ("GET", f"/tasks/{done['id']}/pushNotificationConfigs/cfg-1"),
        ("DELETE", f"/tasks/{done['id']}/pushNotificationConfigs/cfg-1"),
        ("POST", f"/tasks/{done['id']}/pushNotificationConfigs"),
    ):
        response = await client.request(method, path)
        assert_error(response, 501, "PUSH_NOTIFICATION_NOT_SUPPORTED")
    # ... including a create carrying a TaskPushNotificationConfig body, as clients send it.
    create = await client.post(
        f"/tasks/{done['id']}/pushNotificationConfigs",
        json={"url": "https://example.com/webhook", "token": "t"},
    )
    assert_error(create, 501, "PUSH_NOTIFICATION_NOT_SUPPORTED")
    assert await store_view(client) == before

    await assert_new_work(client, "gate-terminal-2", before, text="one more thing")
    await assert_new_work(client, "gate-terminal-3", await store_view(client), text="sneaky")


async def test_the_agent_card_is_public_declares_streaming_without_push_notifications_and_carries_the_outfitter_task_extension(  # noqa: E501
    app: Any,
) -> None:
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://test"
    ) as anonymous:
        response = await anonymous.get("/.well-known/agent-card.json")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/json")
    card = response.json()
    assert card["capabilities"]["streaming"] is True
    assert card["capabilities"]["pushNotifications"] is False
    uris = [ext["uri"] for ext in card["capabilities"]["extensions"]]
    assert OUTFITTER_TASK_URI in uris
    assert ELICITATION_URI in uris
    interface = card["supportedInterfaces"][0]
    assert interface["protocolBinding"] == "HTTP+JSON"
    assert interface["protocolVersion"] == "1.0"
    assert interface["url"] == PUBLIC_URL


async def test_list_tasks_filters_by_context_id_and_status_within_the_authenticated_principal(
    client: httpx.AsyncClient, beta: httpx.AsyncClient
) -> None:
    done = await send_task(client, "done", "gate-list-1")
    waiting = await send_task(client, "ask: anything?", "gate-list-2")
    theirs = await send_task(beta, "beta's own", "gate-list-3", contextId=done["contextId"])

    async def listed(c: httpx.AsyncClient, **params: str) -> list[str]:
        response = await c.get("/tasks", params=params)
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["totalSize"] == len(body["tasks"])
        return [t["id"] for t in body["tasks"]]

    assert await listed(client, contextId=done["contextId"]) == [done["id"]]
    assert await listed(client, contextId=waiting["contextId"]) == [waiting["id"]]
    assert await listed(client, status=INPUT_REQUIRED) == [waiting["id"]]
    assert await listed(client, status=COMPLETED) == [done["id"]]
    assert await listed(client, contextId=done["contextId"], status=INPUT_REQUIRED) == []
    assert set(await listed(client)) == {done["id"], waiting["id"]}

    assert await listed(beta, contextId=done["contextId"]) == []
    assert await listed(beta, status=INPUT_REQUIRED) == []
    assert await listed(beta, status=COMPLETED) == [theirs["id"]]
    assert await listed(beta) == [theirs["id"]]


async def test_message_stream_forwards_status_and_artifact_updates_live_and_ends_at_the_terminal_frame(  # noqa: E501
    live: httpx.AsyncClient,
) -> None:
    with trio.fail_after(10):
        async with live.stream(
            "POST", "/message:stream", json=send_body("sleep: 300", "gate-stream-1")
        ) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            frames = await read_stream(response)

    kinds = [frame_kind(f) for f in frames]
    assert kinds[0] == "task"
    task_id = frames[0]["task"]["id"]
    assert frames[0]["task"]["status"]["state"] in {SUBMITTED, WORKING}
    artifact_at = kinds.index("artifactUpdate")
    update = frames[artifact_at]["artifactUpdate"]
    assert update["taskId"] == task_id
    assert update["artifact"]["parts"] == [{"text": "Slept 300 ms."}]
    assert kinds[-1] == "statusUpdate"
    assert frames[-1]["statusUpdate"]["status"]["state"] == COMPLETED
    assert artifact_at < len(frames) - 1
    # The one terminal frame is the last frame: the stream ended there.
    assert [s for s in states_of(frames) if s in TERMINAL] == [COMPLETED]
    assert (await get_task(live, task_id))["status"]["state"] == COMPLETED


async def test_a2a_record_output_streams_a_pull_request_artifact_while_the_task_is_working(
    live: httpx.AsyncClient,
) -> None:
    # Occupy the (one-turn-at-a-time) agent, so the stream attaches before the turn runs.
    await send_task(live, "sleep: 300", "gate-output-0", configuration=IMMEDIATE)
    with trio.fail_after(10):
        async with live.stream(
            "POST",
            "/message:stream",
            json=send_body('output: pull-request {"number": 7}', "gate-output-1"),
        ) as response:
            assert response.status_code == 200
            frames = await read_stream(response)

    task_id = frames[0]["task"]["id"]
    state = frames[0]["task"]["status"]["state"]
    seen: list[tuple[str, str]] = []
    for frame in frames[1:]:
        if "statusUpdate" in frame:
            state = frame["statusUpdate"]["status"]["state"]
        elif "artifactUpdate" in frame:
            seen.append((frame["artifactUpdate"]["artifact"]["name"], state))
            if frame["artifactUpdate"]["artifact"]["name"] == "pull-request":
                artifact = frame["artifactUpdate"]["artifact"]
    assert ("pull-request", WORKING) in seen
    assert [name for name, _ in seen] == ["pull-request", "response"]
    assert artifact["artifactId"] == f"output-pull-request-{task_id}"
    assert artifact["metadata"] == {
        OUTFITTER_TASK_KEY: {
            "output": "pull-request",
            "type": "pull-request",
            "value": {"number": 7},
        }
    }
    assert frames[-1]["statusUpdate"]["status"]["state"] == COMPLETED

    done = await get_task(live, task_id)
    assert done["status"]["state"] == COMPLETED
    assert [a["name"] for a in done["artifacts"]] == ["pull-request", "response"]
    assert done["artifacts"][0] == artifact


async def test_cancel_settles_a_non_terminal_task_and_refuses_a_terminal_one(
    client: httpx.AsyncClient,
) -> None:
    waiting = await send_task(client, "ask: still there?", "gate-cancel-1")
    assert waiting["status"]["state"] == INPUT_REQUIRED
    canceled = await client.post(f"/tasks/{waiting['id']}:cancel")
    assert canceled.status_code == 200, canceled.text
    assert canceled.json()["id"] == waiting["id"]
    assert canceled.json()["status"]["state"] == CANCELED
    assert (await get_task(client, waiting["id"]))["status"]["state"] == CANCELED

    running = await send_task(client, "sleep: 2000", "gate-cancel-2", configuration=IMMEDIATE)
    stopped = await client.post(f"/tasks/{running['id']}:cancel")
    assert stopped.status_code == 200, stopped.text
    assert stopped.json()["status"]["state"] == CANCELED

    # The agent moves on; the canceled Task stays canceled, with nothing added.
    await send_task(client, "after the cancel", "gate-cancel-3")
    after = await get_task(client, running["id"])
    assert after["status"]["state"] == CANCELED
    assert "artifacts" not in after

    done = await send_task(client, "completed work", "gate-cancel-4")
    before = await store_view(client)
    for task_id in (waiting["id"], running["id"]):
        assert_error(await client.post(f"/tasks/{task_id}:cancel"), 400, "TASK_NOT_CANCELABLE")
    assert_error(await client.post(f"/tasks/{done['id']}:cancel"), 400, "TASK_NOT_CANCELABLE")
    assert_error(await client.post("/tasks/no-such-task:cancel"), 404, "TASK_NOT_FOUND")
    assert await store_view(client) == before


async def test_unauthorized_explicit_task_id_fails(
    client: httpx.AsyncClient, beta: httpx.AsyncClient
) -> None:
    waiting = await send_task(client, "ask: alpha's question", "gate-unauth-1")
    assert waiting["status"]["state"] == INPUT_REQUIRED
    beta_before = await store_view(beta)

    hijack = await send(beta, "beta's answer", "gate-unauth-2", taskId=waiting["id"])
    assert_error(hijack, 404, "TASK_NOT_FOUND")
    assert_error(await beta.get(f"/tasks/{waiting['id']}"), 404, "TASK_NOT_FOUND")

    assert await get_task(client, waiting["id"]) == waiting
    assert await store_view(beta) == beta_before
    await assert_new_work(beta, "gate-unauth-2", beta_before, text="beta's answer")

    # alpha can still answer its own question.
    answered = await send_task(client, "alpha's answer", "gate-unauth-3", taskId=waiting["id"])
    assert answered["status"]["state"] == COMPLETED


async def test_a_verified_continuation_works_from_auth_required(
    client: httpx.AsyncClient,
) -> None:
    paused = await send_task(client, "auth: Please sign in.", "gate-auth-1")
    assert paused["status"]["state"] == AUTH_REQUIRED
    assert paused["status"]["message"]["parts"] == [{"text": "Please sign in."}]

    resumed = await send_task(client, "signed-in", "gate-auth-2", taskId=paused["id"])
    assert resumed["id"] == paused["id"]
    assert resumed["status"]["state"] == COMPLETED
    assert resumed["artifacts"][0]["parts"] == [{"text": "You answered: signed-in"}]


async def test_the_store_survives_restart_with_tasks_and_dedupe_intact(tmp_path: Path) -> None:
    root = tmp_path / "restart"
    async with serve(root) as first:
        task = (await send(first.client, "durable", "gate-restart-1")).json()
        direct = (await send(first.client, "ping", "gate-restart-2")).json()
        waiting = await send_task(first.client, "ask: after restart?", "gate-restart-3")
        view = await store_view(first.client)

    async with serve(root) as second:
        assert await store_view(second.client) == view
        again = await send(second.client, "durable", "gate-restart-1")
        assert again.status_code == 200 and again.json() == task
        replied = await send(second.client, "ping", "gate-restart-2")
        assert replied.status_code == 200 and replied.json() == direct
        assert_error(
            await send(second.client, "changed", "gate-restart-1"), 409, "DUPLICATE_MESSAGE_ID"
        )
        answered = await send_task(second.client, "yes", "gate-restart-4", taskId=waiting["id"])
        assert answered["status"]["state"] == COMPLETED
        assert (await store_view(second.client))["totalSize"] == 2


class _LateArtifactRuntime(ScriptedRuntime):
    """Completes the Task, then tries to add an artifact to it (must be refused)."""

    def __init__(self) -> None:
        self.refusals: list[ToolError] = []
        self.tried = trio.Event()
        """Set once the late artifact was tried (a blocking send answers at COMPLETED,
        before the turn goes on)."""

    async def run_turn(self, task_id: str, prompt: str, tools: TaskTools) -> None:
        await tools.a2a_complete_task(task_id, "done")
        try:
            await tools.a2a_record_output(task_id, "pull-request", {"number": 1})
        except ToolError as exc:
            self.refusals.append(exc)
        finally:
            self.tried.set()


async def test_rejects_artifacts_after_a_task_reaches_a_terminal_state(
    client: httpx.AsyncClient, tmp_path: Path
) -> None:
    runtime = _LateArtifactRuntime()
    async with serve(tmp_path / "late", options=PlaneOptions(runtime=runtime)) as server:
        done = await send_task(server.client, "work", "gate-late-1")
        assert done["status"]["state"] == COMPLETED
        with trio.fail_after(10):
            await runtime.tried.wait()
        assert len(runtime.refusals) == 1
        stored = await get_task(server.client, done["id"])
        assert [a["name"] for a in stored["artifacts"]] == ["response"]

    # The pure transition refuses it too.
    completed = decode(await get_task(client, (await send_task(client, "x", "late-2"))["id"]), Task)
    with pytest.raises(UnsupportedOperation):
        logic.with_artifact(
            completed, Artifact(artifact_id="late", parts=(Part.from_text("late"),))
        )
