"""Early refusal at the HTTP edge while admission is closed ("Wake admission is bounded").

One test fills only the queue (a send first in line waits for a slot); the others also
park ``MAX_ADMISSION_WAITERS`` senders in intake (admission closed: the send first in
line is refused at once, paced).

Admission is closed when the wake queue is full (a held turn plus 128 waiting Tasks)
and ``MAX_ADMISSION_WAITERS`` senders already wait for a slot. Then a send of new work
is answered 503 with ``Retry-After: 1`` before the app parses and validates it (so a
request the app would refuse with 400 gets the 503), without one store statement; a
duplicate of an accepted message still gets its prior answer, a direct reply is still
answered, and a request that cannot be read as a send (bad token, malformed JSON)
gets the app's usual answer. Virtual time, SQLite on the trio thread, the app
in-process.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
import trio
import trio.testing

from taskplane.actors.admission_limits import (
    ADMISSION_WAIT_S,
    CROWDED_WAITERS,
    MAX_ADMISSION_WAITERS,
    MAX_PARKED_BYTES,
    REFUSALS_PER_S,
)
from taskplane.actors.plane import TaskPlane
from taskplane.errors import Overloaded
from taskplane.model.types import Message as A2AMessage
from taskplane.model.types import Part
from taskplane.settings import DEFAULT_BODY_TIMEOUT_S
from tests.store.faults import faulty_connection
from tests.support.agent import Agent
from tests.support.asgi import call, http_scope, sent_body, sent_headers, sent_start
from tests.support.overload import PingAgent, StatementLog, fill
from tests.support.plane import BETA_TOKEN, auth, in_process_client, make_app, open_test_plane
from tests.support.virtual import events, journal, options, quiesce, send


@attrs.define
class Closed:
    """A plane whose admission is closed, its app's client, and the store's statements."""

    plane: TaskPlane
    agent: Agent
    client: httpx.AsyncClient
    log: StatementLog
    app: Any
    waiting: list[str]


@asynccontextmanager
async def closed_admission(
    store_root: Path, agent_factory: Callable[[], Agent] = Agent, *, compat03: bool = False
) -> AsyncIterator[Closed]:
    """The wake queue full and ``MAX_ADMISSION_WAITERS`` senders waiting in intake
    (``compat03``: the app as served with ``TASKPLANE_A2A_COMPAT=0.3``)."""
    async with full_queue(store_root, agent_factory, compat03=compat03) as full:

        async def waiter(n: int) -> None:
            try:  # refused after its admission wait, unless a slot frees first
                await send(full.plane, f"wait {n}", f"m-wait{n}")
            except Overloaded:
                pass

        async with trio.open_nursery() as nursery:
            for n in range(MAX_ADMISSION_WAITERS):
                nursery.start_soon(waiter, n)
            await trio.testing.wait_all_tasks_blocked()
            assert full.plane.admission.statistics().closed and full.plane.admission.crowded
            full.log.statements.clear()
            yield full
            full.agent.open("hold")


def send_body(text: str, message_id: str, **extra: Any) -> dict[str, Any]:
    message = {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": text}]}
    return {"message": message, "configuration": {"returnImmediately": True}, **extra}


def assert_overloaded(response: httpx.Response) -> None:
    assert response.status_code == 503, response.text
    assert response.headers["Retry-After"] == "1"
    error = response.json()["error"]
    assert error["status"] == "UNAVAILABLE"
    assert error["details"][0]["reason"] == "UNAVAILABLE"
    assert "tasks waiting" in error["message"]


async def test_new_work_is_refused_before_the_body_is_validated(
    store_root: Path, autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="taskplane.http")
    async with closed_admission(store_root) as closed:
        before = await journal(closed.plane)
        closed.log.statements.clear()
        response = await closed.client.post("/message:send", json=send_body("new", "m-new"))
        assert_overloaded(response)
        # The app would answer this one 400 (a negative historyLength): it never saw it.
        # (It used an unknown field, ignored since issue 17.)
        odd = send_body(
            "odd", "m-odd", configuration={"returnImmediately": True, "historyLength": -1}
        )
        assert_overloaded(await closed.client.post("/message:send", json=odd))
        # The streaming send and a tenant route are refused the same way.
        for path in ("/message:stream", "/acme/message:send"):
            assert_overloaded(await closed.client.post(path, json=send_body(path, f"m-{path}")))
        assert closed.log.statements == []  # the store never saw any of them
        assert await journal(closed.plane) == before
        lines = [r for r in caplog.records if getattr(r, "event", None) == "http_request"]
        assert [(r.route, r.status, r.reason, r.principal) for r in lines][:2] == [
            ("/message:send", 503, "UNAVAILABLE", "alpha")
        ] * 2


async def test_a_duplicate_of_accepted_work_gets_its_prior_answer(
    store_root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with closed_admission(store_root) as closed:
        response = await closed.client.post("/message:send", json=send_body("w 5", "m-w5"))
        assert response.status_code == 200, response.text
        assert response.json()["task"]["id"] == closed.waiting[5]
        # The same messageId with another payload is still the app's 409.
        other = await closed.client.post("/message:send", json=send_body("changed", "m-w6"))
        assert other.status_code == 409, other.text
        # Another principal's send with that messageId is new work for it: refused.
        async with in_process_client(closed.app, BETA_TOKEN) as beta:
            assert_overloaded(await beta.post("/message:send", json=send_body("w 5", "m-w5")))


async def test_a_direct_reply_is_still_answered(
    store_root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with closed_admission(store_root, PingAgent) as closed:
        response = await closed.client.post("/message:send", json=send_body("ping", "m-ping"))
        assert response.status_code == 200, response.text
        assert response.json()["message"]["parts"][0]["text"] == "pong"


async def test_a_request_that_is_not_a_readable_send_gets_the_apps_answer(
    store_root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with closed_admission(store_root) as closed:
        client = closed.client
        body = send_body("new", "m-new")
        transport = httpx.ASGITransport(app=closed.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as anonymous:
            unauthenticated = await anonymous.post("/message:send", json=body)
        assert unauthenticated.status_code == 401
        bad_token = await client.post("/message:send", json=body, headers=auth("nope"))
        assert bad_token.status_code == 401
        malformed = await client.post(
            "/message:send", content=b"{not json", headers={"Content-Type": "application/json"}
        )
        assert malformed.status_code == 400
        assert malformed.json()["error"]["status"] == "INVALID_ARGUMENT"
        no_message = await client.post("/message:send", json={"configuration": {}})
        assert no_message.status_code == 400
        # Reads are never refused early.
        assert (await client.get(f"/tasks/{closed.waiting[0]}")).status_code == 200


async def test_a_refused_send_is_accepted_once_admission_reopens(
    store_root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with closed_admission(store_root) as closed:
        body = send_body("later", "m-later")
        assert_overloaded(await closed.client.post("/message:send", json=body))
        closed.agent.open("hold")
        await closed.agent.wait_turns(1 + 128, ended=True)
        assert not closed.plane.admission.statistics().closed
        again = await closed.client.post("/message:send", json=body)
        assert again.status_code == 200, again.text
        assert again.json()["task"]["status"]["state"] in (
            "TASK_STATE_SUBMITTED",
            "TASK_STATE_WORKING",
            "TASK_STATE_COMPLETED",
        )


@asynccontextmanager
async def full_queue(
    store_root: Path, agent_factory: Callable[[], Agent] = Agent, *, compat03: bool = False
) -> AsyncIterator[Closed]:
    """The wake queue full (a held turn plus 128 waiting Tasks), no sender waiting."""
    agent, log = agent_factory(), StatementLog()
    async with open_test_plane(
        store_root, options(agent, connection_factory=faulty_connection(log))
    ) as plane:
        await quiesce()
        app = make_app(plane, compat03=compat03)
        async with in_process_client(app) as client:
            _holder, waiting = await fill(plane, agent)
            reading = plane.admission.statistics()
            assert reading.queue_full and not reading.closed
            assert not plane.admission.crowded  # no sender waits in intake: the edge stays out
            log.statements.clear()
            yield Closed(plane, agent, client, log, app, waiting)
            agent.open("hold")


async def test_with_admission_closed_new_work_is_refused_at_a_bounded_rate(
    store_root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """Concurrent sends of new work wait their turn (arrival order) and are refused
    one at a time, at most REFUSALS_PER_S a second, without a store statement."""
    async with closed_admission(store_root) as closed:
        answered: list[tuple[int, float]] = []
        started = trio.current_time()

        async def one(n: int) -> None:
            response = await closed.client.post("/message:send", json=send_body("n", f"m-{n}"))
            assert_overloaded(response)
            answered.append((n, trio.current_time() - started))

        async with trio.open_nursery() as nursery:
            for n in range(5):
                nursery.start_soon(one, n)
                await trio.testing.wait_all_tasks_blocked()
        interval = 1 / REFUSALS_PER_S
        assert [n for n, _ in answered] == list(range(5))  # arrival order
        assert [t for _, t in answered] == pytest.approx([k * interval for k in range(5)])
        assert closed.log.statements == []


async def test_with_the_queue_full_a_send_waits_for_a_slot_and_is_accepted(
    store_root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """Queue full, no sender waiting in intake: a send of new work first in line at
    the edge waits (parked) for a slot instead of being refused, and is accepted when
    the agent frees one."""
    async with full_queue(store_root) as closed:
        got: list[httpx.Response] = []

        async def waiting_send() -> None:
            got.append(await closed.client.post("/message:send", json=send_body("b", "m-b")))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiting_send)
            await trio.testing.wait_all_tasks_blocked()
            # it waits for a slot
            assert got == [] and closed.plane.admission.statistics().queue_full
            closed.agent.open("hold")  # the held turn ends: slots free
        (response,) = got
        assert response.status_code == 200, response.text
        assert response.json()["task"]["status"]["state"] in (
            "TASK_STATE_SUBMITTED",
            "TASK_STATE_WORKING",
            "TASK_STATE_COMPLETED",
        )


async def test_sends_whose_bodies_pass_the_parked_bound_are_refused_at_once(
    store_root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """Waiting sends hold at most MAX_PARKED_BYTES of bodies; a send whose body would
    pass that is refused at once, unpaced, and the parked ones still get their turn."""
    async with closed_admission(store_root) as closed:
        answered: dict[int, float] = {}
        started = trio.current_time()
        pad = "x" * (512 * 1024)
        fits = MAX_PARKED_BYTES // (len(pad) + 200)

        async def one(n: int) -> None:
            body = send_body("n", f"m-{n}", metadata={"pad": pad})
            response = await closed.client.post("/message:send", json=body)
            assert_overloaded(response)
            answered[n] = trio.current_time() - started

        total = fits + 4  # the first refused at once, one holding the lane, the rest wait
        async with trio.open_nursery() as nursery:
            for n in range(total):
                nursery.start_soon(one, n)
                await trio.testing.wait_all_tasks_blocked()
            assert answered.get(total - 1) == 0  # over the bound: refused at once
        assert len(answered) == total
        assert closed.log.statements == []


class TriageLog(PingAgent):
    """:class:`PingAgent` that records the messageId of every ``triage`` call."""

    def __init__(self) -> None:
        super().__init__()
        self.triaged: list[str] = []

    def triage(self, message: A2AMessage) -> Sequence[Part] | None:
        self.triaged.append(message.message_id)
        return super().triage(message)


async def test_a_send_the_edge_lets_through_is_triaged_once(
    store_root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """One Message-versus-Task decision per send: the edge's verdict is carried to the
    plane, which does not triage the same send again."""
    async with closed_admission(store_root, TriageLog) as closed:
        agent = closed.agent
        assert isinstance(agent, TriageLog)
        agent.triaged.clear()  # the sends that filled the queue were triaged
        ping = await closed.client.post("/message:send", json=send_body("ping", "m-ping"))
        assert ping.json()["message"]["parts"][0]["text"] == "pong"
        duplicate = await closed.client.post("/message:send", json=send_body("w 5", "m-w5"))
        assert duplicate.json()["task"]["id"] == closed.waiting[5]
        assert_overloaded(await closed.client.post("/message:send", json=send_body("n", "m-n")))
        assert agent.triaged == ["m-ping", "m-w5", "m-n"]


async def test_a_send_that_waits_at_the_edge_then_is_accepted_is_triaged_once(
    store_root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """Crowded, not closed: a send of new work waits at the edge, gets a slot when the
    agent frees some, and is accepted; it was triaged once (before: at the edge, again
    after its wait, and in the plane)."""
    async with full_queue(store_root, TriageLog) as crowded:
        agent = crowded.agent
        assert isinstance(agent, TriageLog)
        got: list[httpx.Response] = []

        async def waiter(n: int) -> None:
            await send(crowded.plane, f"wait {n}", f"m-wait{n}")

        async def edge_send() -> None:
            got.append(await crowded.client.post("/message:send", json=send_body("b", "m-b")))

        async with trio.open_nursery() as nursery:
            for n in range(CROWDED_WAITERS):
                nursery.start_soon(waiter, n)
            await trio.testing.wait_all_tasks_blocked()
            reading = crowded.plane.admission.statistics()
            assert reading.crowded and not reading.closed
            nursery.start_soon(edge_send)
            await trio.testing.wait_all_tasks_blocked()
            # first in line at the edge, it waits for room beside the intake waiters
            assert got == [] and crowded.plane.admission.statistics().waiters == CROWDED_WAITERS + 1
            agent.open("hold")  # slots free: the intake waiters, then the edge's send
        (response,) = got
        assert response.status_code == 200, response.text
        assert agent.triaged.count("m-b") == 1


async def test_with_admission_closed_a_body_that_stops_arriving_is_408_at_the_limit(
    store_root: Path, autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The edge reads a send's body itself while admission is closed: a body that stops
    arriving gets ``408 REQUEST_TIMEOUT`` after ``TASKPLANE_BODY_TIMEOUT_S`` (the
    connection closed), counted and logged, and nothing reaches the store."""
    caplog.set_level(logging.INFO, logger="taskplane.http")
    async with closed_admission(store_root) as closed:
        headers = {
            "Host": "x",
            "Authorization": "Bearer " + BETA_TOKEN,
            "Content-Type": "application/json",
            "Content-Length": "500",
        }
        first = {"type": "http.request", "body": b'{"message": {"mess', "more_body": True}
        started = trio.current_time()
        sent = await call(closed.app, http_scope("POST", "/message:send", headers), [first])
        elapsed = trio.current_time() - started
        start = sent_start(sent)
        assert start["status"] == 408
        assert DEFAULT_BODY_TIMEOUT_S <= elapsed < DEFAULT_BODY_TIMEOUT_S + 1
        assert sent_headers(start)["connection"] == "close"
        error = json.loads(sent_body(sent))["error"]
        assert error["details"][0]["reason"] == "REQUEST_TIMEOUT"
        assert closed.log.statements == []
        (line,) = [r for r in events(caplog, "http_request") if r.status == 408]
        assert line.reason == "REQUEST_TIMEOUT"


