"""A small JMAP client (RFC 8620 core, RFC 8621 mail, JMAP for Calendars) for the email
and calendar-alert sources: the session object, method calls, and the push EventSource.

Errors, by what they mean for the caller:

- :class:`JmapUnavailable`: a ``5xx`` answer, a transport error, a body that is not a
  JMAP response, or the method errors ``serverUnavailable``/``serverFail``: the
  outcome of a mutation is unknown; a read may be retried.
- :class:`JmapRateLimited`: ``429`` (nothing happened); wait ``wait_s`` seconds
  (``Retry-After``, else 30 s; at least 1 s, at most 1 h).
- :class:`JmapRejected`: any other ``4xx`` (a request-level problem such as
  ``urn:ietf:params:jmap:error:limit``, or bad credentials) or a method error
  (:class:`JmapMethodError`, whose ``type`` is the JMAP error type, e.g.
  ``cannotCalculateChanges``): the request was definitely refused.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import attrs
import httpx
from httpx_sse import EventSource, SSEError

from taskplane.actors.outbound import ProviderRejected
from taskplane.sources.rate_limit import header_wait

CORE = "urn:ietf:params:jmap:core"
MAIL = "urn:ietf:params:jmap:mail"
SUBMISSION = "urn:ietf:params:jmap:submission"
CALENDARS = "urn:ietf:params:jmap:calendars"
USING = (CORE, MAIL, SUBMISSION)
CALENDAR_USING = (CORE, CALENDARS)
DEFAULT_MAX_OBJECTS_IN_GET = 256
"""Used when the session does not say (the conformance matrix's default)."""
TIMEOUT_S = 30.0
PING_S = 30
"""The EventSource ``ping`` interval asked for (seconds); a stream silent for three
intervals is treated as dropped."""
DEFAULT_RATE_WAIT_S = 30.0
TRANSIENT_METHOD_ERRORS = frozenset({"serverUnavailable", "serverFail"})

MethodCall = tuple[str, Mapping[str, Any], str]
"""``(method name, arguments, call ID)`` as RFC 8620 §3.2 writes an Invocation."""


class JmapUnavailable(Exception):
    """The server could not be reached or failed: the outcome is unknown."""


class JmapRejected(ProviderRejected):
    """The server definitely refused the request."""


class JmapRateLimited(JmapRejected):
    """HTTP 429: nothing happened; wait ``wait_s`` seconds before asking again."""

    def __init__(self, wait_s: float) -> None:
        super().__init__(f"JMAP rate limit: retry after {wait_s:.0f} s")
        self.wait_s = wait_s


class JmapMethodError(JmapRejected):
    """A method answered ``["error", {"type": ...}, callId]``."""

    def __init__(self, method: str, error_type: str, description: str = "") -> None:
        super().__init__(f"{method}: {error_type}{': ' + description if description else ''}")
        self.method = method
        self.type = error_type


@attrs.frozen
class Session:
    """What the source needs of the session object (RFC 8620 §2).

    Attributes:
        api_url: where method calls are posted.
        event_source_url: the push EventSource URL template.
        account_id: the primary account of the capability asked for (mail unless
            said otherwise).
        username: the session's user name (the account's login).
        max_objects_in_get: ``maxObjectsInGet`` of the core capability (a count).
    """

    api_url: str
    event_source_url: str
    account_id: str
    username: str
    max_objects_in_get: int = DEFAULT_MAX_OBJECTS_IN_GET


def parse_session(document: object, base_url: str, capability: str = MAIL) -> Session:
    """The :class:`Session` of a session object for ``capability``'s primary account;
    relative URLs are resolved against ``base_url`` (the session URL).

    Raises:
        JmapRejected: not a session object, no such account, or no API URL.
    """
    if not isinstance(document, dict):
        raise JmapRejected("the session resource is not a JSON object")
    primary = document.get("primaryAccounts")
    account = primary.get(capability) if isinstance(primary, dict) else None
    api_url, event_url = document.get("apiUrl"), document.get("eventSourceUrl")
    if not isinstance(account, str) or not account:
        kind = "mail" if capability == MAIL else capability
        raise JmapRejected(f"the session has no primary {kind} account")
    if not isinstance(api_url, str) or not isinstance(event_url, str):
        raise JmapRejected("the session has no apiUrl or eventSourceUrl")
    capabilities = document.get("capabilities")
    core = capabilities.get(CORE) if isinstance(capabilities, dict) else None
    limit = core.get("maxObjectsInGet") if isinstance(core, dict) else None
    base = httpx.URL(base_url)
    return Session(
        api_url=str(base.join(api_url)),
        event_source_url=str(base.join(event_url)),
        account_id=account,
        username=str(document.get("username") or ""),
        max_objects_in_get=limit
        if isinstance(limit, int) and limit > 0
        else DEFAULT_MAX_OBJECTS_IN_GET,
    )


def event_source_url(session: Session, types: str = "Email") -> str:
    """The EventSource URL template filled in: ``types``, ``closeafter=no``, ``ping``."""
    return (
        session.event_source_url.replace("{types}", types)
        .replace("{closeafter}", "no")
        .replace("{ping}", str(PING_S))
    )


def state_change(data: str, account_id: str) -> dict[str, str] | None:
    """The type states of ``account_id`` in one ``state`` event's data (a
    ``StateChange`` object, RFC 8620 §7.1), or ``None`` when it names another account
    or is not a StateChange."""
    try:
        value = json.loads(data)
    except ValueError:
        return None
    if not isinstance(value, dict) or value.get("@type") != "StateChange":
        return None
    changed = value.get("changed")
    states = changed.get(account_id) if isinstance(changed, dict) else None
    if not isinstance(states, dict):
        return None
    return {str(k): str(v) for k, v in states.items()}


def calendar_alert(data: str, account_id: str) -> dict[str, Any] | None:
    """The ``CalendarAlert`` push object (JMAP for Calendars: ``accountId``,
    ``calendarEventId``, ``uid``, ``recurrenceId``, ``alertId``) of ``account_id`` in
    one event's data, or ``None`` when it is another object or another account's."""
    try:
        value = json.loads(data)
    except ValueError:
        return None
    if not isinstance(value, dict) or value.get("@type") != "CalendarAlert":
        return None
    return value if value.get("accountId") == account_id else None


def chunks(ids: Sequence[str], size: int) -> list[list[str]]:
    """``ids`` in order, in lists of at most ``size`` (``maxObjectsInGet``)."""
    return [list(ids[i : i + size]) for i in range(0, len(ids), max(1, size))]


def auth_headers(username: str | None, password: str | None, token: str | None) -> dict[str, str]:
    """``Authorization``: ``Bearer <token>`` when a token is given, else HTTP Basic."""
    if token:
        return {"Authorization": f"Bearer {token}"}
    pair = base64.b64encode(f"{username}:{password}".encode()).decode()
    return {"Authorization": f"Basic {pair}"}


class JmapApi:
    """Requests with ``headers`` (the credential) through ``client``."""

    def __init__(self, client: httpx.AsyncClient, headers: Mapping[str, str]) -> None:
        self.client = client
        self._headers = dict(headers)

    async def session(self, url: str, capability: str = MAIL) -> Session:
        """``GET`` the session resource (``capability``'s primary account).

        Raises:
            JmapRateLimited, JmapRejected, JmapUnavailable: see the module docstring.
        """
        response = await self._request("GET", url)
        return parse_session(_json(response), url, capability)

    async def call(
        self, session: Session, calls: Sequence[MethodCall], using: Sequence[str] = USING
    ) -> dict[str, Any]:
        """Post ``calls`` in one request; the arguments of each response by call ID.

        A method error in any response is raised (the first one), so a caller that
        needs another call's result despite an error reads :meth:`call_raw`.

        Raises:
            JmapMethodError, JmapRateLimited, JmapRejected, JmapUnavailable.
        """
        answers: dict[str, Any] = {}
        for name, arguments, call_id in await self.call_raw(session, calls, using):
            if name == "error":
                raise method_error(name, arguments)
            answers.setdefault(call_id, arguments)  # a second one is implicit (RFC 8621 §7.5)
        return answers

    async def call_raw(
        self, session: Session, calls: Sequence[MethodCall], using: Sequence[str] = USING
    ) -> list[tuple[str, dict[str, Any], str]]:
        """Post ``calls`` (with the capabilities ``using``); the method responses as
        sent (RFC 8620 §3.4).

        Raises:
            JmapRateLimited, JmapRejected, JmapUnavailable.
        """
        body = {"using": list(using), "methodCalls": [[n, dict(a), c] for n, a, c in calls]}
        document = _json(await self._request("POST", session.api_url, json=body))
        responses = document.get("methodResponses") if isinstance(document, dict) else None
        if not isinstance(responses, list):
            raise JmapUnavailable("the answer has no methodResponses")
        out: list[tuple[str, dict[str, Any], str]] = []
        for item in responses:
            if not (isinstance(item, list) and len(item) == 3 and isinstance(item[1], dict)):
                raise JmapUnavailable("a method response is not an Invocation")
            out.append((str(item[0]), item[1], str(item[2])))
        return out

    async def state_changes(self, session: Session) -> AsyncIterator[dict[str, str]]:
        """Open the push EventSource, yield ``{}`` once it is open, then the mail
        account's type states of each ``state`` event (pings are skipped) until the
        stream ends.

        Raises:
            JmapRateLimited, JmapRejected, JmapUnavailable: opening failed, or the
            stream broke or stayed silent for three ping intervals.
        """
        async for event, data in self._events(event_source_url(session)):
            if event is None:
                yield {}
                continue
            if event != "state":
                continue
            states = state_change(data, session.account_id)
            if states is not None:
                yield states

    async def calendar_alerts(self, session: Session) -> AsyncIterator[dict[str, Any] | None]:
        """Open the push EventSource (every type), yield ``None`` once it is open, then
        each ``CalendarAlert`` push object of the session's account, whatever the SSE
        event's name, until the stream ends.

        Raises:
            JmapRateLimited, JmapRejected, JmapUnavailable: as :meth:`state_changes`.
        """
        async for event, data in self._events(event_source_url(session, "*")):
            if event is None:
                yield None
                continue
            alert = calendar_alert(data, session.account_id)
            if alert is not None:
                yield alert

    async def _events(self, url: str) -> AsyncIterator[tuple[str | None, str]]:
        """``(None, "")`` once the stream is open, then ``(event name, data)`` per event."""
        timeout = httpx.Timeout(TIMEOUT_S, read=3 * PING_S)
        headers = {**self._headers, "Accept": "text/event-stream", "Cache-Control": "no-store"}
        try:
            async with self.client.stream("GET", url, headers=headers, timeout=timeout) as resp:
                if resp.status_code >= 300:
                    await resp.aread()
                    _check(resp, "GET", url)
                yield None, ""
                async for sse in EventSource(resp).aiter_sse():
                    yield sse.event, sse.data
        except (httpx.TransportError, SSEError) as exc:
            raise JmapUnavailable(f"the EventSource broke: {exc!r}") from exc

    async def _request(self, method: str, url: str, *, json: Any = None) -> httpx.Response:
        try:
            response = await self.client.request(method, url, json=json, headers=self._headers)
        except httpx.TransportError as exc:
            raise JmapUnavailable(f"{method} {url}: {exc!r}") from exc
        _check(response, method, url)
        return response


def method_error(method: str, arguments: Mapping[str, Any]) -> JmapRejected | JmapUnavailable:
    """The exception for a method's ``error`` response (its ``type`` decides)."""
    kind = str(arguments.get("type", "serverFail"))
    description = str(arguments.get("description", ""))
    if kind in TRANSIENT_METHOD_ERRORS:
        return JmapUnavailable(f"{method}: {kind}")
    return JmapMethodError(method, kind, description)


def _check(response: httpx.Response, method: str, url: str) -> None:
    status = response.status_code
    if status < 300:
        return
    if status == 429:
        wait = header_wait(response, "Retry-After")
        raise JmapRateLimited(DEFAULT_RATE_WAIT_S if wait is None else wait)
    if 400 <= status < 500:
        try:
            problem = response.json()
        except ValueError:
            problem = {}
        kind = problem.get("type", "") if isinstance(problem, dict) else ""
        raise JmapRejected(f"{method} {url}: HTTP {status} {kind}".rstrip())
    raise JmapUnavailable(f"{method} {url}: HTTP {status}")


def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError as exc:
        raise JmapUnavailable("the answer is not JSON") from exc
