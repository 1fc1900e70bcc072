"""Path routing for the HTTP+JSON binding, tenant variants included.

One dispatcher serves every path, so an unknown route is a §11.6 404 and a known
path with another method a §11.6 405 with ``Allow``. ``/tasks/{id}:subscribe`` and
``/tasks/{id}:cancel`` are parsed explicitly, so ``abc:subscribe`` is never taken for
a Task ID (a2a-js#569). Tenant variants (``/{tenant}/...``)
are tried only after the plain reading fails, and a reserved first segment
(``message:send``, ``tasks``, ...) is never a tenant.
"""

from __future__ import annotations

import re

import attrs

from taskplane.errors import MethodNotAllowed, RouteNotFound

RESERVED_SEGMENTS = frozenset(
    {"message:send", "message:stream", "tasks", "extendedAgentCard", ".well-known"}
)

_ROUTES: tuple[tuple[re.Pattern[str], dict[str, str]], ...] = (
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
TENANT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
"""A tenant path segment (the identifier pattern of A2A IDs); ``.``/``..``,
control characters and overlong values never name a tenant."""


TEMPLATES = {
    "send": "/message:send",
    "stream": "/message:stream",
    "list": "/tasks",
    "subscribe": "/tasks/{id}:subscribe",
    "cancel": "/tasks/{id}:cancel",
    "get": "/tasks/{id}",
    "push": "/tasks/{id}/pushNotificationConfigs",
    "extended_card": "/extendedAgentCard",
    "card": "/.well-known/agent-card.json",
    "healthz": "/healthz",
    "readyz": "/readyz",
    "metrics": "/metrics",
}
"""The route template of each handler, as logged and used as a metrics label."""
UNMATCHED = "(unmatched)"
PUBLIC_PATHS = {"/healthz": "healthz", "/readyz": "readyz", "/metrics": "metrics"}
"""Operational routes answered without a bearer token (see docs/operations.md)."""


@attrs.frozen
class Route:
    """A matched route: the handler name, the tenant ("" for plain routes), the Task ID."""

    handler: str
    tenant: str = ""
    task_id: str | None = None

    @property
    def template(self) -> str:
        """The path template (``/{tenant}`` prefixed for a tenant route)."""
        base = TEMPLATES.get(self.handler, UNMATCHED)
        return f"/{{tenant}}{base}" if self.tenant else base


def match(method: str, path: str) -> Route:
    """The route for ``method`` and the decoded URL ``path``.

    Raises:
        RouteNotFound: no route has this path.
        MethodNotAllowed: the path exists, not for this method (``metadata["allow"]``).
    """
    public = "card" if path == _CARD else PUBLIC_PATHS.get(path)
    if public is not None:
        if method in ("GET", "HEAD"):
            return Route(public)
        raise _not_allowed(method, {"GET": public})
    found = _match(path, "")
    if found is None:
        tenant, sep, rest = path[1:].partition("/")
        if sep and TENANT.fullmatch(tenant) and tenant not in RESERVED_SEGMENTS:
            found = _match("/" + rest, tenant)
    if found is None:
        raise RouteNotFound(f"no route for {path}; see the Agent Card at {_CARD}")
    methods, tenant, task_id = found
    handler = methods.get("GET" if method == "HEAD" else method)
    if handler is None:
        raise _not_allowed(method, methods)
    return Route(handler, tenant, task_id)


def _match(path: str, tenant: str) -> tuple[dict[str, str], str, str | None] | None:
    for pattern, methods in _ROUTES:
        m = pattern.fullmatch(path)
        if m:
            return methods, tenant, m.groupdict().get("id")
    return None


def _not_allowed(method: str, methods: dict[str, str]) -> MethodNotAllowed:
    allowed = set(methods) | ({"HEAD"} if "GET" in methods else set())
    allow = ", ".join(sorted(allowed))
    return MethodNotAllowed(
        f"method {method} is not allowed here; allowed: {allow}", metadata={"allow": allow}
    )
