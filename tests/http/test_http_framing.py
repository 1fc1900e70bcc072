"""HTTP/1.1 framing and the edge's own answers, without a socket.

RFC 9112 §6.1 (``Content-Length`` with ``Transfer-Encoding``: answer, then close),
RFC 9110 §5.3 (repeated ``A2A-Version`` lines are one comma-joined value), the body
deadline (408 in the A2A shape), the raw answers written before the app, the
descriptor budget, and the accept loop's backoff on descriptor exhaustion (one log
line per interval, with a count, never a traceback).
"""

from __future__ import annotations

import errno
import json
import logging
from typing import Any

import httpx
import pytest
import trio
import trio.testing
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio.worker_context import WorkerContext

from taskplane.errors import MethodNotImplemented, Overloaded, RequestTimeout
from taskplane.http.connection import CloseAmbiguousFraming, Message
from taskplane.http.deadlines import BodyDeadline
from taskplane.http.descriptors import RESERVED_DESCRIPTORS, connection_budget
from taskplane.http.errors import wire_identity
from taskplane.http.listener import (
    REPORT_INTERVAL_S,
    ConnectionLimits,
    ThrottledReport,
    _Accepting,
    _Instruments,
)
from taskplane.http.metrics import Metrics
from taskplane.http.raw_answers import raw_answer

# --- repeated A2A-Version lines ------------------------------------------------------


async def test_a2a_version_on_two_lines_is_judged_as_one_joined_value(
    client: httpx.AsyncClient,
) -> None:
    served = await client.get("/tasks", headers=[("A2A-Version", "1.0"), ("A2A-Version", "1.0")])
    assert served.status_code == 200
    refused = await client.get("/tasks", headers=[("A2A-Version", "1.0"), ("A2A-Version", "2.0")])
    assert refused.status_code == 400
    assert refused.json()["error"]["details"][0]["reason"] == "VERSION_NOT_SUPPORTED"


async def test_the_comma_joined_form_is_served_like_two_lines(client: httpx.AsyncClient) -> None:
    answer = await client.get("/tasks", headers={"A2A-Version": "1.0, 1.0"})
    assert answer.status_code == 200


# --- Content-Length with Transfer-Encoding ---------------------------------------------


async def _run_asgi(app: Any, scope: dict[str, Any], inbound: list[Message]) -> list[Message]:
    sent: list[Message] = []
    pending = list(inbound)

    async def receive() -> Message:
        if pending:
            return pending.pop(0)
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    async def send(message: Message) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent


async def _answer_ok(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [(b"x-a", b"1")]})
    await send({"type": "http.response.body", "body": b"ok", "more_body": False})


def _scope(headers: list[tuple[bytes, bytes]], version: str = "1.1") -> dict[str, Any]:
    return {
        "type": "http",
        "http_version": version,
        "method": "POST",
        "path": "/x",
        "headers": headers,
    }


async def test_content_length_with_transfer_encoding_is_answered_with_connection_close() -> None:
    both = [(b"content-length", b"5"), (b"transfer-encoding", b"chunked")]
    sent = await _run_asgi(CloseAmbiguousFraming(_answer_ok), _scope(both), [])
    assert sent[0]["status"] == 200
    assert (b"connection", b"close") in sent[0]["headers"]
    assert (b"x-a", b"1") in sent[0]["headers"]
    assert sent[1]["body"] == b"ok"


@pytest.mark.parametrize(
    "headers",
    [[(b"content-length", b"5")], [(b"transfer-encoding", b"chunked")], []],
)
async def test_a_request_framed_one_way_keeps_its_connection(
    headers: list[tuple[bytes, bytes]],
) -> None:
    sent = await _run_asgi(CloseAmbiguousFraming(_answer_ok), _scope(headers), [])
    assert all(name != b"connection" for name, _ in sent[0]["headers"])


# --- the body deadline -------------------------------------------------------------------


async def _read_body_then_answer(scope: Any, receive: Any, send: Any) -> None:
    while True:
        message = await receive()
        if not message.get("more_body", False):
            break
    await _answer_ok(scope, receive, send)


async def test_a_body_that_stops_arriving_is_answered_408_in_the_a2a_shape(
    autojump_clock: trio.testing.MockClock,
) -> None:
    metrics = Metrics()
    app = BodyDeadline(_read_body_then_answer, 5.0, metrics)
    start = trio.current_time()
    part = {"type": "http.request", "body": b"{", "more_body": True}
    sent = await _run_asgi(app, _scope([(b"content-length", b"10")]), [part])
    assert trio.current_time() - start == pytest.approx(5.0)
    assert sent[0]["status"] == 408
    assert (b"connection", b"close") in sent[0]["headers"]
    error = json.loads(sent[1]["body"])["error"]
    assert error["code"] == 408
    assert error["details"][0]["reason"] == "REQUEST_TIMEOUT"
    assert metrics.requests.labels("(unmatched)", "POST", "408")._value.get() == 1


async def test_a_body_that_arrives_in_time_is_served(
    autojump_clock: trio.testing.MockClock,
) -> None:
    app = BodyDeadline(_read_body_then_answer, 5.0, Metrics())
    parts = [
        {"type": "http.request", "body": b"{", "more_body": True},
        {"type": "http.request", "body": b"}", "more_body": False},
    ]
    sent = await _run_asgi(app, _scope([(b"content-length", b"2")]), parts)
    assert sent[0]["status"] == 200


