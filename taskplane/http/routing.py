"""Routing for the HTTP+JSON binding: the path grammar, tenant variants included, and
the route table.

:func:`match` reads a method and path as one :data:`Operation` (pure: it needs no
handlers, so the early refusal reads it too). :func:`endpoints` is the route table:
each authenticated operation bound to an :class:`Endpoint`, its handler (a bound
coroutine) and its :data:`BodyPolicy`; the public operations (Agent Card, console
files, health, readiness, metrics) are the app's own.

``POST /`` is the JSON-RPC binding (operation ``jsonrpc``): its envelope, not its
path, says which A2A operation it is (:data:`taskplane.http.jsonrpc.METHODS`).

One dispatcher serves every path, so an unknown route is a §11.6 404 and a known
path with another method a §11.6 405 with ``Allow``. ``/tasks/{id}:subscribe`` and
``/tasks/{id}:cancel`` are parsed explicitly, so ``abc:subscribe`` is never taken for
a Task ID (a2a-js#569). Tenant variants (``/{tenant}/...``) are tried only after the
plain reading fails, and a reserved first segment (``message:send``, ``tasks``, ...)
is never a tenant.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Literal

import attrs

from taskplane.errors import MethodNotAllowed, RouteNotFound
from taskplane.http.console import is_console_path
from taskplane.http.handlers import Call, EventStream, Handlers, Reply

Operation = Literal[
    "send",
    "stream",
    "list",
    "subscribe",
    "cancel",
    "get",
    "push",
    "extended_card",
    "jsonrpc",
    "card",
    "healthz",
    "readyz",
    "metrics",
    "console",
]
"""What a request asks for, read from its method and path."""

BodyPolicy = Literal["none", "json", "json-or-empty"]
"""The request body an operation takes: none (any body is ignored, then drained), a
JSON object, or a JSON object or nothing (the TCK posts ``:cancel`` and
``:subscribe`` with no body)."""

Handler = Callable[[Call], Awaitable[Reply | EventStream]]
"""An authenticated operation: a bound coroutine of the handlers."""


@attrs.frozen
class Endpoint:
    """What serves one authenticated operation: its handler and the body it takes."""

    handler: Handler
    body: BodyPolicy = "none"


def endpoints(handlers: Handlers) -> dict[Operation, Endpoint]:
    """The route table: every operation but the public ones (:data:`PUBLIC`), bound to its
    handler with the body it takes (the Surface table of docs/design-rules.md)."""
    return {
        "send": Endpoint(handlers.send, "json"),
        "stream": Endpoint(handlers.stream, "json"),
        "list": Endpoint(handlers.list),
        "get": Endpoint(handlers.get),
        "cancel": Endpoint(handlers.cancel, "json-or-empty"),
        "subscribe": Endpoint(handlers.subscribe, "json-or-empty"),
        "push": Endpoint(handlers.push),
        "extended_card": Endpoint(handlers.extended_card),
    }


RESERVED_SEGMENTS = frozenset(
    {"message:send", "message:stream", "tasks", "extendedAgentCard", ".well-known", "console"}
)

_ROUTES: tuple[tuple[re.Pattern[str], dict[str, Operation]], ...] = (
    (re.compile(r"/message:send"), {"POST": "send"}),
    (re.compile(r"/message:stream"), {"POST": "stream"}),
    (re.compile(r"/tasks"), {"GET": "list"}),
    (re.compile(r"/tasks/(?P<id>[^/]+):subscribe"), {"GET": "subscribe", "POST": "subscribe"}),
    (re.compile(r"/tasks/(?P<id>[^/]+):cancel"), {"POST": "cancel"}),
    (re.compile(r"/tasks/(?P<id>[^/:][^/]*)"), {"GET": "get"}),
    (
        re.compile(r"/tasks/(?P<id>[^/]+)/pushNotificationConfigs(?:/(?P<config>[^/]+))?"),
        {"GET": "push", "POST": "push", "DELETE": "push"},
    ),
    (re.compile(r"/extendedAgentCard"), {"GET": "extended_card"}),
)
_CARD = "/.well-known/agent-card.json"
_JSONRPC: dict[str, Operation] = {"POST": "jsonrpc"}
"""``POST /``: the JSON-RPC binding (:mod:`taskplane.http.jsonrpc`), whose envelope
names the operation; the tenant travels in its ``params``."""
TENANT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
"""A tenant path segment (the identifier pattern of A2A IDs); ``.``/``..``,
control characters and overlong values never name a tenant."""


def is_tenant(name: str) -> bool:
    """Whether ``name`` may name a tenant, on either binding: it matches :data:`TENANT`
    and is not a first segment the path grammar reserves (:data:`RESERVED_SEGMENTS`),
    so every tenant's Tasks are reachable at ``/{tenant}/...``."""
    return TENANT.fullmatch(name) is not None and name not in RESERVED_SEGMENTS


