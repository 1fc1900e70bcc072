"""Driving an ASGI app directly, for what an HTTP client cannot send in process: a
request body that stops half-way, a WebSocket handshake.

- :func:`call`: run the app on a scope with a list of incoming messages, after which
  the client stalls (nothing more arrives); returns what the app sent.
- :func:`http_scope`, :func:`ws_scope`: the scopes an HTTP/1.1 server would give.
- :func:`sent_status`, :func:`sent_headers`, :func:`sent_body`: read a response back.
"""

from __future__ import annotations

from typing import Any

import trio

Message = dict[str, Any]


async def call(app: Any, scope: dict[str, Any], incoming: list[Message]) -> list[Message]:
    """Run ``app`` on ``scope``: ``incoming`` is received in order, then nothing more
    arrives (the client stalls); returns what the app sent."""
    sent: list[Message] = []
    queue = list(incoming)

    async def receive() -> Message:
        if queue:
            return queue.pop(0)
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    async def send(message: Message) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent


def http_scope(method: str, path: str, headers: dict[str, str]) -> dict[str, Any]:
    """An HTTP/1.1 request scope from 127.0.0.1."""
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8788),
        "extensions": {},
    }


def ws_scope(path: str, *, denial: bool = True) -> dict[str, Any]:
    """A WebSocket handshake scope; ``denial``: the server offers the ASGI WebSocket
    denial response extension (hypercorn does)."""
    scope = http_scope("GET", path, {"Host": "x", "Sec-WebSocket-Version": "13"})
    scope.update(type="websocket", scheme="ws", subprotocols=[])
    del scope["method"]
    scope["extensions"] = {"websocket.http.response": {}} if denial else {}
    return scope


def sent_start(sent: list[Message]) -> Message:
    """The response head among ``sent``."""
    return next(m for m in sent if m["type"] == "http.response.start")


def sent_headers(start: Message) -> dict[str, str]:
    """A response head's headers, names lower-case."""
    return {k.decode().lower(): v.decode() for k, v in start["headers"]}


def sent_body(sent: list[Message]) -> bytes:
    """The response body among ``sent``."""
    return b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