# --- answers written before the app ---------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "status_line"),
    [
        (Overloaded("full", retry_after_s=1), b"HTTP/1.1 503 Service Unavailable"),
        (RequestTimeout("slow"), b"HTTP/1.1 408 Request Timeout"),
        (MethodNotImplemented("post"), b"HTTP/1.1 501 Not Implemented"),
    ],
)
def test_a_raw_answer_is_a_complete_a2a_error_response_that_closes(
    error: Any, status_line: bytes
) -> None:
    head, body = raw_answer(error).split(b"\r\n\r\n", 1)
    lines = head.split(b"\r\n")
    assert lines[0] == status_line
    assert b"connection: close" in lines
    assert f"content-length: {len(body)}".encode() in lines
    status = wire_identity(error).http_status
    assert json.loads(body)["error"]["code"] == status
    assert (b"retry-after: 1" in lines) == (status == 503)


# --- the descriptor budget ------------------------------------------------------------------


def test_the_connection_cap_is_lowered_to_the_descriptor_budget(
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert connection_budget(1024, 1 << 20) == 1024
    with caplog.at_level(logging.WARNING):
        assert connection_budget(1024, 256) == 256 - RESERVED_DESCRIPTORS
    assert [r.__dict__.get("event") for r in caplog.records] == ["connection_cap_lowered"]


# --- accept capacity errors -------------------------------------------------------------------


async def test_a_recurring_failure_is_reported_once_per_interval_with_its_count(
    autojump_clock: trio.testing.MockClock,
) -> None:
    lines: list[tuple[str, int]] = []
    report = ThrottledReport(lambda kind, seen: lines.append((kind, seen)))
    for _ in range(50):
        report.report("EMFILE")
        await trio.sleep(REPORT_INTERVAL_S / 20)
    await trio.sleep(REPORT_INTERVAL_S)
    report.report("EMFILE")
    assert lines == [("EMFILE", 1), ("EMFILE", 20), ("EMFILE", 20), ("EMFILE", 10)]


class _ExhaustedListener:
    """A listener whose ``accept`` fails with ``EMFILE`` ``failures`` times, then
    blocks forever."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0
        self.exhausted = trio.Event()

    async def accept(self) -> Any:
        await trio.lowlevel.checkpoint()
        self.calls += 1
        if self.calls <= self.failures:
            raise OSError(errno.EMFILE, "Too many open files")
        self.exhausted.set()
        await trio.sleep_forever()


async def test_emfile_on_accept_backs_off_and_is_logged_once_per_interval_without_traceback(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    metrics = Metrics()
    limits = ConnectionLimits(total=10, per_client=10, header_timeout_s=10)
    config = HypercornConfig()
    accepting = _Accepting(None, config, WorkerContext(None), {}, limits, _Instruments(metrics))
    listener = _ExhaustedListener(failures=100)
    start = trio.current_time()
    with caplog.at_level(logging.INFO, logger="taskplane.http"):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(accepting.loop, listener, nursery)
            await listener.exhausted.wait()
            nursery.cancel_scope.cancel()
    elapsed = trio.current_time() - start
    assert elapsed > 90  # backed off: at most ~1 retry a second, not a busy loop
    failed = [r for r in caplog.records if r.__dict__.get("event") == "http_accept_failed"]
    assert 1 < len(failed) <= elapsed / REPORT_INTERVAL_S + 1
    assert all(r.exc_info is None for r in failed)
    assert sum(r.__dict__["count"] for r in failed) <= 100
    counted = metrics.registry.get_sample_value(
        "taskplane_http_accept_errors_total", {"errno": "EMFILE"}
    )
    assert counted == 100


async def test_a2a_extensions_on_two_lines_are_one_joined_value(client: httpx.AsyncClient) -> None:
    from taskplane.extensions import ELICITATION_URI, OUTFITTER_TASK_URI

    two_lines = [("A2A-Extensions", ELICITATION_URI), ("A2A-Extensions", OUTFITTER_TASK_URI)]
    answer = await client.get("/tasks", headers=two_lines)
    assert answer.status_code == 200
    echoed = {uri.strip() for uri in answer.headers["A2A-Extensions"].split(",")}
    assert echoed == {ELICITATION_URI, OUTFITTER_TASK_URI}


# --- the soft descriptor limit ---------------------------------------------------------------


def test_the_soft_descriptor_limit_is_raised_to_the_hard_one_and_logged(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import resource

    from taskplane.http import descriptors

    limits = {"now": (1024, 4096)}
    monkeypatch.setattr(resource, "getrlimit", lambda which: limits["now"])
    monkeypatch.setattr(resource, "setrlimit", lambda which, value: limits.update(now=value))
    with caplog.at_level(logging.INFO):
        assert descriptors.raise_descriptor_limit() == 4096
    assert limits["now"] == (4096, 4096)
    raised = [r for r in caplog.records if r.__dict__.get("event") == "descriptor_limit_raised"]
    assert len(raised) == 1
    assert "1024" in raised[0].getMessage() and "4096" in raised[0].getMessage()
