"""Reply anchors, ``(principal, source, providerResponseId) -> taskId``, once for
every backend: the portable statements (``?`` parameters) of design rule "A reply
anchor must be verified, and a failed anchor is a new Task".

An anchor is recorded for a provider response of a Task (condition 3), replacing one
under the same key. It may be recorded before the response is sent, so that no reply
can arrive before it; it counts only once that response was delivered.

The lookup key includes the principal: an anchor never matches another principal's
event (condition 5 of a verified reply anchor). An anchor counts only once an
outbound delivery of its Task, from its source, reached ``delivered`` with exactly
that provider response ID (condition 2: "Channels sent a provider response for that
Task"); an anchor whose response is still being sent, failed or is ambiguous
continues nothing.
"""

from __future__ import annotations

from taskplane.scope import Scope

RECORD = (
    "INSERT INTO reply_anchors (tenant, principal, source, provider_response_id,"
    " task_id, created_at_ms) VALUES (?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (tenant, principal, source, provider_response_id)"
    " DO UPDATE SET task_id = excluded.task_id, created_at_ms = excluded.created_at_ms"
)
"""Record (or replace) an anchor; the parameters are :func:`record_params`."""

LOOKUP = (
    "SELECT a.task_id FROM reply_anchors AS a"
    " WHERE a.tenant = ? AND a.principal = ? AND a.source = ? AND a.provider_response_id = ?"
    " AND EXISTS (SELECT 1 FROM deliveries AS d WHERE d.task_id = a.task_id"
    " AND d.source = a.source AND d.state = 'delivered'"
    " AND d.provider_response_id = a.provider_response_id)"
)
"""The Task a delivered response anchors; the parameters are :func:`lookup_params`."""


def record_params(
    scope: Scope, source: str, provider_response_id: str, task_id: str, now_ms: int
) -> tuple[object, ...]:
    """The parameters of :data:`RECORD`."""
    return (scope.tenant, scope.principal, source, provider_response_id, task_id, now_ms)


def lookup_params(scope: Scope, source: str, provider_response_id: str) -> tuple[object, ...]:
    """The parameters of :data:`LOOKUP`."""
    return (scope.tenant, scope.principal, source, provider_response_id)
