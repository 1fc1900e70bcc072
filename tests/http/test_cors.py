"""CORS at the edge (``TASKPLANE_CORS_ORIGINS``): off by default; preflights answered on
every route for exact origins; every answer to a listed origin names it, allows
credentials and exposes the A2A headers; no wildcard."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from taskplane.actors.plane import TaskPlane
from taskplane.extensions import ELICITATION_URI
from taskplane.http.card import agent_card_json
from taskplane.http.cors import parse_origins
from taskplane.http.handlers import Handlers
from taskplane.server import edge_app
from taskplane.settings import ConfigError, ServerSettings
from tests.support.plane import PUBLIC_URL, auth, credentials, send_body

APP_ORIGIN = "https://app.example.com"
PREFLIGHT = {
    "Access-Control-Request-Method": "POST",
    "Access-Control-Request-Headers": "authorization",
}


def cors_app(plane: TaskPlane, origins: tuple[str, ...]) -> Any:
    card = agent_card_json(public_url=PUBLIC_URL, name="t", description="t", version="1")
    return edge_app(
        Handlers(plane, blocking_timeout_s=5),
        credentials(),
        card,
        supported_extensions=(ELICITATION_URI,),
        cors_origins=parse_origins(origins),
    )


@pytest.fixture
async def browser(plane: TaskPlane) -> AsyncIterator[httpx.AsyncClient]:
    app = cors_app(plane, (APP_ORIGIN, "http://localhost:5173"))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        yield client


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/message:send",
        "/message:stream",
        "/tasks",
        "/tasks/t-1:subscribe",
        "/acme/tasks/t-1",
        "/nowhere",
    ],
)
async def test_a_preflight_from_a_listed_origin_is_answered_on_every_route(
    browser: httpx.AsyncClient, path: str
) -> None:
    response = await browser.options(path, headers={"Origin": APP_ORIGIN, **PREFLIGHT})
    assert response.status_code == 204
    assert response.headers["access-control-allow-origin"] == APP_ORIGIN
    assert response.headers["access-control-allow-credentials"] == "true"
    assert "POST" in response.headers["access-control-allow-methods"]
    allowed = response.headers["access-control-allow-headers"]
    for header in ("Authorization", "Content-Type", "A2A-Version", "A2A-Extensions"):
        assert header in allowed
    assert response.headers["vary"] == "Origin"


async def test_a_preflight_from_another_origin_is_refused(browser: httpx.AsyncClient) -> None:
    for origin in ("https://evil.example.com", "https://app.example.com.evil", "null"):
        response = await browser.options("/", headers={"Origin": origin, **PREFLIGHT})
        assert response.status_code == 403
        assert "access-control-allow-origin" not in response.headers


async def test_answers_to_a_listed_origin_carry_the_cors_headers(
    browser: httpx.AsyncClient,
) -> None:
    headers = {**auth(), "Origin": "http://localhost:5173", "A2A-Extensions": ELICITATION_URI}
    sent = await browser.post("/message:send", json=send_body("hi", "cors-1"), headers=headers)
    assert sent.status_code == 200
    assert sent.headers["access-control-allow-origin"] == "http://localhost:5173"
    assert sent.headers["access-control-allow-credentials"] == "true"
    exposed = sent.headers["access-control-expose-headers"]
    assert "A2A-Extensions" in exposed and "Retry-After" in exposed
    # A stream is an ordinary answer: the same headers (fetch reads it cross-origin).
    rpc = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendStreamingMessage",
        "params": send_body("hi", "cors-2"),
    }
    stream = await browser.post("/", json=rpc, headers=headers)
    assert stream.headers["content-type"].startswith("text/event-stream")
    assert stream.headers["access-control-allow-origin"] == "http://localhost:5173"
    # Errors too, 401 included, so the app can read why.
    refused = await browser.get("/tasks", headers={"Origin": APP_ORIGIN})
    assert refused.status_code == 401
    assert refused.headers["access-control-allow-origin"] == APP_ORIGIN
    # Another origin, or none: no CORS headers, only Vary.
    other = await browser.get("/tasks", headers={**auth(), "Origin": "https://evil.example.com"})
    assert "access-control-allow-origin" not in other.headers
    assert other.headers["vary"] == "Origin"


async def test_cors_is_off_by_default(plane: TaskPlane) -> None:
    transport = httpx.ASGITransport(app=cors_app(plane, ()))
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        response = await client.options("/", headers={"Origin": APP_ORIGIN, **PREFLIGHT})
        assert response.status_code == 405
        assert "access-control-allow-origin" not in response.headers
        got = await client.get("/tasks", headers={**auth(), "Origin": APP_ORIGIN})
        assert "access-control-allow-origin" not in got.headers and "vary" not in got.headers


@pytest.mark.parametrize(
    "value", ["*", "https://app.example.com/", "https://app.example.com/path", "app.example.com"]
)
def test_only_exact_origins_are_accepted(value: str) -> None:
    with pytest.raises(ConfigError, match="TASKPLANE_CORS_ORIGINS"):
        ServerSettings.from_environ({"TASKPLANE_CORS_ORIGINS": f"https://ok.example, {value}"})


def test_exact_origins_are_read() -> None:
    settings = ServerSettings.from_environ(
        {
            "TASKPLANE_CORS_ORIGINS": "https://App.example.com, http://[::1]:8080,http://localhost:3000"
        }
    )
    assert parse_origins(settings.cors_origins) == {
        "https://app.example.com",
        "http://[::1]:8080",
        "http://localhost:3000",
    }