async def test_a_json_rpc_send_is_refused_like_an_http_json_send(
    store_root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with closed_admission(store_root) as closed:
        before = await journal(closed.plane)
        closed.log.statements.clear()
        for method in ("SendMessage", "SendStreamingMessage"):
            envelope = {
                "jsonrpc": "2.0",
                "id": f"r-{method}",
                "method": method,
                "params": {**send_body("new", f"m-rpc-{method}"), "tenant": "acme"},
            }
            response = await closed.client.post("/", json=envelope)
            assert response.status_code == 503, response.text
            assert response.headers["Retry-After"] == "1"
            body = response.json()
            assert body["id"] == f"r-{method}" and body["jsonrpc"] == "2.0"
            assert body["error"]["data"][0]["reason"] == "UNAVAILABLE"
        assert closed.log.statements == []  # the store never saw either
        assert await journal(closed.plane) == before
        # Another method goes to the app, its body replayed.
        listing = {"jsonrpc": "2.0", "id": 9, "method": "ListTasks", "params": {}}
        listed = await closed.client.post("/", json=listing)
        assert listed.status_code == 200 and "tasks" in listed.json()["result"], listed.text
        # A duplicate of accepted work sent over JSON-RPC gets its prior answer.
        duplicate = {
            "jsonrpc": "2.0",
            "id": 10,
            "method": "SendMessage",
            "params": send_body("w 5", "m-w5"),
        }
        replay = await closed.client.post("/", json=duplicate)
        assert replay.json()["result"]["task"]["id"] == closed.waiting[5], replay.text


def send_params_03(text: str, message_id: str) -> dict[str, Any]:
    """``message/send`` params in A2A 0.3 shapes."""
    message = {
        "kind": "message",
        "messageId": message_id,
        "role": "user",
        "parts": [{"kind": "text", "text": text}],
    }
    return {"message": message, "configuration": {"blocking": False}}


async def test_a_json_rpc_0_3_send_is_refused_like_a_1_0_send(
    store_root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with closed_admission(store_root, compat03=True) as closed:
        before = await journal(closed.plane)
        closed.log.statements.clear()
        v03 = {"A2A-Version": "0.3"}
        # The app would answer these 400 (a negative historyLength): it never sees them.
        for method, version in (("message/send", ""), ("message/stream", "0.3")):
            envelope = {
                "jsonrpc": "2.0",
                "id": f"r-{method}",
                "method": method,
                "params": {
                    "message": send_params_03("new", f"m-03-{method}")["message"],
                    "configuration": {"blocking": False, "historyLength": -1},
                    "tenant": "acme",
                },
            }
            headers = {"A2A-Version": version}  # absent or empty is 0.3 too (§3.6.2)
            response = await closed.client.post("/", json=envelope, headers=headers)
            assert response.status_code == 503, response.text
            assert response.headers["Retry-After"] == "1"
            body = response.json()
            assert body["id"] == f"r-{method}" and body["jsonrpc"] == "2.0"
            assert body["error"]["data"][0]["reason"] == "UNAVAILABLE"
        assert closed.log.statements == []  # the store never saw either
        assert await journal(closed.plane) == before
        # A 0.3 duplicate of accepted work gets its prior answer, in 0.3 shape.
        duplicate = {
            "jsonrpc": "2.0",
            "id": 11,
            "method": "message/send",
            "params": send_params_03("w 5", "m-w5"),
        }
        replay = await closed.client.post("/", json=duplicate, headers=v03)
        result = replay.json()["result"]
        assert result["kind"] == "task" and result["id"] == closed.waiting[5], replay.text
        # A call served as 1.0 naming a 0.3 method gets the app's answer.
        named = {**duplicate, "id": 12, "params": send_params_03("new", "m-03-v1")}
        refused = await closed.client.post("/", json=named, headers={"A2A-Version": "1.0"})
        assert refused.json()["error"]["code"] == -32601, refused.text
        # So does a 0.3 send the translation refuses (a part of no known kind).
        broken = send_params_03("new", "m-03-broken")
        broken["message"]["parts"] = [{"kind": "video"}]
        bad = {"jsonrpc": "2.0", "id": 13, "method": "message/send", "params": broken}
        invalid = await closed.client.post("/", json=bad, headers=v03)
        assert invalid.status_code != 503 and "error" in invalid.json(), invalid.text


async def test_without_the_0_3_setting_a_0_3_send_gets_the_apps_answer(
    store_root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with closed_admission(store_root) as closed:
        envelope = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "message/send",
            "params": send_params_03("new", "m-03-off"),
        }
        response = await closed.client.post("/", json=envelope, headers={"A2A-Version": ""})
        assert response.json()["error"]["code"] == -32601, response.text
        assert response.status_code != 503


async def test_a_0_3_http_json_send_is_refused_like_a_1_0_send(
    store_root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with closed_admission(store_root, compat03=True) as closed:
        before = await journal(closed.plane)
        closed.log.statements.clear()
        message = {"messageId": "m-r03", "role": "ROLE_USER", "content": [{"text": "new"}]}
        # The app would answer these 400 (a negative historyLength): it never sees them.
        body = {"message": message, "configuration": {"blocking": False, "historyLength": -1}}
        for path, version in (("/v1/message:send", ""), ("/v1/message:stream", "0.3")):
            response = await closed.client.post(path, json=body, headers={"A2A-Version": version})
            assert_overloaded(response)
        assert closed.log.statements == []
        assert await journal(closed.plane) == before
        # A body the 0.3 translation refuses gets the app's answer.
        broken = {"message": {**message, "content": [{"video": {}}]}}
        invalid = await closed.client.post(
            "/v1/message:send", json=broken, headers={"A2A-Version": "0.3"}
        )
        assert invalid.status_code == 400, invalid.text


async def test_a_json_rpc_send_the_app_refuses_is_not_refused_early(
    store_root: Path, autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    # The early refusal reads a body with the app's rules: a body nested too deeply and a
    # reserved tenant are the app's JSON-RPC errors, never a 503 or a traceback.
    async with closed_admission(store_root) as closed:
        nested = "[" * 100_000 + "]" * 100_000
        deep = (
            '{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"role":'
            '"ROLE_USER","messageId":"m-deep","parts":[{"text":"x"}],"metadata":{"a":'
            + nested
            + "}}}}"
        )
        headers = {"Content-Type": "application/json"}
        response = await closed.client.post("/", content=deep, headers=headers)
        assert response.status_code == 200, response.text
        assert response.json()["error"]["code"] == -32600
        params = {**send_body("reserved", "m-rsv"), "tenant": "tasks"}
        envelope = {"jsonrpc": "2.0", "id": 2, "method": "SendMessage", "params": params}
        reserved = await closed.client.post("/", json=envelope)
        assert reserved.status_code == 200, reserved.text
        assert reserved.json()["error"]["code"] == -32602
        assert not [r for r in caplog.records if r.exc_info]


async def test_sends_parked_while_admission_is_open_are_answered_within_their_bound(
    store_root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """docs/conformance.md row 9: while the plane is crowded but admission not closed,
    each send first in line at the edge may wait ADMISSION_WAIT_S for a slot, so the
    n-th parked send is answered within n x ADMISSION_WAIT_S (and no sooner than the
    one before it: the line is judged one send at a time)."""
    async with full_queue(store_root) as full:

        async def waiter(n: int) -> None:
            with contextlib.suppress(Overloaded):
                await send(full.plane, f"wait {n}", f"m-wait{n}")

        answered: list[tuple[int, int, float]] = []
        started = trio.current_time()

        async def parked(n: int) -> None:
            response = await full.client.post("/message:send", json=send_body("p", f"m-p{n}"))
            answered.append((n, response.status_code, trio.current_time() - started))

        async with trio.open_nursery() as nursery:
            for n in range(CROWDED_WAITERS):
                nursery.start_soon(waiter, n)
            await trio.testing.wait_all_tasks_blocked()
            reading = full.plane.admission.statistics()
            assert reading.crowded and not reading.closed
            for n in range(4):  # parked at the edge in this order
                nursery.start_soon(parked, n)
                await trio.testing.wait_all_tasks_blocked()
        assert [(n, status) for n, status, _ in answered] == [(n, 503) for n in range(4)]
        for n, _status, at in answered:
            assert n * ADMISSION_WAIT_S < at <= (n + 1) * ADMISSION_WAIT_S + 0.1, answered
