"""Graceful shutdown of a real ``taskplane serve`` process.

A blocking send waiting at shutdown gets its Task's snapshot, an SSE stream ends with
a final frame, a running turn gets its deadline and is replayed at the next start,
and a second signal exits at once with a message.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from typing import Any

import httpx
import pytest

from taskplane.shutdown import TURN_SHUTDOWN_DEADLINE_S
from tests.e2e.taskplane_proc import RunningServer, Spawner
from tests.support.plane import send_body

pytestmark = pytest.mark.slow

DEADLINE_S = 20.0
POLL_S = 0.05


def _client(server: RunningServer) -> httpx.Client:
    return httpx.Client(base_url=server.url, headers=server.auth_headers(), timeout=DEADLINE_S)


def _wait_working(server: RunningServer) -> str:
    """The ID of the one Task, once its turn runs (polled, bounded)."""
    deadline = time.monotonic() + DEADLINE_S
    with _client(server) as client:
        while time.monotonic() < deadline:
            tasks = client.get("/tasks").json()["tasks"]
            if tasks and tasks[0]["status"]["state"] == "TASK_STATE_WORKING":
                return str(tasks[0]["id"])
            time.sleep(POLL_S)
    raise AssertionError(f"no Task started working\n{server.process.describe()}")


def _in_thread(target: Any) -> tuple[threading.Thread, dict[str, Any]]:
    result: dict[str, Any] = {}

    def run() -> None:
        try:
            result["value"] = target()
        except Exception as exc:  # reported by the test
            result["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, result


def test_a_blocking_send_waiting_at_shutdown_gets_the_task_snapshot(spawn: Spawner) -> None:
    server = spawn.serve()

    def blocking_send() -> httpx.Response:
        with _client(server) as client:
            return client.post("/message:send", json=send_body("sleep: 60000", "stop-1"))

    thread, result = _in_thread(blocking_send)
    task_id = _wait_working(server)
    started = time.monotonic()
    server.process.proc.send_signal(signal.SIGTERM)
    thread.join(DEADLINE_S)
    assert "value" in result, result
    response = result["value"]
    assert response.status_code == 200, response.text
    task = response.json()["task"]
    assert task["id"] == task_id
    assert task["status"]["state"] == "TASK_STATE_WORKING"
    assert time.monotonic() - started < TURN_SHUTDOWN_DEADLINE_S  # answered before the turn ends
    assert server.process.wait_exit(DEADLINE_S) == 0


def test_a_stream_open_at_shutdown_ends_with_a_final_frame(spawn: Spawner) -> None:
    server = spawn.serve()

    def stream() -> list[dict[str, Any]]:
        frames = []
        with (
            _client(server) as client,
            client.stream(
                "POST", "/message:stream", json=send_body("sleep: 60000", "stop-2")
            ) as response,
        ):
            for line in response.iter_lines():
                if line.startswith("data:"):
                    frames.append(json.loads(line[5:]))
        return frames

    thread, result = _in_thread(stream)
    _wait_working(server)
    server.process.proc.send_signal(signal.SIGTERM)
    thread.join(DEADLINE_S)
    frames = result.get("value")
    assert frames, result
    assert frames[-1]["error"]["status"] == "UNAVAILABLE"
    assert "shutting down" in frames[-1]["error"]["message"]
    assert server.process.wait_exit(DEADLINE_S) == 0


def test_a_running_turn_gets_its_deadline_then_is_replayed_at_the_next_start(
    spawn: Spawner,
) -> None:
    server = spawn.serve()
    with _client(server) as client:
        sent = client.post(
            "/message:send",
            json={
                **send_body("sleep: 60000", "stop-3"),
                "configuration": {"returnImmediately": True},
            },
        )
        assert sent.status_code == 200, sent.text
    _wait_working(server)
    started = time.monotonic()
    assert server.process.signal_and_wait(signal.SIGTERM, DEADLINE_S) == 0
    elapsed = time.monotonic() - started
    assert TURN_SHUTDOWN_DEADLINE_S <= elapsed < TURN_SHUTDOWN_DEADLINE_S + 8
    events = [e["event"] for e in server.process.log_events()]
    assert "turn_left_for_replay" in events
    again = spawn.serve(store=server.store)
    replayed = [e for e in again.process.log_events() if e["event"] == "wakes_replayed"]
    deadline = time.monotonic() + DEADLINE_S
    while not replayed and time.monotonic() < deadline:
        time.sleep(POLL_S)
        replayed = [e for e in again.process.log_events() if e["event"] == "wakes_replayed"]
    assert replayed and replayed[0]["count"] >= 1, again.process.describe()
    _wait_working(again)
    # Proven; a SIGTERM (the teardown's) would give the replayed turn its deadline
    # again, which the first half of this test measured already.
    again.process.signal_and_wait(signal.SIGKILL)


def test_a_second_signal_exits_at_once_with_a_message(spawn: Spawner) -> None:
    server = spawn.serve()
    with _client(server) as client:
        client.post(
            "/message:send",
            json={
                **send_body("sleep: 60000", "stop-4"),
                "configuration": {"returnImmediately": True},
            },
        )
    _wait_working(server)
    server.process.proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + DEADLINE_S
    while "shutdown_requested" not in server.process.stderr():
        assert time.monotonic() < deadline, server.process.describe()
        time.sleep(POLL_S)
    started = time.monotonic()
    code = server.process.signal_and_wait(signal.SIGTERM, DEADLINE_S)
    assert code == 128 + signal.SIGTERM, server.process.describe()
    assert time.monotonic() - started < TURN_SHUTDOWN_DEADLINE_S
    assert "received twice; exiting without waiting" in server.process.stderr()
    # The log lines queued when the second signal came are written before the exit.
    events = [e["event"] for e in server.process.log_events()]
    assert events[-1] == "shutdown_forced", server.process.describe()


def test_two_signals_at_once_still_leave_both_lines_in_the_log(spawn: Spawner) -> None:
    # A supervisor signalling the pid and its process group delivers two at once.
    server = spawn.serve()
    server.process.proc.send_signal(signal.SIGTERM)
    code = server.process.signal_and_wait(signal.SIGTERM, DEADLINE_S)
    assert code in (0, 128 + signal.SIGTERM), server.process.describe()
    events = [e["event"] for e in server.process.log_events()]
    assert "shutdown_requested" in events, server.process.describe()
    if code:
        assert events[-1] == "shutdown_forced", server.process.describe()
