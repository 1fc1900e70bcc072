"""The ceiling of taskplane's HTTP stack, for ``bench/compare.py``.

A bare ASGI app on hypercorn's trio worker (the server taskplane runs on, same
version, same process model: one trio thread) that reads the request body and answers
every request with one fixed Task (``200``, ``application/json``). No routing, no
authentication, no JSON parsing, no store: whatever taskplane does per request comes
on top of this.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Awaitable, Callable
from typing import Any

import trio
from hypercorn.config import Config
from hypercorn.trio import serve

FIXED_TASK = json.dumps(
    {
        "task": {
            "id": "00000000-0000-4000-8000-000000000000",
            "contextId": "00000000-0000-4000-8000-000000000001",
            "status": {"state": "TASK_STATE_SUBMITTED", "timestamp": "2026-01-01T00:00:00Z"},
        }
    },
    separators=(",", ":"),
).encode()

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


async def app(scope: dict[str, Any], receive: Receive, send: Send) -> None:
    if scope["type"] == "lifespan":
        while True:
            event = await receive()
            if event["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif event["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] != "http":
        return
    more = True
    while more:  # read the body, as a real handler would
        event = await receive()
        more = event.get("more_body", False)
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(FIXED_TASK)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": FIXED_TASK})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    config = Config()
    config.bind = [f"127.0.0.1:{args.port}"]
    config.accesslog = None
    config.backlog = 1024
    config.keep_alive_timeout = 75
    trio.run(serve, app, config)


if __name__ == "__main__":
    main()
