"""Forgejo / Gitea notifications (conformance matrix, "Forgejo" row).

Polls ``GET /api/v1/notifications`` (unread threads, paged) every
``FORGEJO_POLL_INTERVAL_S`` seconds with ``since`` on the forge's clock: the newest
``updated_at`` already taken, less ``SINCE_OVERLAP_S``; the revisions taken within
that overlap are kept in the checkpoint so none is taken twice. Each issue or pull
request thread revision is one event: identity ``<thread id>@<updated_at>``,
conversation the subject's exact API path (``/api/v1/repos/o/r/issues/3``). Other
subject kinds are non-work, recorded once as ``source.evidence``. The checkpoint
(``since`` and the revision set, per forge URL and login) is saved after each
revision was accepted or classified; a transient failure holds it. With
``FORGEJO_NOTIFY_MARK_READ`` on, the thread is marked read after acceptance
(operation ``mark-read:<thread id>``, idempotent; ``404`` means it is handled; a
mark-read the forge refuses otherwise is logged, ``source_ack_failed``, and left).

The result is one comment on the exact issue or pull request, with the delivery ID
in a hidden HTML comment; after an unknown outcome the subject's comments are listed
to find it again (recovery ``lookup``).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

import attrs
import httpx
import trio

from taskplane.actors.native import Recovery
from taskplane.actors.outbound import DeliveryFailed, ProviderRejected
from taskplane.backoff import backoff
from taskplane.errors import Refused, TaskplaneError
from taskplane.model.types import Part
from taskplane.settings import ForgejoSettings
from taskplane.sources.base import Event, Result, Sender, SourceContext
from taskplane.sources.forgejo_api import (
    TIMEOUT_S,
    ForgejoApi,
    ForgejoRateLimited,
    ForgejoRejected,
    ForgejoUnavailable,
)
from taskplane.sources.identity import source_identifier
from taskplane.sources.receipt import acknowledge

log = logging.getLogger("taskplane.sources.forgejo")

NAME = "forgejo"
WORK_KINDS = {"Issue": "issues", "Pull": "pulls"}
PAGE_LIMIT = 50
MAX_PAGES = 20
SINCE_OVERLAP_S = 60.0
"""Seconds of forge clock listed again at every poll (the ``since`` filter's edge)."""
RETRY_FIRST_S = 1.0
RETRY_CAP_S = 300.0
MARKER = "<!-- taskplane-delivery: {} -->"
_SUBJECT = re.compile(r"/repos/([^/]+/[^/]+)/(issues|pulls)/(\d+)$")


def retry_later(exc: BaseException) -> bool:
    """The Forgejo source's one provider-error decision: ``True`` holds the
    checkpoint and lists the revision again at the next poll (the forge is
    unavailable or rate limits, or the plane answered anything but
    :class:`~taskplane.errors.Refused`); ``False`` is a permanent outcome (the
    revision is set aside with evidence)."""
    if isinstance(exc, DeliveryFailed):  # a mark-read: retried unless the forge refused it
        return exc.__cause__ is None or retry_later(exc.__cause__)
    if isinstance(exc, ForgejoUnavailable | ForgejoRateLimited):
        return True
    if isinstance(exc, Refused):
        return False
    return isinstance(exc, TaskplaneError)  # transient, or a fault of the plane


def forge_time(value: object) -> datetime | None:
    """An ``updated_at`` (RFC 3339, any offset) as an aware UTC datetime, or ``None``."""
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed.astimezone(UTC) if parsed.tzinfo else None


def since_param(since: datetime) -> str:
    """The ``since`` query value: ``since`` less the overlap, RFC 3339 in UTC."""
    return (since - timedelta(seconds=SINCE_OVERLAP_S)).strftime("%Y-%m-%dT%H:%M:%SZ")


def subject_of(thread: dict[str, Any]) -> tuple[str, str, str, str] | None:
    """``(API path, repository, kind, number)`` of an issue or pull request thread,
    or ``None`` when the subject is not one (or is malformed)."""
    subject = thread.get("subject") or {}
    if subject.get("type") not in WORK_KINDS:
        return None
    path = urlsplit(str(subject.get("url", ""))).path
    found = _SUBJECT.search(path)
    if found is None:
        return None
    return path, found.group(1), str(subject["type"]), found.group(3)


@attrs.frozen
class Cursor:
    """The checkpoint: the newest ``updated_at`` taken and the revisions taken within
    the overlap before it (``<thread id>@<updated_at>``)."""

    since: datetime | None = None
    seen: frozenset[str] = frozenset()

    @classmethod
    def of(cls, value: object) -> Cursor:
        """The cursor in a stored JSON value (``{"since", "seen"}``)."""
        if not isinstance(value, dict):
            return cls()
        seen = value.get("seen")
        return cls(forge_time(value.get("since")), frozenset(seen or ()))

    def taken(self, key: str, updated: datetime) -> Cursor:
        """The cursor after revision ``key`` (updated at ``updated``) was taken."""
        since = updated if self.since is None or updated > self.since else self.since
        edge = since - timedelta(seconds=SINCE_OVERLAP_S)
        keep = {k for k in {*self.seen, key} if (forge_time(k.partition("@")[2]) or edge) >= edge}
        return Cursor(since, frozenset(keep))

    def value(self) -> dict[str, object]:
        """The JSON value stored."""
        since = self.since.strftime("%Y-%m-%dT%H:%M:%SZ") if self.since else None
        return {"since": since, "seen": sorted(self.seen)}


@attrs.define(eq=False)
class ForgejoSource:
    """The Forgejo / Gitea notifications source; see the module docstring."""

    url: str
    token: str = attrs.field(repr=False)
    mark_read: bool = False
    poll_interval_s: float = 60.0
    name: str = NAME
    recovery: Recovery = "lookup"
    supports_anchors: bool = False
    _api: ForgejoApi | None = None
    _login: str = ""
    _delays: Iterator[float] = attrs.field(factory=lambda: backoff(RETRY_FIRST_S, RETRY_CAP_S))

    @classmethod
    def from_settings(cls, settings: ForgejoSettings) -> ForgejoSource:
        """The source ``settings`` describe: ``FORGEJO_URL`` and ``FORGEJO_TOKEN``
        (required), ``FORGEJO_NOTIFY_MARK_READ``, ``FORGEJO_POLL_INTERVAL_S``.

        Raises:
            ValueError: the URL or the token is not set (the message names both).
        """
        if not settings.url or not settings.token:
            raise ValueError("the forgejo source needs FORGEJO_URL and FORGEJO_TOKEN")
        return cls(settings.url, settings.token, settings.mark_read, settings.poll_interval_s)

    async def run(
        self, ctx: SourceContext, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Name the account (``GET /api/v1/user``; a failure is a start failure), then
        poll until cancelled."""
        async with httpx.AsyncClient(timeout=TIMEOUT_S) as client:
            api = ForgejoApi(client, self.url, self.token)
            user = await api.get_json("/user")
            self._login = str(user["login"])
            principal = source_identifier("forgejo", self.url, self._login)
            self._api = api
            task_status.started()
            try:
                while True:
                    wait_s = await self.poll(ctx, api, principal)
                    await trio.sleep(wait_s)
            finally:
                self._api = None

    async def poll(self, ctx: SourceContext, api: ForgejoApi, principal: str) -> float:
        """One poll; returns the seconds to wait before the next."""
        cursor = Cursor.of(await ctx.load_checkpoint(principal))
        try:
            threads = await self._list(api, cursor)
        except (ForgejoRateLimited, ForgejoRejected, ForgejoUnavailable) as exc:
            limited = isinstance(exc, ForgejoRateLimited)
            log.warning(
                "%s",
                exc,
                extra={
                    "event": "source_rate_limited" if limited else "source_poll_failed",
                    "source": self.name,
                },
            )
            return exc.wait_s if isinstance(exc, ForgejoRateLimited) else next(self._delays)
        for thread, updated in threads:
            key = f"{thread['id']}@{thread['updated_at']}"
            if key in cursor.seen:
                continue
            try:
                await self._take(ctx, api, principal, thread)
            except Exception as exc:
                if not retry_later(exc):
                    raise
                log.warning(
                    "forgejo revision %s not taken yet: %s",
                    key,
                    exc,
                    extra={"event": "source_event_retry", "source": self.name},
                )
                return exc.wait_s if isinstance(exc, ForgejoRateLimited) else next(self._delays)
            cursor = cursor.taken(key, updated)
            await ctx.save_checkpoint(principal, cursor.value())
        self._delays = backoff(RETRY_FIRST_S, RETRY_CAP_S)
        return self.poll_interval_s

    async def _list(self, api: ForgejoApi, cursor: Cursor) -> list[tuple[dict[str, Any], datetime]]:
        """The unread threads since the cursor, oldest first (malformed ones left out:
        without an ID and ``updated_at`` a revision cannot be named)."""
        params = {"status-types": "unread", "limit": str(PAGE_LIMIT)}
        if cursor.since is not None:
            params["since"] = since_param(cursor.since)
        found: list[tuple[dict[str, Any], datetime]] = []
        for page in range(1, MAX_PAGES + 1):
            listed = await api.get_json("/notifications", {**params, "page": str(page)})
            if not isinstance(listed, list):
                raise ForgejoUnavailable("the notifications answer is not a list")
            for thread in listed:
                updated = forge_time(thread.get("updated_at")) if isinstance(thread, dict) else None
                if updated is not None and thread.get("id") is not None:
                    found.append((thread, updated))
            if len(listed) < PAGE_LIMIT:
                break
        return sorted(found, key=lambda pair: pair[1])

    async def _take(
        self, ctx: SourceContext, api: ForgejoApi, principal: str, thread: dict[str, Any]
    ) -> None:
        """Accept or classify one revision, then mark it read (when configured).

        Raises:
            an error :func:`retry_later` keeps (a retry repeats harmlessly).
        """
        subject = subject_of(thread)
        record = {"threadId": str(thread["id"]), "updatedAt": str(thread["updated_at"])}
        if subject is None:
            kind = str((thread.get("subject") or {}).get("type"))
            await ctx.evidence("non-work", {**record, "subjectType": kind})
            return
        try:
            task_id = await ctx.ingest(await self._event(api, principal, thread, subject))
        except Refused as exc:
            await ctx.evidence("refused", {**record, "error": str(exc)})
            return
        if self.mark_read:
            await self._mark_read(ctx, api, task_id, str(thread["id"]))

    async def _mark_read(
        self, ctx: SourceContext, api: ForgejoApi, task_id: str, thread_id: str
    ) -> None:
        async def mark() -> str:
            try:
                await api.request(
                    "PATCH", f"/notifications/threads/{thread_id}", params={"to-status": "read"}
                )
            except ForgejoRejected as exc:
                if exc.status != 404:
                    raise  # 404: gone or already handled
            return f"read:{thread_id}"

        await acknowledge(
            ctx,
            task_id,
            f"mark-read:{thread_id}",
            thread_id,
            mark,
            retry_later=retry_later,
            log=log,
            what=f"mark-read of thread {thread_id}",
            source=self.name,
        )

    async def _event(
        self,
        api: ForgejoApi,
        principal: str,
        thread: dict[str, Any],
        subject: tuple[str, str, str, str],
    ) -> Event:
        path, repository, kind, number = subject
        title = str((thread.get("subject") or {}).get("title", ""))
        lines = [f"Forgejo notification on {repository} {kind} #{number}: {title}"]
        latest = (thread.get("subject") or {}).get("latest_comment_url")
        if latest:
            try:
                comment = await api.get_json(str(latest))
            except ForgejoRejected as exc:
                if isinstance(exc, ForgejoRateLimited):
                    raise
                lines.append(f"(The latest comment could not be read: {exc}.)")
            else:
                author = (comment.get("user") or {}).get("login", "someone")
                lines.append(f"Latest comment by {author}:\n{comment.get('body') or ''}")
        return Event(
            principal=principal,
            identity=(f"{thread['id']}@{thread['updated_at']}",),
            conversation=(path,),
            parts=(Part(text="\n\n".join(lines)),),
            locator={
                "url": self.url,
                "subject": path,
                "repository": repository,
                "kind": kind,
                "number": number,
                "threadId": str(thread["id"]),
                "updatedAt": str(thread["updated_at"]),
            },
        )

    def sender(self, result: Result) -> Sender:
        """One comment on the exact issue or pull request; lookup by the hidden marker."""
        path = f"/repos/{result.locator['repository']}/issues/{result.locator['number']}/comments"
        marker = MARKER.format(result.delivery.delivery_id)
        body = f"{result.text}\n\n{marker}"

        def api() -> ForgejoApi:
            if self._api is None:
                raise ProviderRejected("the forgejo source is not connected")
            return self._api

        async def send() -> str:
            response = await api().request("POST", path, json={"body": body})
            return str(response.json()["id"])

        async def reconcile() -> str | None:
            for page in range(1, MAX_PAGES + 1):
                params = {"page": str(page), "limit": str(PAGE_LIMIT)}
                comments = await api().get_json(path, params)
                for comment in comments:
                    mine = (comment.get("user") or {}).get("login") == self._login
                    if mine and marker in str(comment.get("body", "")):
                        return str(comment["id"])
                if len(comments) < PAGE_LIMIT:
                    return None
            return None

        return Sender(send=send, reconcile=reconcile)
