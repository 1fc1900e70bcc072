"""Health, metrics and logs of a real ``taskplane serve`` process.

``/metrics`` is parsed with prometheus_client's text parser; the whole log of a full
run (a send, a duplicate, a 409, a stream, a subscription, a 401, shutdown) is
scanned for the bearer token and for message text.
"""

from __future__ import annotations

import signal
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from taskplane.http.metrics import Metrics, PlaneStatistics
from tests.e2e.taskplane_proc import RunningServer, Spawner
from tests.support.plane import send_body

pytestmark = pytest.mark.slow

SECRET_TEXT = "zebra-umbrella-7781"
"""Message text that must never reach the log."""


def _exercise(server: RunningServer) -> None:
    """One of everything: sends, a duplicate, a 409, a stream, a subscription, a 401."""
    headers = server.auth_headers()
    with httpx.Client(base_url=server.url, headers=headers, timeout=30.0) as client:
        done = client.post("/message:send", json=send_body(f"echo {SECRET_TEXT}", "ops-1"))
        assert done.status_code == 200, done.text
        again = client.post("/message:send", json=send_body(f"echo {SECRET_TEXT}", "ops-1"))
        assert again.status_code == 200, again.text
        clash = client.post("/message:send", json=send_body("something else", "ops-1"))
        assert clash.status_code == 409, clash.text
        asked = client.post("/message:send", json=send_body(f"ask: {SECRET_TEXT}?", "ops-2"))
        task_id = asked.json()["task"]["id"]
        with client.stream(
            "POST", "/message:stream", json=send_body(SECRET_TEXT, "ops-3", taskId=task_id)
        ) as stream:
            assert SECRET_TEXT in stream.read().decode()
        assert client.get(f"/tasks/{task_id}").status_code == 200
        assert client.get("/tasks", params={"pageSize": "1"}).status_code == 200
        wrong = client.get("/tasks", headers={"Authorization": "Bearer not-the-token"})
        assert wrong.status_code == 401


def _families(text: str) -> dict[str, Any]:
    return {family.name: family for family in text_string_to_metric_families(text)}


def _value(family: Any, suffix: str = "", **labels: str) -> float:
    total = 0.0
    for sample in family.samples:
        if sample.name == family.name + suffix and all(
            sample.labels.get(k) == v for k, v in labels.items()
        ):
            total += sample.value
    return total


def test_health_and_readiness_answer_without_a_token(spawn: Spawner) -> None:
    server = spawn.serve()
    assert httpx.get(server.url + "/healthz").json() == {"status": "ok"}
    ready = httpx.get(server.url + "/readyz")
    assert ready.status_code == 200, ready.text
    assert ready.json() == {"status": "ready", "reasons": []}


