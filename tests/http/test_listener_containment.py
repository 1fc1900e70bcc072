"""No connection can stop the server: a failure at any stage of a request is contained.

A real listener (:func:`taskplane.http.listener.serve_connections`) on 127.0.0.1
serves a small ASGI app. For each stage of a request (headers, body, response start,
body streaming, after the response), either the app or the protocol under it is made
to raise for one armed request; then a connection opened before the failure and a new
one are both served, and the listener task is still running. A protocol failure is
counted in ``taskplane_http_connection_failures_total`` and logged once with its
traceback.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from hypercorn.config import Config as HypercornConfig
from hypercorn.protocol.http_stream import HTTPStream

from taskplane.http.listener import ConnectionLimits, serve_connections
from taskplane.http.metrics import Metrics
from taskplane.http.protocols import HTTP11Only

pytestmark = pytest.mark.slow

DEADLINE_S = 10.0
STAGES = ("headers", "body", "response-start", "body-streaming", "after-response")


class Injected(RuntimeError):
    """The fault a test injects."""


@attrs.define
class Fault:
    """Which stage raises, once, when armed."""

    stage: str | None = None

    def hit(self, stage: str) -> None:
        if self.stage == stage:
            self.stage = None
            raise Injected(stage)


def faulty_app(fault: Fault) -> Callable[..., Any]:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        fault.hit("headers")
        while (await receive()).get("more_body", False):
            pass
        fault.hit("body")
        await send({"type": "http.response.start", "status": 200, "headers": []})
        fault.hit("response-start")
        await send({"type": "http.response.body", "body": b"o", "more_body": True})
        fault.hit("body-streaming")
        await send({"type": "http.response.body", "body": b"k", "more_body": False})
        fault.hit("after-response")

    return app


@attrs.frozen
class Served:
    port: int
    metrics: Metrics
    fault: Fault
    stopped: trio.Event


@pytest.fixture
async def served(nursery: trio.Nursery) -> AsyncIterator[Served]:
    fault = Fault()
    metrics = Metrics()
    listener = trio.socket.socket()
    await listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    port = listener.getsockname()[1]
    stop = trio.Event()
    stopped = trio.Event()
    config = HypercornConfig()
    config.accesslog = None
    config.graceful_timeout = 1.0
    config.keep_alive_timeout = 3600  # no idle close during a test

    async def run() -> None:
        try:
            await serve_connections(
                faulty_app(fault),
                config,
                listener,
                ConnectionLimits(total=64, per_client=64, header_timeout_s=5),
                metrics,
                shutdown_trigger=stop.wait,
            )
        finally:
            stopped.set()

    nursery.start_soon(run)
    await trio.testing.wait_all_tasks_blocked()
    yield Served(port, metrics, fault, stopped)
    stop.set()


REQUEST = b"POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\nhi"


async def _answer(stream: trio.SocketStream, request: bytes = REQUEST) -> bytes:
    """Send ``request``; its answer (a 2-byte chunked body), or what came before EOF."""
    await stream.send_all(request)
    data = b""
    while not data.endswith(b"0\r\n\r\n"):
        chunk = await stream.receive_some(65536)
        if not chunk:
            break
        data += chunk
    return data


def _failures(metrics: Metrics) -> float:
    total = 0.0
    for family in metrics.registry.collect():
        if family.name == "taskplane_http_connection_failures":
            total += sum(s.value for s in family.samples if s.name.endswith("_total"))
    return total


async def _check_still_serving(served: Served, before: trio.SocketStream) -> None:
    await trio.testing.wait_all_tasks_blocked()  # the failing exchange has run out
    assert served.fault.stage is None  # the fault fired
    again = await _answer(before)
    assert again.startswith(b"HTTP/1.1 200"), again
    async with await trio.open_tcp_stream("127.0.0.1", served.port) as fresh:
        assert (await _answer(fresh)).startswith(b"HTTP/1.1 200")
    assert not served.stopped.is_set()


@pytest.mark.parametrize("stage", STAGES)
async def test_an_app_that_raises_at_any_stage_stops_only_its_own_request(
    served: Served, stage: str, caplog: pytest.LogCaptureFixture
) -> None:
    with trio.fail_after(DEADLINE_S), caplog.at_level(logging.ERROR, logger="taskplane.http"):
        before = await trio.open_tcp_stream("127.0.0.1", served.port)
        async with before:
            assert (await _answer(before)).startswith(b"HTTP/1.1 200")
            await trio.testing.wait_all_tasks_blocked()  # its exchange is over
            served.fault.stage = stage
            async with await trio.open_tcp_stream("127.0.0.1", served.port) as failing:
                answer = await _answer(failing)
                await trio.testing.wait_all_tasks_blocked()  # the app has run to its end
                if stage in ("headers", "body"):
                    assert answer.startswith(b"HTTP/1.1 500")
                else:
                    assert answer.startswith(b"HTTP/1.1 200")
            await _check_still_serving(served, before)
    _assert_contained_once(served, caplog)


def _assert_contained_once(served: Served, caplog: pytest.LogCaptureFixture) -> None:
    """Counted once, logged once with the injected cause in its traceback."""
    assert _failures(served.metrics) == 1
    failed = [r for r in caplog.records if r.__dict__.get("event") == "http_connection_failed"]
    assert len(failed) == 1
    assert failed[0].exc_info is not None
    assert "Injected" in logging.Formatter().formatException(failed[0].exc_info)


def _raising_in(
    monkeypatch: pytest.MonkeyPatch, cls: type, name: str, fault: Fault, stage: str, when: type
) -> None:
    """Make ``cls.name(event)`` raise :class:`Injected` for events of type ``when``
    while ``fault`` is armed for ``stage``."""
    original = getattr(cls, name)

    async def wrapper(self: Any, event: Any, *args: Any) -> Any:
        if isinstance(event, when):
            fault.hit(stage)
        return await original(self, event, *args)

    monkeypatch.setattr(cls, name, wrapper)


@pytest.fixture
def faulty_protocol(served: Served, monkeypatch: pytest.MonkeyPatch) -> Served:
    """The protocol raises at the armed stage, instead of the app."""
    import h11
    from hypercorn.protocol import events as stream_events

    served.fault.stage = None
    _raising_in(monkeypatch, HTTP11Only, "_create_stream", served.fault, "headers", h11.Request)
    _raising_in(monkeypatch, HTTPStream, "handle", served.fault, "body", stream_events.Body)
    _raising_in(
        monkeypatch,
        HTTP11Only,
        "stream_send",
        served.fault,
        "response-start",
        stream_events.Response,
    )
    _raising_in(
        monkeypatch, HTTP11Only, "stream_send", served.fault, "body-streaming", stream_events.Body
    )
    _raising_in(
        monkeypatch,
        HTTP11Only,
        "stream_send",
        served.fault,
        "after-response",
        stream_events.StreamClosed,
    )
    return served


@pytest.mark.parametrize("stage", STAGES)
async def test_a_protocol_that_raises_at_any_stage_fails_only_its_own_connection(
    faulty_protocol: Served, stage: str, caplog: pytest.LogCaptureFixture
) -> None:
    served = faulty_protocol
    with trio.fail_after(DEADLINE_S), caplog.at_level(logging.ERROR, logger="taskplane.http"):
        before = await trio.open_tcp_stream("127.0.0.1", served.port)
        async with before:
            assert (await _answer(before)).startswith(b"HTTP/1.1 200")
            await trio.testing.wait_all_tasks_blocked()  # its exchange is over
            served.fault.stage = stage
            async with await trio.open_tcp_stream("127.0.0.1", served.port) as failing:
                await _answer(failing)  # an answer, a 500, or a close: never a hang
                await trio.testing.wait_all_tasks_blocked()
            await _check_still_serving(served, before)
    _assert_contained_once(served, caplog)
