"""Cross-origin requests (CORS): a browser app on another origin may call the A2A API.

Off unless ``TASKPLANE_CORS_ORIGINS`` lists origins. :class:`Cors` is ASGI middleware,
outermost at the edge (:func:`taskplane.server.edge_app`), so it sees every route and
every answer, early refusals included:

* a preflight (``OPTIONS`` with ``Origin`` and ``Access-Control-Request-Method``) from
  a listed origin is answered here, ``204``, on every path: the A2A methods, the
  request headers a client sends (``Authorization``, ``Content-Type``, ``A2A-Version``,
  ``A2A-Extensions``) and a max age; one from another origin gets ``403`` and no CORS
  header, so the browser refuses the call;
* every other answer to a listed origin carries ``Access-Control-Allow-Origin`` (that
  exact origin, never ``*``), ``Access-Control-Allow-Credentials: true`` (the bearer
  token is a credential) and ``Access-Control-Expose-Headers`` with the A2A response
  headers (``A2A-Extensions``, ``A2A-Version``), ``Retry-After``, ``ETag`` and
  ``WWW-Authenticate``; ``Vary: Origin`` is added to every answer, so a cache never
  gives one origin's answer to another. An SSE stream is an ordinary answer, so
  streaming through ``fetch`` works cross-origin.

Origins are exact (scheme, host and port, as a browser sends ``Origin``): no wildcard,
no suffix match, since credentials are allowed.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from taskplane.http.connection import ASGIApp, Message, Receive, Send

ALLOWED_METHODS: Final = "GET, HEAD, POST, DELETE, OPTIONS"
ALLOWED_HEADERS: Final = "Authorization, Content-Type, Accept, A2A-Version, A2A-Extensions"
EXPOSED_HEADERS: Final = "A2A-Extensions, A2A-Version, Retry-After, ETag, WWW-Authenticate"
PREFLIGHT_MAX_AGE_S: Final = 600
"""Seconds a browser may reuse a preflight answer."""


def parse_origins(origins: Iterable[str]) -> frozenset[str]:
    """The origins of ``TASKPLANE_CORS_ORIGINS`` (checked exact by the settings), in the
    lowercase a browser's ``Origin`` is compared in."""
    return frozenset(origin.lower() for origin in origins)


class Cors:
    """ASGI middleware answering CORS for ``origins`` (see the module docstring).

    Args:
        app: the wrapped ASGI app.
        origins: the allowed origins (:func:`parse_origins`); empty: requests pass
            through untouched.
    """

    def __init__(self, app: ASGIApp, origins: frozenset[str]) -> None:
        self.app = app
        self.origins = origins

    async def __call__(self, scope: Any, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http" or not self.origins:
            await self.app(scope, receive, send)
            return
        headers = scope.get("headers", [])
        origin = _header(headers, b"origin")
        if (
            scope.get("method") == "OPTIONS"
            and origin is not None
            and _header(headers, b"access-control-request-method") is not None
        ):
            await self._preflight(origin, send)
            return
        allowed = origin is not None and origin.lower() in self.origins

        async def send_with_cors(message: Message) -> None:
            if message.get("type") == "http.response.start":
                extra = [(b"vary", b"Origin")]
                if allowed and origin is not None:
                    exposed = (b"access-control-expose-headers", EXPOSED_HEADERS.encode())
                    extra += [*_allow(origin), exposed]
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self.app(scope, receive, send_with_cors)

    async def _preflight(self, origin: str, send: Send) -> None:
        headers = [(b"vary", b"Origin"), (b"content-length", b"0")]
        status = 403
        if origin.lower() in self.origins:
            status = 204
            headers += [
                *_allow(origin),
                (b"access-control-allow-methods", ALLOWED_METHODS.encode()),
                (b"access-control-allow-headers", ALLOWED_HEADERS.encode()),
                (b"access-control-max-age", str(PREFLIGHT_MAX_AGE_S).encode()),
            ]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def _allow(origin: str) -> list[tuple[bytes, bytes]]:
    return [
        (b"access-control-allow-origin", origin.encode("latin-1")),
        (b"access-control-allow-credentials", b"true"),
    ]


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> str | None:
    for key, value in headers:
        if key == name:
            return value.decode("latin-1")
    return None
