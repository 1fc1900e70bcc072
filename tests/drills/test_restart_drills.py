"""Restart drills on the real actor tree (STYLE SUP-4), in virtual time.

Each actor kind (``store``, ``intake``, ``wake``, ``owner``) is crashed on purpose
through ``PlaneOptions.crash_hook`` (:class:`tests.support.crash.CrashButton`: armed
for N crashes, it raises ``RuntimeError("drill")`` from the actor's loop) while
requests flow: concurrent blocking and ``returnImmediately`` sends over the HTTP
binding (in process) and a subscriber. The drills then check:

- every send answered 2xx is readable with its content, and every send is settled in
  the end (no acknowledged acceptance, nor its wake, is lost); a send answered 503 is
  retried with its messageId and yields exactly one Task;
- exactly one ``WOKEN`` record per woken activation, and the runtime never saw two
  overlapping turns;
- the subscriber ends cleanly (possibly without a terminal frame, when its owner
  crashed) or sees the Task through;
- restarts are bounded and each crash is reported once (``actor_crashed``);
- more crashes than ``ACTOR_POLICY.max_restarts`` within its period escalate:
  ``open_plane`` raises ``RestartIntensityExceeded``; an owner past
  ``OWNER_POLICY`` is dropped (``owner_abandoned``) while the plane keeps running;
- callers of a crashed actor get ``ActorGone`` (503 over HTTP) at once.

The plane runs with SQLite on the trio thread under ``autojump_clock``; the test
runtime is ``tests.support.agent.Agent``.
"""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import trio.testing

from taskplane.actors.owner import TaskOwner
from taskplane.actors.registry import OWNER_POLICY
from taskplane.app import ACTOR_POLICY
from taskplane.errors import ActorGone
from taskplane.supervision import RestartIntensityExceeded
from tests.support.agent import Agent
from tests.support.crash import CrashButton
from tests.support.plane import in_process_client, make_app, open_test_plane, send_body
from tests.support.virtual import (
    ALICE,
    COMPLETED,
    INPUT_REQUIRED,
    SUBMITTED,
    events,
    journal,
    options,
    quiesce,
    send,
    settle,
    state_of,
    task_id_of,
)

KINDS = ["store", "intake", "wake", "owner"]
CRASHES = 4
"""Crashes per drill: under ``ACTOR_POLICY.max_restarts`` (5 per 10 s)."""


@pytest.fixture(autouse=True)
def _info_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)


def crashes_of(caplog: pytest.LogCaptureFixture, kind: str) -> list[logging.LogRecord]:
    return [
        r
        for r in events(caplog, "actor_crashed")
        if r.actor == kind or r.actor.startswith(f"{kind}:")  # type: ignore[attr-defined]
    ]


async def post_send(
    client: httpx.AsyncClient, text: str, message_id: str, *, immediate: bool
) -> httpx.Response:
    body = send_body(text, message_id, configuration={"returnImmediately": immediate})
    with trio.fail_after(30):  # a caller never hangs
        return await client.post("/message:send", json=body)


