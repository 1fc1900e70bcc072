"""GitHub notifications (conformance matrix, "GitHub" row).

Polls ``GET /notifications`` (unread threads) every ``GITHUB_POLL_INTERVAL_S``
seconds, or the server's ``X-Poll-Interval`` if that is longer, with
``If-Modified-Since`` set to the last ``Last-Modified``. Each issue or pull-request
thread revision is one event: identity ``<thread id>@<updated_at>``, conversation =
repository + subject kind + number. After acceptance the thread is marked read
(operation ``mark-read:<id>@<updated_at>``, idempotent). Other subject kinds are
non-work and owners outside ``GITHUB_NOTIFY_ORGS`` are dropped: both are recorded as
``source.evidence`` once and checkpointed. The checkpoint (``Last-Modified`` and the
revisions already classified, per API base and numeric account ID) advances only
after every listed revision was accepted or classified.

The result is one comment on the exact issue or pull request, with the delivery ID
in a hidden HTML comment; after an unknown outcome the subject's comments are listed
to find it again (recovery ``lookup``). Rate limits wait, never spin.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import attrs
import httpx
import trio

from taskplane.actors.native import Recovery
from taskplane.actors.outbound import DeliveryFailed, ProviderRejected
from taskplane.errors import Refused, TaskplaneError
from taskplane.model.types import Part
from taskplane.settings import GitHubSettings
from taskplane.sources.base import Event, Result, Sender, SourceContext
from taskplane.sources.github_api import (
    DEFAULT_API_URL,
    TIMEOUT_S,
    GitHubApi,
    GitHubRejected,
    GitHubUnavailable,
    RateLimited,
    next_link,
)
from taskplane.sources.identity import source_identifier

log = logging.getLogger("taskplane.sources.github")

NAME = "github"
DEFAULT_POLL_INTERVAL_S = 60.0
ERROR_BACKOFF_S = 5.0
WORK_KINDS = {"Issue": "issues", "PullRequest": "pulls"}
MARKER = "<!-- taskplane-delivery: {} -->"
_NUMBER = re.compile(r"/(issues|pulls)/(\d+)$")


@attrs.define(eq=False)
class GitHubSource:
    """The GitHub notifications source; see the module docstring."""

    token: str
    api_url: str = DEFAULT_API_URL
    orgs: frozenset[str] = frozenset()
    poll_interval_s: float = DEFAULT_POLL_INTERVAL_S
    name: str = NAME
    recovery: Recovery = "lookup"
    supports_anchors: bool = False
    _api: GitHubApi | None = None

    @classmethod
    def from_settings(cls, settings: GitHubSettings) -> GitHubSource:
        """The source ``settings`` describe: ``GITHUB_TOKEN`` (required),
        ``GITHUB_API_URL``, ``GITHUB_NOTIFY_ORGS`` (owners, folded to lower case),
        ``GITHUB_POLL_INTERVAL_S`` (seconds, 1..86400).

        Raises:
            ValueError: the token is not set (the message names ``GITHUB_TOKEN``).
        """
        if not settings.token:
            raise ValueError("the github source needs GITHUB_TOKEN")
        return cls(
            token=settings.token,
            api_url=settings.api_url,
            orgs=frozenset(settings.notify_orgs),
            poll_interval_s=settings.poll_interval_s,
        )

    async def run(
        self, ctx: SourceContext, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Authenticate (``GET /user``; a failure is a start failure), then poll."""
        async with httpx.AsyncClient(timeout=TIMEOUT_S) as client:
            api = GitHubApi(client, self.api_url, self.token)
            user = await api.get_json("/user")
            principal = source_identifier("github", self.api_url, str(user["id"]))
            self._api = api
            task_status.started()
            try:
                while True:
                    wait_s = await self.poll(ctx, api, principal)
                    await trio.sleep(wait_s)
            finally:
                self._api = None

    async def poll(self, ctx: SourceContext, api: GitHubApi, principal: str) -> float:
        """One poll; returns the seconds to wait before the next."""
        checkpoint = await ctx.load_checkpoint(principal)
        state: dict[str, Any] = checkpoint if isinstance(checkpoint, dict) else {}
        headers = {"If-Modified-Since": state["lastModified"]} if state.get("lastModified") else {}
        try:
            response = await api.request(
                "GET", "/notifications", params={"all": "false", "per_page": "50"}, headers=headers
            )
        except RateLimited as exc:
            log.warning("%s", exc, extra={"event": "source_rate_limited", "source": self.name})
            return exc.wait_s
        except (GitHubRejected, GitHubUnavailable) as exc:
            log.warning("%s", exc, extra={"event": "source_poll_failed", "source": self.name})
            return ERROR_BACKOFF_S
        interval = max(self.poll_interval_s, _float(response.headers.get("X-Poll-Interval")))
        if response.status_code == 304:
            return interval
        threads_json = response.json()
        if not isinstance(threads_json, list) or not all(isinstance(t, dict) for t in threads_json):
            log.warning("unexpected notifications body", extra={"event": "source_poll_failed"})
            return ERROR_BACKOFF_S
        seen = set(state.get("seen", ()))
        now_seen: list[str] = []
        threads = sorted(threads_json, key=lambda t: str(t.get("updated_at", "")))
        for thread in threads:
            key = f"{thread.get('id')}@{thread.get('updated_at')}"
            if not await self._take(ctx, api, principal, thread, classified=key in seen):
                return min(interval, ERROR_BACKOFF_S)  # the checkpoint stays
            now_seen.append(key)
        last_modified = response.headers.get("Last-Modified")
        await ctx.save_checkpoint(principal, {"lastModified": last_modified, "seen": now_seen})
        return interval

    async def _take(
        self,
        ctx: SourceContext,
        api: GitHubApi,
        principal: str,
        thread: dict[str, Any],
        *,
        classified: bool,
    ) -> bool:
        """Accept or classify one thread revision; ``False``: retry the batch later."""
        subject = thread.get("subject") or {}
        repo = thread.get("repository") or {}
        kind = subject.get("type")
        owner = str((repo.get("owner") or {}).get("login", "")).lower()
        found = _NUMBER.search(str(subject.get("url", "")))
        reason = None
        if kind not in WORK_KINDS:
            reason = "non-work"
        elif self.orgs and owner not in self.orgs:
            reason = "owner-not-allowed"
        elif (
            found is None
            or not thread.get("id")
            or not thread.get("updated_at")
            or not isinstance(repo.get("full_name"), str)
        ):
            reason = "malformed"
        if reason is not None:
            if not classified:
                await ctx.evidence(
                    reason, {"threadId": str(thread.get("id")), "subjectType": str(kind)}
                )
            return True
        assert found is not None and isinstance(kind, str)
        try:
            event = await self._event(api, principal, thread, kind, found.group(2))
            task_id = await ctx.ingest(event)
        except (GitHubUnavailable, RateLimited):
            return False  # the provider's answer was unknown or delayed: retry the batch
        except Refused as exc:  # permanent: classified with evidence
            await ctx.evidence("refused", {"threadId": str(thread["id"]), "error": str(exc)})
            return True
        except TaskplaneError:
            return False  # not recorded (transient, or a fault): retry the batch
        revision = f"{thread['id']}@{thread['updated_at']}"

        async def mark_read() -> str:
            await api.request("PATCH", f"/notifications/threads/{thread['id']}")
            return revision

        try:
            await ctx.deliver(task_id, f"mark-read:{revision}", revision, mark_read)
        except (DeliveryFailed, TaskplaneError) as exc:
            log.warning(
                "mark-read %s failed: %s", revision, exc, extra={"event": "source_ack_failed"}
            )
            return False
        return True

    async def _event(
        self, api: GitHubApi, principal: str, thread: dict[str, Any], kind: str, number: str
    ) -> Event:
        subject = thread["subject"]
        full_name = str(thread["repository"]["full_name"])
        lines = [
            f"GitHub notification ({thread.get('reason', 'unknown')}) on {full_name}"
            f" {kind} #{number}: {subject.get('title', '')}"
        ]
        if subject.get("latest_comment_url"):
            comment = await api.get_json(str(subject["latest_comment_url"]))
            author = (comment.get("user") or {}).get("login", "someone")
            lines.append(f"Latest comment by {author}:\n{comment.get('body') or ''}")
        locator = {
            "apiBase": self.api_url,
            "repository": full_name,
            "kind": kind,
            "number": number,
            "threadId": str(thread["id"]),
            "updatedAt": str(thread["updated_at"]),
        }
        return Event(
            principal=principal,
            identity=(f"{thread['id']}@{thread['updated_at']}",),
            conversation=(full_name, kind, number),
            parts=(Part(text="\n\n".join(lines)),),
            locator=locator,
        )

    def sender(self, result: Result) -> Sender:
        """One comment on the exact issue or pull request; lookup by the hidden marker."""
        path = f"/repos/{result.locator['repository']}/issues/{result.locator['number']}/comments"
        marker = MARKER.format(result.delivery.delivery_id)
        body = f"{result.text}\n\n{marker}"

        def api() -> GitHubApi:
            if self._api is None:
                raise ProviderRejected("the github source is not connected")
            return self._api

        async def send() -> str:
            response = await api().request("POST", path, json={"body": body})
            return str(response.json()["id"])

        async def reconcile() -> str | None:
            url: str | None = path
            pages = 0
            while url is not None and pages < 50:
                response = await api().request("GET", url, params={"per_page": "100"})
                for comment in response.json():
                    if marker in str(comment.get("body", "")):
                        return str(comment["id"])
                url, pages = next_link(response), pages + 1
            return None

        return Sender(send=send, reconcile=reconcile)


def _float(value: str | None) -> float:
    try:
        return float(value) if value else 0.0
    except ValueError:
        return 0.0
