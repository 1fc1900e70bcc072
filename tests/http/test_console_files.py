"""http/console.py: the browser console's static files at ``/console/``.

Public (no token), the right media types, ``Cache-Control`` and ``ETag``, a strict
Content-Security-Policy, and nothing but the files of the table: no directory listing,
no path traversal (tried on a raw socket, so no client normalises the path first).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from taskplane.errors import RouteNotFound
from taskplane.http import routing
from taskplane.http.console import CONTENT_SECURITY_POLICY, ConsoleFiles

CONSOLE_DIR = Path(__file__).resolve().parents[2] / "taskplane" / "console"


def _public(app: Any) -> httpx.AsyncClient:
    """A client that sends no Authorization header."""
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")


def test_the_table_holds_every_shipped_file_and_nothing_else() -> None:
    files = ConsoleFiles.load()
    shipped = {
        p.name for p in CONSOLE_DIR.iterdir() if p.suffix in {".html", ".js", ".css", ".svg"}
    }
    assert set(files.files) == shipped
    assert {"index.html", "main.js", "console.css"} <= shipped
    assert files.files["index.html"].body == (CONSOLE_DIR / "index.html").read_bytes()


@pytest.mark.parametrize(
    "path",
    [
        "/console/../pyproject.toml",
        "/console/..%2fpyproject.toml",
        "/console/%2e%2e/pyproject.toml",
        "/console/./index.html",
        "/console/static/index.html",
        "/console//index.html",
        "/console/index.html/",
        "/console/sub/",
        "/console/__init__.py",
        "/console/INDEX.HTML",
        "/consolex",
    ],
)
def test_lookup_answers_only_names_of_the_table(path: str) -> None:
    with pytest.raises(RouteNotFound):
        ConsoleFiles.load().lookup(path)


def test_console_paths_are_public_routes_and_console_is_not_a_tenant() -> None:
    assert routing.match("GET", "/console/").operation == "console"
    assert routing.match("HEAD", "/console/main.js").operation == "console"
    assert routing.match("GET", "/console").operation == "console"
    assert routing.match("GET", "/console/tasks").operation == "console"  # never tenant "console"
    assert routing.match("GET", "/console/tasks").template == "/console/{file}"
    assert "console" in routing.RESERVED_SEGMENTS


@pytest.mark.parametrize("path", ["/console/", "/console/index.html"])
async def test_the_index_is_served_without_a_token(app: Any, path: str) -> None:
    async with _public(app) as client:
        response = await client.get(path)
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/html; charset=utf-8"
    assert response.headers["cache-control"] == "no-cache"
    assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["referrer-policy"] == "no-referrer"
    assert b'<script type="module" src="main.js">' in response.content


def test_the_policy_allows_this_origin_only() -> None:
    directives = dict(d.strip().split(" ", 1) for d in CONTENT_SECURITY_POLICY.split(";"))
    assert directives["default-src"] == "'self'"
    assert directives["script-src"] == "'self'"  # no inline script, no eval
    assert directives["connect-src"] == "'self'"
    assert directives["frame-ancestors"] == "'none'"
    assert "unsafe" not in CONTENT_SECURITY_POLICY


@pytest.mark.parametrize(
    ("name", "media_type"),
    [
        ("main.js", "text/javascript; charset=utf-8"),
        ("console.css", "text/css; charset=utf-8"),
        ("icon.svg", "image/svg+xml"),
    ],
)
async def test_each_file_has_its_media_type(app: Any, name: str, media_type: str) -> None:
    async with _public(app) as client:
        response = await client.get(f"/console/{name}")
    assert response.status_code == 200
    assert response.headers["content-type"] == media_type
    assert response.content == (CONSOLE_DIR / name).read_bytes()


async def test_an_etag_revalidation_is_a_304_without_a_body(app: Any) -> None:
    async with _public(app) as client:
        first = await client.get("/console/main.js")
        again = await client.get(
            "/console/main.js", headers={"If-None-Match": first.headers["etag"]}
        )
    assert again.status_code == 304
    assert again.content == b""
    assert again.headers["etag"] == first.headers["etag"]


async def test_console_without_a_slash_redirects(app: Any) -> None:
    async with _public(app) as client:
        response = await client.get("/console")
    assert response.status_code == 308
    assert response.headers["location"] == "/console/"


async def test_head_answers_the_headers(app: Any) -> None:
    async with _public(app) as client:
        response = await client.head("/console/")
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/html; charset=utf-8"


async def test_other_methods_are_405_with_allow(app: Any) -> None:
    async with _public(app) as client:
        response = await client.post("/console/", content=b"{}")
    assert response.status_code == 405
    assert response.headers["allow"] == "GET, HEAD"
    assert response.json()["error"]["details"][0]["reason"] == "METHOD_NOT_ALLOWED"


async def test_an_unknown_file_is_the_usual_404(app: Any) -> None:
    async with _public(app) as client:
        response = await client.get("/console/nope.js")
    assert response.status_code == 404
    assert response.json()["error"]["details"][0]["reason"] == "NOT_FOUND"


async def test_the_api_still_needs_a_token(app: Any) -> None:
    async with _public(app) as client:
        response = await client.get("/console/../tasks")  # normalised by the client: /tasks
    assert response.status_code == 401


async def _raw_get(port: int, target: bytes) -> bytes:
    with trio.fail_after(10):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(
                b"GET " + target + b" HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
            )
            data = b""
            while chunk := await stream.receive_some(65536):
                data += chunk
    return data


@pytest.mark.parametrize(
    "target",
    [
        b"/console/../pyproject.toml",
        b"/console/..%2f..%2fpyproject.toml",
        b"/console/%2e%2e/%2e%2e/pyproject.toml",
        b"/console/..%5cpyproject.toml",
        b"/console/%2fetc%2fpasswd",
        b"/console/static/",
    ],
)
async def test_no_path_reaches_the_file_system(live: httpx.AsyncClient, target: bytes) -> None:
    port = live.base_url.port
    assert port is not None
    answer = await _raw_get(port, target)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 404"), answer[:200]
    assert b"[project]" not in body and b"root:" not in body