# --- the drill --------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
async def test_crashes_under_load_lose_no_acknowledged_acceptance(
    kind: str,
    store_root: Path,
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    button, agent = CrashButton(), Agent()
    answers: dict[str, httpx.Response] = {}
    texts: dict[str, str] = {}
    watched_frames: list[Any] = []
    watch_end: list[str] = []
    sends = 24

    async def client_send(client: httpx.AsyncClient, n: int) -> None:
        await trio.sleep(n * 0.002)  # staggered, so crashes fall between acceptances
        message_id = f"m-{n}"
        texts[message_id] = text = f"block:late {n}" if n % 3 == 0 else f"work {n}"
        answers[message_id] = await post_send(client, text, message_id, immediate=n % 2 == 0)

    async def watch(frames: trio.MemoryReceiveChannel[Any]) -> None:
        with trio.fail_after(120):
            async with frames:
                async for frame in frames:
                    watched_frames.append(frame)
        watch_end.append("closed")

    plane_options = options(agent, crash_hook=button)
    async with (
        open_test_plane(store_root, plane_options) as plane,
        in_process_client(make_app(plane)) as client,
    ):
        watched = task_id_of(await send(plane, "block:watched", "m-watched"))
        await agent.wait_turns(1)
        frames = await plane.subscribe(ALICE, watched)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch, frames)
            for n in range(sends):
                nursery.start_soon(client_send, client, n)
            for _ in range(CRASHES):  # one crash every 11 ms while requests flow
                button.arm(kind)
                await trio.sleep(0.011)
            await trio.sleep(0.05)
            agent.open("watched")
            for n in range(0, sends, 3):
                agent.open(f"late {n}")
        await quiesce(30)
        button.disarm()
        fired = button.fired[kind]
        assert fired >= 1, f"the {kind} drill crashed nothing"

        # Every acknowledged send is readable with its content.
        acknowledged = {m: r for m, r in answers.items() if r.status_code == 200}
        refused = {m: r for m, r in answers.items() if r.status_code != 200}
        assert all(r.status_code == 503 for r in refused.values()), {
            m: (r.status_code, r.text) for m, r in refused.items()
        }
        assert all(r.json()["error"]["status"] == "UNAVAILABLE" for r in refused.values())
        task_ids: dict[str, str] = {}
        for message_id, response in acknowledged.items():
            task = response.json()["task"]
            task_ids[message_id] = task["id"]
            read = await client.get(f"/tasks/{task['id']}")
            assert read.status_code == 200, read.text
            first = read.json()["history"][0]
            assert first["messageId"] == message_id
            assert first["parts"] == [{"text": texts[message_id]}]
        # A 503 is an unknown outcome: the retry returns the one Task, or makes it.
        for message_id in refused:
            retried = await post_send(client, texts[message_id], message_id, immediate=True)
            assert retried.status_code == 200, retried.text
            task_ids[message_id] = retried.json()["task"]["id"]
            again = await post_send(client, texts[message_id], message_id, immediate=True)
            assert again.json()["task"]["id"] == task_ids[message_id]

        # Nothing is stranded: every Task settles (its wake survived the crashes).
        for message_id, task_id in task_ids.items():
            settled = await settle(plane, task_id)
            assert settled.status.state is COMPLETED, (message_id, settled.status)
        assert await state_of(plane, watched) is COMPLETED
        listed = await client.get("/tasks", params={"pageSize": 100})
        assert listed.json()["totalSize"] == sends + 1  # one Task per messageId
        assert len(set(task_ids.values())) == sends

        # Exactly one WOKEN per woken activation; never two turns at once.
        rows = await journal(plane)
        woken = Counter(a for k, a, _ in rows if k == "WOKEN")
        accepted = {a for k, a, _ in rows if k == "ACCEPTED"}
        assert set(woken) == accepted
        assert set(woken.values()) == {1}
        assert agent.violations == []
        assert {t.task_id for t in agent.turns} == {watched, *task_ids.values()}

        # The subscriber ended cleanly: at the terminal frame, or cut off by a crash of
        # its owner (then a new subscription shows the settled Task).
        assert watch_end == ["closed"]
        states = [
            f.status_update.status.state for f in watched_frames if f.status_update is not None
        ]
        if kind != "owner":
            assert states[-1] is COMPLETED
        elif not states or states[-1] is not COMPLETED:
            assert (await settle(plane, watched)).status.state is COMPLETED

        # Bounded restarts, each crash reported once.
        crashed = crashes_of(caplog, kind)
        assert len(crashed) == fired
        assert all(r.escalated is False for r in crashed)  # type: ignore[attr-defined]
        assert events(caplog, "actor_escalated") == []