def test_metrics_parse_and_count_what_happened(spawn: Spawner) -> None:
    server = spawn.serve()
    _exercise(server)
    response = httpx.get(server.url + "/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    families = _families(response.text)
    requests = families["taskplane_http_requests"]
    assert _value(requests, "_total", route="/message:send", status="200") == 3
    assert _value(requests, "_total", route="/message:send", status="409") == 1
    assert _value(requests, "_total", route="/tasks", status="401") == 1
    assert _value(requests, "_total", route="/tasks/{id}", status="200") == 1
    assert _value(families["taskplane_http_conflicts"], "_total") == 1
    sends = families["taskplane_sends"]
    assert _value(sends, "_total", disposition="created") == 2
    assert _value(sends, "_total", disposition="duplicate") == 1
    assert _value(sends, "_total", disposition="continued") == 1
    assert _value(families["taskplane_tasks"], state="TASK_STATE_COMPLETED") == 2
    assert _value(families["taskplane_turn_duration_seconds"], "_count") >= 3
    assert _value(families["taskplane_turn_failures"], "_total") == 0
    assert _value(families["taskplane_store_commit_duration_seconds"], "_count") > 0
    assert _value(families["taskplane_sse_subscribers"]) == 0
    assert _value(families["taskplane_wake_queue_depth"]) == 0
    assert _value(families["taskplane_wake_queue_limit"]) > 0
    assert _value(families["taskplane_ready"]) == 1
    assert _value(families["taskplane_log_records_dropped"], "_total") == 0
    operations = _value(families["taskplane_store_operations"])
    assert operations >= _value(families["taskplane_store_transactions"]) > 0
    for name in ("taskplane_supervisor_restarts", "taskplane_deliveries", "taskplane_turn_running"):
        assert name in families


def _log_lines(server: RunningServer) -> list[dict[str, Any]]:
    return server.process.log_events()


def test_the_log_of_a_full_run_names_every_event_and_holds_no_token_or_text(
    spawn: Spawner,
) -> None:
    server = spawn.serve()
    _exercise(server)
    assert server.process.signal_and_wait(signal.SIGTERM) == 0, server.process.describe()
    everything = server.process.stdout() + server.process.stderr()
    assert server.token not in everything
    assert "not-the-token" not in everything
    assert SECRET_TEXT not in everything
    events = _log_lines(server)
    for line in events:
        assert line["event"], line
        if str(line["logger"]).startswith("taskplane"):
            assert line["event"] != str(line["logger"]).replace(".", "_"), line
    access = [e for e in events if e["event"] == "http_request"]
    statuses = {(e["method"], e["route"], e["status"]) for e in access}
    assert ("POST", "/message:send", 409) in statuses
    assert ("GET", "/tasks", 401) in statuses
    assert all(isinstance(e["durationMs"], float | int) for e in access)
    public = {"/.well-known/agent-card.json", "/healthz", "/readyz", "/metrics"}
    principals = {e["principal"] for e in access if e["status"] == 200 and e["route"] not in public}
    assert principals == {server.principal}
    assert all(e["principal"] is None for e in access if e["route"] in public)
    task_ids = {e["taskId"] for e in access if e["route"] == "/message:send" and e["taskId"]}
    assert len(task_ids) == 2
    changes = [e for e in events if e["event"] == "task_state_changed"]
    assert {"TASK_STATE_COMPLETED", "TASK_STATE_INPUT_REQUIRED"} <= {e["to"] for e in changes}
    assert any(e["event"] == "sse_stream_ended" for e in events)
    assert "a2a_server_stopped" in {e["event"] for e in events}  # written at exit


def test_debug_logs_more_than_info(spawn: Spawner) -> None:
    counts = {}
    for level in ("INFO", "DEBUG"):
        server = spawn.serve(extra_env={"TASKPLANE_LOG_LEVEL": level})
        _exercise(server)
        server.process.signal_and_wait(signal.SIGTERM)
        events = _log_lines(server)
        counts[level] = {e["event"] for e in events}
        assert server.token not in server.process.stderr()
        assert SECRET_TEXT not in server.process.stderr()
    assert "http_request_received" in counts["DEBUG"] - counts["INFO"]
    assert counts["INFO"] <= counts["DEBUG"]


def test_metrics_registries_are_per_app_not_global() -> None:
    first, second = Metrics(), Metrics()
    first.conflicts.inc()
    one = _families(first.render(PlaneStatistics()).decode())
    other = _families(second.render(PlaneStatistics()).decode())
    assert _value(one["taskplane_http_conflicts"], "_total") == 1
    assert _value(other["taskplane_http_conflicts"], "_total") == 0


def test_the_server_process_raises_the_young_gc_threshold_and_freezes_startup_objects(
    spawn: Spawner,
) -> None:
    server = spawn.serve(extra_env={"TASKPLANE_GC_GEN0": "20000"})
    assert server.process.signal_and_wait(signal.SIGTERM) == 0, server.process.describe()
    tuned = [e for e in _log_lines(server) if e["event"] == "gc_tuned"]
    assert len(tuned) == 1, tuned
    assert tuned[0]["thresholds"] == [20000, 50, 100]
    assert isinstance(tuned[0]["frozen"], int) and tuned[0]["frozen"] > 10_000


def test_gc_gen0_zero_keeps_cpythons_thresholds(spawn: Spawner) -> None:
    server = spawn.serve(extra_env={"TASKPLANE_GC_GEN0": "0"})
    assert server.process.signal_and_wait(signal.SIGTERM) == 0, server.process.describe()
    tuned = [e for e in _log_lines(server) if e["event"] == "gc_tuned"]
    assert [e["thresholds"] for e in tuned] == [[700, 10, 10]]
