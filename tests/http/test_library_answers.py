"""Answers the libraries used to produce are A2A answers (design rule "Every answer is
an A2A answer"): a request body that stops arriving is ``408 REQUEST_TIMEOUT`` after
``TASKPLANE_BODY_TIMEOUT_S`` (not Werkzeug's 400), a WebSocket handshake gets a §11.6 JSON
error (not Quart's 500 with an empty body), an unknown method gets the route's own
405 and ``Allow``, an unknown path a 404 whatever the method; each in the §11.6
shape, counted in ``/metrics`` and logged as an ``http_request`` line.

The app is driven through ASGI directly (a body that stops half-way and a WebSocket
scope cannot be sent through an HTTP client in process); virtual time.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx
import pytest
import trio
import trio.testing

from taskplane.settings import DEFAULT_BODY_TIMEOUT_S
from tests.support.asgi import call, http_scope, sent_body, sent_headers, sent_start, ws_scope
from tests.support.plane import ALPHA_TOKEN
from tests.support.virtual import events


def a2a_error(body: bytes, status: int, reason: str) -> dict[str, Any]:
    error: dict[str, Any] = json.loads(body)["error"]
    assert error["code"] == status
    assert error["details"][0]["reason"] == reason
    assert error["details"][0]["domain"] == "a2a-protocol.org"
    return error


async def counted(client: httpx.AsyncClient, route: str, method: str, status: int) -> bool:
    metrics = (await client.get("/metrics")).text
    line = f'taskplane_http_requests_total{{method="{method}",route="{route}",status="{status}"}}'
    return f"{line} 1.0" in metrics


async def test_a_body_that_stops_arriving_is_408_after_the_documented_limit(
    app: Any,
    client: httpx.AsyncClient,
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    headers = {
        "Host": "x",
        "Authorization": f"Bearer {ALPHA_TOKEN}",
        "Content-Type": "application/json",
        "Content-Length": "100",
    }
    started = trio.current_time()
    first = {"type": "http.request", "body": b'{"mess', "more_body": True}
    with caplog.at_level(logging.INFO, logger="taskplane.http"):
        sent = await call(app, http_scope("POST", "/message:send", headers), [first])
    elapsed = trio.current_time() - started
    start = sent_start(sent)
    assert start["status"] == 408
    assert DEFAULT_BODY_TIMEOUT_S <= elapsed < DEFAULT_BODY_TIMEOUT_S + 1  # no drain wait after
    assert sent_headers(start)["connection"] == "close"
    error = a2a_error(sent_body(sent), 408, "REQUEST_TIMEOUT")
    assert error["status"] == "DEADLINE_EXCEEDED"
    assert await counted(client, "(unmatched)", "POST", 408)
    (line,) = [r for r in events(caplog, "http_request") if r.status == 408]
    assert line.reason == "REQUEST_TIMEOUT"


@pytest.mark.parametrize(
    ("path", "status", "reason", "route", "allow"),
    [
        ("/tasks", 400, "UPGRADE_NOT_SUPPORTED", "/tasks", None),
        (
            "/tenant-a/tasks/t-1:subscribe",
            400,
            "UPGRADE_NOT_SUPPORTED",
            "/{tenant}/tasks/{id}:subscribe",
            None,
        ),
        ("/message:stream", 405, "METHOD_NOT_ALLOWED", "(unmatched)", "POST"),
        ("/no/such/route", 404, "NOT_FOUND", "(unmatched)", None),
    ],
)
async def test_a_websocket_handshake_gets_an_a2a_error(
    app: Any,
    client: httpx.AsyncClient,
    caplog: pytest.LogCaptureFixture,
    path: str,
    status: int,
    reason: str,
    route: str,
    allow: str | None,
) -> None:
    with caplog.at_level(logging.INFO, logger="taskplane.http"):
        sent = await call(app, ws_scope(path), [{"type": "websocket.connect"}])
    start, body = sent
    assert start["type"] == "websocket.http.response.start"
    assert start["status"] == status
    headers = sent_headers(start)
    assert headers["content-type"] == "application/json"
    assert headers.get("allow") == allow
    a2a_error(body["body"], status, reason)
    assert await counted(client, route, "GET", status)
    (line,) = events(caplog, "http_request")
    assert (line.status, line.reason, line.route) == (status, reason, route)


async def test_without_the_denial_extension_a_handshake_is_closed_and_counted(
    app: Any, client: httpx.AsyncClient
) -> None:
    sent = await call(app, ws_scope("/tasks", denial=False), [{"type": "websocket.connect"}])
    assert sent == [{"type": "websocket.close", "code": 1008}]
    assert await counted(client, "/tasks", "GET", 403)


@pytest.mark.parametrize(
    ("method", "path", "status", "allow"),
    [
        ("BREW", "/message:send", 405, "POST"),
        ("DELETE", "/message:send", 405, "POST"),
        ("TRACE", "/tasks", 405, "GET, HEAD"),
        ("PUT", "/tasks/t-1", 405, "GET, HEAD"),
        ("GET", "/message:cancel", 404, None),
        ("BREW", "/nowhere", 404, None),
        ("POST", "/tasks/t-1/nowhere", 404, None),
    ],
)
async def test_unknown_methods_and_paths_get_the_routes_own_answer(
    client: httpx.AsyncClient, method: str, path: str, status: int, allow: str | None
) -> None:
    response = await client.request(method, path)
    assert response.status_code == status, response.text
    assert response.headers.get("allow") == allow
    assert response.headers["content-type"].startswith("application/json")
    a2a_error(response.content, status, "METHOD_NOT_ALLOWED" if status == 405 else "NOT_FOUND")