# --- escalation -------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["store", "intake", "wake"])
async def test_crashes_past_the_intensity_escalate_out_of_open_plane(
    kind: str,
    store_root: Path,
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    button, agent = CrashButton(), Agent()
    crashes = ACTOR_POLICY.max_restarts + 1

    async def traffic(plane: Any) -> None:
        for n in range(3 * crashes):
            try:
                with trio.fail_after(5):
                    await send(plane, f"work {n}", f"m-{n}")
            except ActorGone:
                pass

    with pytest.RaisesGroup(RestartIntensityExceeded, allow_unwrapped=True, flatten_subgroups=True):
        async with open_test_plane(store_root, options(agent, crash_hook=button)) as plane:
            button.arm(kind, crashes)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(traffic, plane)
            # The escalation cancels this body; it never gets this far in time.
            await trio.sleep(10 * ACTOR_POLICY.period_s)
    assert button.fired[kind] == crashes
    assert len(crashes_of(caplog, kind)) == crashes
    (escalated,) = events(caplog, "actor_escalated")
    assert escalated.actor == kind  # type: ignore[attr-defined]
    assert trio.current_time() < ACTOR_POLICY.period_s  # all within one window


async def test_crashes_spaced_wider_than_the_period_never_escalate(
    store_root: Path,
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    button, agent = CrashButton(), Agent()
    async with open_test_plane(store_root, options(agent, crash_hook=button)) as plane:
        for n in range(2 * (ACTOR_POLICY.max_restarts + 1)):
            button.arm("wake")
            task_id = task_id_of(await send(plane, f"work {n}", f"m-{n}"))
            assert (await settle(plane, task_id)).status.state is COMPLETED
            await trio.sleep(ACTOR_POLICY.period_s + 1)
    assert button.fired["wake"] == 2 * (ACTOR_POLICY.max_restarts + 1)
    assert events(caplog, "actor_escalated") == []


async def test_an_owner_past_its_intensity_is_dropped_and_the_plane_keeps_running(
    store_root: Path,
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    button, agent = CrashButton(), Agent()
    async with open_test_plane(store_root, options(agent, crash_hook=button)) as plane:
        waiting = task_id_of(await send(plane, "ask:colour?", "m-1"))
        assert (await settle(plane, waiting)).status.state is INPUT_REQUIRED
        await quiesce()  # the turn's own last request to owner(T) is answered too
        button.arm("owner", OWNER_POLICY.max_restarts + 1)
        for _ in range(OWNER_POLICY.max_restarts + 1):
            with trio.fail_after(1), pytest.raises(ActorGone):
                await plane.subscribe(ALICE, waiting)
        await quiesce()
        (abandoned,) = events(caplog, "owner_abandoned")
        assert abandoned.taskId == waiting  # type: ignore[attr-defined]
        assert len(crashes_of(caplog, "owner")) == OWNER_POLICY.max_restarts + 1
        assert events(caplog, "actor_escalated")  # the owner's supervisor gave up...

        # ... but only that owner: the plane serves on, and owner(T) starts afresh.
        assert await state_of(plane, waiting) is INPUT_REQUIRED
        answer = await send(plane, "blue", "m-2", task_id=waiting)
        assert answer.disposition == "continued"
        assert (await settle(plane, waiting)).status.state is COMPLETED
        other = task_id_of(await send(plane, "other work", "m-3"))
        assert (await settle(plane, other)).status.state is COMPLETED


# --- callers of a crashed actor ---------------------------------------------------------


@pytest.mark.parametrize("kind", ["store", "intake", "owner"])
async def test_callers_of_a_crashed_actor_get_503_at_once(
    kind: str,
    store_root: Path,
    autojump_clock: trio.testing.MockClock,
) -> None:
    button, agent = CrashButton(), Agent()
    async with (
        open_test_plane(store_root, options(agent, crash_hook=button)) as plane,
        in_process_client(make_app(plane)) as client,
    ):
        waiting = task_id_of(await send(plane, "ask:colour?", "m-1"))
        await settle(plane, waiting)
        await quiesce()

        async def request() -> httpx.Response:
            if kind == "store":
                return await client.get(f"/tasks/{waiting}")
            if kind == "intake":
                return await client.post(
                    "/message:send",
                    json=send_body("hello", "m-2", configuration={"returnImmediately": True}),
                )
            return await client.post(f"/tasks/{waiting}:cancel")

        button.arm(kind)
        before = trio.current_time()
        with trio.fail_after(1):
            failed = await request()
        assert failed.status_code == 503, failed.text
        assert failed.json()["error"]["status"] == "UNAVAILABLE"
        assert trio.current_time() == before  # at once: not after some deadline
        assert button.fired[kind] == 1

        await quiesce(1)  # the supervisor restarted it
        with trio.fail_after(1):
            retried = await request()
        assert retried.status_code == 200, retried.text


async def test_a_crashed_wake_actor_offers_its_wake_again(
    store_root: Path,
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    button, agent = CrashButton(), Agent()
    async with open_test_plane(store_root, options(agent, crash_hook=button)) as plane:
        button.arm("wake", 3)
        accepted = await send(plane, "work", "m-1")
        task_id = task_id_of(accepted)
        assert (await settle(plane, task_id)).status.state is COMPLETED
        assert button.fired["wake"] == 3 and len(crashes_of(caplog, "wake")) == 3
        assert agent.order() == [task_id]
        rows = await journal(plane, task_id=task_id)
        assert [k for k, a, _ in rows if a == accepted.activation_id].count("WOKEN") == 1


# --- an intake crash with a continuation in flight ----------------------------------------


async def test_an_intake_crash_never_strands_an_accepted_continuation(
    store_root: Path, autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A continuation is held up in owner(T) (its commit is slow) when intake
    crashes: its caller gets 503, but the owner still commits it after intake has
    restarted (and replayed). Its wake must not be lost: the Task runs, and a retry of
    the same messageId returns the Task instead of leaving it SUBMITTED for good."""
    button, agent = CrashButton(), Agent()
    async with (
        open_test_plane(store_root, options(agent, crash_hook=button)) as plane,
        in_process_client(make_app(plane)) as client,
    ):
        waiting = task_id_of(await send(plane, "ask:colour?", "m-1"))
        assert (await settle(plane, waiting)).status.state is INPUT_REQUIRED
        await quiesce()

        slow = trio.Event()
        accept = TaskOwner.accept

        async def slow_accept(owner: TaskOwner, *args: Any, **kwargs: Any) -> Any:
            await slow.wait()  # owner(T) is busy (a slow commit, say)
            return await accept(owner, *args, **kwargs)

        monkeypatch.setattr(TaskOwner, "accept", slow_accept)
        async with trio.open_nursery() as nursery:
            await quiesce()
            answer: list[httpx.Response] = []

            async def continue_() -> None:
                answer.append(await post_send_continuation(client, waiting, "blue", "m-2"))

            nursery.start_soon(continue_)
            await quiesce()
            button.arm("intake")
            crash = await post_send(client, "unrelated", "m-3", immediate=True)
            assert crash.status_code == 503
            await quiesce(1)  # intake restarted and replayed its wakes
            slow.set()
        (continued,) = answer
        assert continued.status_code == 503  # an unknown outcome for that caller

        # The continuation was committed all the same; its Task must be woken.
        retried = await post_send_continuation(client, waiting, "blue", "m-2")
        assert retried.status_code == 200, retried.text
        assert retried.json()["task"]["id"] == waiting
        await quiesce(60)
        assert await state_of(plane, waiting) is not SUBMITTED, "the continuation's wake was lost"
        assert (await settle(plane, waiting)).status.state is COMPLETED


async def post_send_continuation(
    client: httpx.AsyncClient, task_id: str, text: str, message_id: str
) -> httpx.Response:
    body = send_body(text, message_id, taskId=task_id, configuration={"returnImmediately": True})
    with trio.fail_after(30):
        return await client.post("/message:send", json=body)
