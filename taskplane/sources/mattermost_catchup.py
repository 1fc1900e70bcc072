"""Catching up on the Mattermost posts the WebSocket did not deliver.

The WebSocket has no replay: a post made while taskplane was not connected (a
restart, a crash, a dropped connection) never arrives on it. So on every connection,
right after the socket is authenticated and before its first frame is read, the
source reads each watched channel's posts after that channel's cursor through REST
v4 (``GET /api/v4/channels/{channel_id}/posts``) and takes them, oldest first,
through the same path as a WebSocket post. Reading after the socket is open leaves no
gap (a post made after the authentication is on the socket, one made before is in the
listing); a post made in between is seen twice, and the second is skipped (the
claim key is the post ID, so even a second take would make no second Task).

The server's rules this relies on (Mattermost API reference, "Get posts for a
channel"): the answer is a post list ``{"order": [IDs, newest first], "posts": {ID:
post}, ...}`` whose ``posts`` may also hold the thread roots of the listed posts, so
only the IDs in ``order`` are taken; ``after=<post ID>`` lists the posts created
after that post, oldest first in pages of ``per_page`` (at most 200); ``since=<ms>``
lists every post *modified* since then (edits and deletions too, at most 1000, not
paged and not necessarily consecutive) and must not be combined with ``page``,
``per_page`` or ``after``.

Paging moves the cursor, not the page number: each page is ``after=<the last post
taken>&page=0``, so a post deleted while the catch-up reads cannot shift a later page
past an unread post. When ``after`` lists nothing, the cursor post may be gone (a
deleted post, pruned history: the server then lists nothing at all), so the channel
is asked once with ``since=<the cursor's create_at>`` and only posts created after it
are kept; a channel with no cursor yet starts that way from the time catch-up was
first armed.

Bounds (rule "Bad input is bounded the same way on every intake path"): at most
:data:`MAX_PAGES` requests of :data:`PER_PAGE` posts per channel and connection, and
nothing created more than :data:`MAX_AGE_S` before the catch-up. Both are logged
when they cut (``source_catchup_truncated``, ``source_catchup_too_old``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import attrs
import trio

from taskplane.sources.mattermost_api import MattermostApi, MattermostRateLimited

log = logging.getLogger("taskplane.sources.mattermost")

PER_PAGE = 200
MAX_PAGES = 10
MAX_AGE_S = 24 * 3600.0
RATE_LIMIT_TRIES = 5


@attrs.frozen
class Channel:
    """A channel the catch-up reads: its ``id``, ``type`` (``O``, ``P``, ``D``,
    ``G``) and ``name`` (the handle the WebSocket's ``channel_name`` carries)."""

    id: str
    type: str = "O"
    name: str = ""


@attrs.frozen
class Cursor:
    """Where a channel's catch-up starts: after ``post_id`` (``None``: no post of
    the channel handled yet), and after ``at_ms`` (the server's ``create_at`` of that
    post, or the time catch-up was armed), in Unix milliseconds."""

    post_id: str | None
    at_ms: int


def read_cursors(value: object) -> dict[str, Cursor]:
    """The per-channel cursors of a checkpoint's ``channels`` field
    (``{channel ID: {"postId": ..., "at": ms}}``); unreadable entries are left out."""
    cursors: dict[str, Cursor] = {}
    if not isinstance(value, Mapping):
        return cursors
    for channel_id, entry in value.items():
        if isinstance(entry, Mapping) and isinstance(entry.get("at"), int):
            post_id = entry.get("postId")
            cursors[str(channel_id)] = Cursor(
                post_id if isinstance(post_id, str) and post_id else None, entry["at"]
            )
    return cursors


def listed_posts(body: object, after_ms: int) -> list[dict[str, Any]]:
    """The posts of a post list ``body`` that are listed in its ``order``, not
    deleted and created after ``after_ms``, oldest first (``create_at``, then ID).

    Raises:
        ValueError: ``body`` is not a post list.
    """
    if not isinstance(body, Mapping):
        raise ValueError("a post list is a JSON object")
    order, posts = body.get("order"), body.get("posts")
    if not isinstance(order, list) or not isinstance(posts, Mapping):
        raise ValueError("a post list needs order and posts")
    kept = []
    for post_id in order:
        post = posts.get(post_id)
        if not isinstance(post, Mapping) or not isinstance(post.get("create_at"), int):
            continue
        if post.get("delete_at") or post["create_at"] <= after_ms:
            continue
        kept.append(dict(post))
    return sorted(kept, key=lambda p: (p["create_at"], str(p.get("id", ""))))


async def watched_channels(api: MattermostApi, allowed: frozenset[str]) -> list[Channel]:
    """The channels the source takes work from: the bot's channels of every team and
    its direct and group channels (``GET /users/me/channels``), only those in
    ``allowed`` when it is not empty.

    Raises:
        MattermostRateLimited, MattermostRejected, MattermostUnavailable.
    """
    listed = await get(api, "/users/me/channels", {})
    channels = []
    for raw in listed if isinstance(listed, list) else []:
        if not isinstance(raw, Mapping) or not isinstance(raw.get("id"), str):
            continue
        if allowed and raw["id"] not in allowed:
            continue
        channels.append(Channel(raw["id"], str(raw.get("type") or "O"), str(raw.get("name") or "")))
    return channels


async def get(
    api: MattermostApi, path: str, params: Mapping[str, str | int], *, body: Any = None
) -> Any:
    """``GET path`` with ``params`` (or ``POST`` ``body`` when it is given: a read
    such as ``/users/ids``), waiting out a ``429`` (the server's
    ``X-Ratelimit-Reset``, rule "A rate limit is a wait, not a retry loop") at most
    :data:`RATE_LIMIT_TRIES` times.

    Raises:
        MattermostRateLimited: still limited after the last wait.
        MattermostRejected, MattermostUnavailable.
    """
    for attempt in range(RATE_LIMIT_TRIES):
        try:
            if body is not None:
                return await api.request("POST", path, params=params, body=body)
            return await api.request("GET", path, params=params)
        except MattermostRateLimited as exc:
            if attempt == RATE_LIMIT_TRIES - 1:
                raise
            await trio.sleep(exc.wait_s)
    raise AssertionError("unreachable")


async def usernames(api: MattermostApi, user_ids: list[str]) -> dict[str, str]:
    """``{user ID: "@username"}`` for ``user_ids`` (``POST /users/ids``; an unknown
    ID is left out), the ``sender_name`` a WebSocket ``posted`` event carries.

    Raises:
        MattermostRateLimited, MattermostRejected, MattermostUnavailable.
    """
    users = await get(api, "/users/ids", {}, body=user_ids)
    names: dict[str, str] = {}
    for user in users if isinstance(users, list) else []:
        if isinstance(user, Mapping) and isinstance(user.get("id"), str):
            names[user["id"]] = f"@{user.get('username', '')}"
    return names


async def catch_up(
    api: MattermostApi,
    channel: Channel,
    cursor: Cursor,
    now_ms: int,
    take: Callable[[list[dict[str, Any]]], Awaitable[None]],
) -> int:
    """Read ``channel``'s posts after ``cursor`` and ``await take(batch)`` for each
    batch, oldest first; ``take`` returns once every post of the batch is handled
    durably. Returns the number of posts taken.

    Raises:
        ValueError: an answer is not a post list.
        MattermostRateLimited, MattermostRejected, MattermostUnavailable.
    """
    path = f"/channels/{channel.id}/posts"
    floor_ms = now_ms - int(MAX_AGE_S * 1000)
    if cursor.at_ms < floor_ms:
        log.warning(
            "mattermost channel %s: posts older than %.0f h are not caught up",
            channel.id,
            MAX_AGE_S / 3600,
            extra={"event": "source_catchup_too_old", "source": "mattermost"},
        )
        cursor = Cursor(None, floor_ms)
    asked_since = False
    taken = 0
    for _ in range(MAX_PAGES):
        posts: list[dict[str, Any]] = []
        if cursor.post_id is not None:
            page: dict[str, str | int] = {"after": cursor.post_id, "page": 0, "per_page": PER_PAGE}
            posts = listed_posts(await get(api, path, page), cursor.at_ms)
            if posts and len(posts) < PER_PAGE:
                await take(posts)
                return taken + len(posts)
        if not posts:
            if asked_since:
                return taken
            asked_since = True  # the cursor post may be gone: ask by its time, once
            posts = listed_posts(await get(api, path, {"since": cursor.at_ms}), cursor.at_ms)
            if not posts:
                return taken
        await take(posts)
        taken += len(posts)
        last = posts[-1]
        cursor = Cursor(str(last["id"]), int(last["create_at"]))
    log.warning(
        "mattermost channel %s: catch-up stopped after %d requests (%d posts); newer "
        "missed posts are not taken",
        channel.id,
        MAX_PAGES,
        taken,
        extra={"event": "source_catchup_truncated", "source": "mattermost"},
    )
    return taken