TEMPLATES: dict[Operation, str] = {
    "send": "/message:send",
    "stream": "/message:stream",
    "list": "/tasks",
    "subscribe": "/tasks/{id}:subscribe",
    "cancel": "/tasks/{id}:cancel",
    "get": "/tasks/{id}",
    "push": "/tasks/{id}/pushNotificationConfigs",
    "extended_card": "/extendedAgentCard",
    "jsonrpc": "/",
    "card": "/.well-known/agent-card.json",
    "healthz": "/healthz",
    "readyz": "/readyz",
    "metrics": "/metrics",
    "console": "/console/{file}",
}
"""The route template of each operation, as logged and used as a metrics label."""
PUBLIC_PATHS: dict[str, Operation] = {
    "/healthz": "healthz",
    "/readyz": "readyz",
    "/metrics": "metrics",
}
"""Operational routes answered without a bearer token (see docs/operations.md)."""
FRONT_DOORS: frozenset[Operation] = frozenset({"jsonrpc"})
"""Operations that are another binding's entry to the bound ones (``POST /``: the
JSON-RPC envelope names a bound operation), so bound to no endpoint of their own."""
PUBLIC: frozenset[Operation] = frozenset({"card", "console", *PUBLIC_PATHS.values()})
"""Operations answered without a bearer token: the Agent Card, the console's files
(:mod:`taskplane.http.console`) and the operational ones."""


@attrs.frozen
class Route:
    """A matched route: the operation, the tenant ("" for plain routes), the Task ID."""

    operation: Operation
    tenant: str = ""
    task_id: str | None = None

    @property
    def template(self) -> str:
        """The path template (``/{tenant}`` prefixed for a tenant route)."""
        base = TEMPLATES[self.operation]
        return f"/{{tenant}}{base}" if self.tenant else base


def match(method: str, path: str) -> Route:
    """The route for ``method`` and the decoded URL ``path``.

    Raises:
        RouteNotFound: no route has this path.
        MethodNotAllowed: the path exists, not for this method (``metadata["allow"]``).
    """
    public: Operation | None = "card" if path == _CARD else PUBLIC_PATHS.get(path)
    if public is None and is_console_path(path):
        public = "console"
    if public is not None:
        if method in ("GET", "HEAD"):
            return Route(public)
        raise _not_allowed(method, {"GET": public})
    found = (_JSONRPC, "", None) if path == "/" else _match(path, "")
    if found is None:
        tenant, sep, rest = path[1:].partition("/")
        if sep and is_tenant(tenant):
            found = _match("/" + rest, tenant)
    if found is None:
        raise RouteNotFound(f"no route for {path}; see the Agent Card at {_CARD}")
    methods, tenant, task_id = found
    operation = methods.get("GET" if method == "HEAD" else method)
    if operation is None:
        raise _not_allowed(method, methods)
    return Route(operation, tenant, task_id)


def _match(path: str, tenant: str) -> tuple[dict[str, Operation], str, str | None] | None:
    for pattern, methods in _ROUTES:
        m = pattern.fullmatch(path)
        if m:
            return methods, tenant, m.groupdict().get("id")
    return None


def _not_allowed(method: str, methods: dict[str, Operation]) -> MethodNotAllowed:
    allowed = set(methods) | ({"HEAD"} if "GET" in methods else set())
    allow = ", ".join(sorted(allowed))
    return MethodNotAllowed(
        f"method {method} is not allowed here; allowed: {allow}", metadata={"allow": allow}
    )
