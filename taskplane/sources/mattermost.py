"""Mattermost over REST v4 and the WebSocket API (conformance matrix, "Mattermost" row).

At start ``GET /api/v4/users/me`` (``MATTERMOST_TOKEN``) names the bot user; the
WebSocket (``/api/v4/websocket``) is authenticated with an
``authentication_challenge``. A failure there is a start failure.

Each ``posted`` event is handled in order: a post in an allowed channel
(``MATTERMOST_ALLOWED_CHANNELS``, all if unset) that mentions the bot, or any post in
a direct channel with it, is work; the bot's own posts, system posts and other posts
are non-work, folded into one durable counter per channel/classification in the
checkpoint; a ``posted`` event that cannot be read gets exact ``source.evidence``.

Identity: principal ``mattermost:`` + h(server URL, bot user ID); dedupe key
``event:`` + h(post ID); conversation ``conversation:`` + h(channel ID, root post
ID, which is the post's own ID when it is top-level). The checkpoint records the last
accepted post ID once the post was accepted (or refused as a permanent outcome), and
per channel the last post handled (work or not, ``channels``). The WebSocket has no
replay, so a transient failure (the agent's queue full, the store or the server
unavailable) retries the retained parsed event, with backoff, on the same connection;
and on every connection, right after the socket is authenticated and before its first
frame is read, the posts made while it was not connected are read through REST from
those channel cursors and taken the same way
(:mod:`taskplane.sources.mattermost_catchup`, bounded). After acceptance the bot adds its
``white_check_mark`` reaction (operation ``handled:<post ID>``, idempotent: the same
reaction again is a no-op).

The reply is one post at the post's root (``root_id``). Mattermost has no idempotency
key and the source does no lookup, so the reply uses the ``ambiguous`` policy: an
unknown outcome is never sent again automatically; a definite refusal (``4xx``) is
retried. A dropped WebSocket reconnects with backoff (1 s doubling to 30 s).
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import httpx
import trio
from trio_websocket import ConnectionClosed, HandshakeError, WebSocketConnection, open_websocket_url

from taskplane.actors.native import Recovery
from taskplane.actors.outbound import DeliveryFailed, ProviderRejected
from taskplane.backoff import backoff
from taskplane.errors import Refused, TaskplaneError
from taskplane.model.types import Part
from taskplane.settings import MattermostSettings
from taskplane.sources.base import Event, Result, Sender, SourceContext, load_state
from taskplane.sources.identity import source_identifier
from taskplane.sources.mattermost_api import (
    TIMEOUT_S,
    MattermostApi,
    MattermostRateLimited,
    MattermostRejected,
    MattermostUnavailable,
    authenticate,
    websocket_url,
)
from taskplane.sources.mattermost_catchup import (
    Channel,
    Cursor,
    catch_up,
    read_cursors,
    usernames,
    watched_channels,
)
from taskplane.sources.receipt import acknowledge
from taskplane.sources.retained import take_retained

log = logging.getLogger("taskplane.sources.mattermost")

NAME = "mattermost"
RECEIPT_EMOJI = "white_check_mark"
RETRY_FIRST_S = 1.0
RETRY_CAP_S = 30.0


def retry_later(exc: BaseException) -> bool:
    """The Mattermost source's one provider-error decision: ``True`` keeps the
    retained event and retries it on the same connection (the server is unavailable
    or rate limits, or the plane answered anything but
    :class:`~taskplane.errors.Refused`); ``False`` is a permanent outcome (the post is
    refused with evidence, or its receipt is given up with a log line)."""
    if isinstance(exc, DeliveryFailed):
        return exc.__cause__ is None or retry_later(exc.__cause__)
    if isinstance(exc, MattermostUnavailable | MattermostRateLimited):
        return True
    if isinstance(exc, Refused):
        return False
    return isinstance(exc, TaskplaneError)  # transient, or a fault of the plane


@attrs.frozen
class Post:
    """One ``posted`` event, read.

    Attributes:
        id, channel_id, root_id, user_id, message: the post's fields (``root_id`` is
            the post's own ID when it is top-level).
        channel_type: ``O`` open, ``P`` private, ``D`` direct, ``G`` group.
        channel_name, sender_name: as the event names them (display only).
        mentions: the user IDs the post mentions.
        kind: the post ``type`` (empty for a user's post, ``system_...`` otherwise).
        created_ms: the server's ``create_at`` (Unix ms; 0 when the event lacks it).
    """

    id: str
    channel_id: str
    root_id: str
    user_id: str
    message: str
    channel_type: str = "O"
    channel_name: str = ""
    sender_name: str = ""
    mentions: frozenset[str] = frozenset()
    kind: str = ""
    created_ms: int = 0


def parse_posted(frame: Mapping[str, Any]) -> Post:
    """The :class:`Post` of a ``posted`` event (its ``data.post`` and
    ``data.mentions`` are JSON strings).

    Raises:
        ValueError: the post is missing or lacks an ID, channel or user.
    """
    data = frame.get("data")
    if not isinstance(data, dict) or not isinstance(data.get("post"), str):
        raise ValueError("a posted event needs data.post")
    post = json.loads(data["post"])
    if not isinstance(post, dict):
        raise ValueError("data.post is not a JSON object")
    fields = (post.get("id"), post.get("channel_id"), post.get("user_id"))
    if not all(isinstance(f, str) and f for f in fields):
        raise ValueError("the post lacks its id, channel_id or user_id")
    raw_mentions = data.get("mentions")
    mentions = json.loads(raw_mentions) if isinstance(raw_mentions, str) else []
    return Post(
        id=post["id"],
        channel_id=post["channel_id"],
        root_id=str(post.get("root_id") or post["id"]),
        user_id=post["user_id"],
        message=str(post.get("message", "")),
        channel_type=str(data.get("channel_type", "O")),
        channel_name=str(data.get("channel_name", "")),
        sender_name=str(data.get("sender_name", "")),
        mentions=frozenset(str(m) for m in mentions) if isinstance(mentions, list) else frozenset(),
        kind=str(post.get("type") or ""),
        created_ms=post["create_at"] if isinstance(post.get("create_at"), int) else 0,
    )


def mentions_of(message: str, username: str, user_id: str) -> frozenset[str]:
    """``{user_id}`` when ``message`` mentions ``@username`` (case-insensitive, not
    inside a longer name), else empty: the REST post has no ``mentions`` field, so
    the catch-up finds the bot's mention in the text as the server does."""
    if not username:
        return frozenset()
    pattern = rf"(?<![A-Za-z0-9_.@-])@{re.escape(username)}(?![A-Za-z0-9_-]|\.[A-Za-z0-9_-])"
    return frozenset({user_id}) if re.search(pattern, message, re.IGNORECASE) else frozenset()


def rest_post(
    raw: Mapping[str, Any], channel: Channel, sender: str, bot_username: str, bot_user: str
) -> Post:
    """The :class:`Post` of a REST post of ``channel`` (listed by the catch-up),
    read like the WebSocket's ``posted`` event of the same post: ``sender`` is the
    ``@username`` the event's ``sender_name`` carries (empty when unknown).

    Raises:
        ValueError: the post lacks an ID, channel or user.
    """
    fields = (raw.get("id"), raw.get("channel_id"), raw.get("user_id"))
    if not all(isinstance(f, str) and f for f in fields):
        raise ValueError("the post lacks its id, channel_id or user_id")
    message = str(raw.get("message", ""))
    return Post(
        id=raw["id"],
        channel_id=raw["channel_id"],
        root_id=str(raw.get("root_id") or raw["id"]),
        user_id=raw["user_id"],
        message=message,
        channel_type=channel.type,
        channel_name=channel.name,
        sender_name=sender,
        mentions=mentions_of(message, bot_username, bot_user),
        kind=str(raw.get("type") or ""),
        created_ms=raw["create_at"] if isinstance(raw.get("create_at"), int) else 0,
    )


def classify(post: Post, bot_user: str, allowed: frozenset[str]) -> str:
    """``work``, or the non-work classification: ``own-post``, ``system``,
    ``channel-not-allowed`` or ``not-a-mention``."""
    if post.user_id == bot_user:
        return "own-post"
    if post.kind:
        return "system"
    if allowed and post.channel_id not in allowed:
        return "channel-not-allowed"
    if post.channel_type == "D" or bot_user in post.mentions:
        return "work"
    return "not-a-mention"


def post_event(principal: str, post: Post) -> Event:
    """The :class:`Event` of a work post."""
    where = f"~{post.channel_name}" if post.channel_name else post.channel_id
    author = post.sender_name or post.user_id
    return Event(
        principal=principal,
        identity=(post.id,),
        conversation=(post.channel_id, post.root_id),
        parts=(Part(text=f"Mattermost message from {author} in {where}:\n{post.message}"),),
        locator={
            "channelId": post.channel_id,
            "postId": post.id,
            "rootId": post.root_id,
            "userId": post.user_id,
        },
    )


def advanced(state: dict[str, Any], post: Post) -> dict[str, Any]:
    """``state`` with ``post``'s channel cursor (``channels``: ``{channel ID:
    {"postId", "at"}}``, where the catch-up resumes) moved to ``post``, unless the
    post lacks its ``create_at`` or is older than the cursor."""
    channels = state.get("channels")
    channels = dict(channels) if isinstance(channels, dict) else {}
    known = read_cursors(channels).get(post.channel_id)
    if post.created_ms <= 0 or (known is not None and known.at_ms > post.created_ms):
        return state
    channels[post.channel_id] = {"postId": post.id, "at": post.created_ms}
    return {**state, "channels": channels}


@attrs.define(eq=False)
class MattermostSource:
    """The Mattermost source; see the module docstring."""

    url: str
    token: str = attrs.field(repr=False)
    allowed_channels: frozenset[str] = frozenset()
    name: str = NAME
    recovery: Recovery = "ambiguous"
    supports_anchors: bool = False
    clock: Callable[[], float] = time.time
    _api: MattermostApi | None = None
    _bot_user: str = ""
    _bot_username: str = ""

    @classmethod
    def from_settings(cls, settings: MattermostSettings) -> MattermostSource:
        """The source ``settings`` describe: ``MATTERMOST_URL`` and
        ``MATTERMOST_TOKEN`` (required), ``MATTERMOST_ALLOWED_CHANNELS`` (channel IDs).

        Raises:
            ValueError: the URL or the token is not set (the message names both).
        """
        if not settings.url or not settings.token:
            raise ValueError("the mattermost source needs MATTERMOST_URL and MATTERMOST_TOKEN")
        return cls(settings.url, settings.token, frozenset(settings.allowed_channels))

    async def run(
        self, ctx: SourceContext, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Name the bot and connect (failures before ``started`` are start failures),
        then serve events, reconnecting as needed, until cancelled."""
        async with httpx.AsyncClient(timeout=TIMEOUT_S) as client:
            api = MattermostApi(client, self.url, self.token)
            me = await api.request("GET", "/users/me")
            self._bot_user = str(me["id"])
            self._bot_username = str(me.get("username") or "")
            principal = source_identifier("mattermost", self.url, self._bot_user)
            self._api = api
            started = False
            delays = backoff(RETRY_FIRST_S, RETRY_CAP_S)
            try:
                while True:
                    try:
                        async with open_websocket_url(websocket_url(self.url)) as ws:
                            await authenticate(ws, self.token)
                            if not started:
                                task_status.started()
                                started = True
                            delays = backoff(RETRY_FIRST_S, RETRY_CAP_S)
                            caught = await self.catch_up(ctx, principal)
                            await self._serve(ctx, ws, principal, caught)
                    except (
                        ConnectionClosed,
                        HandshakeError,
                        OSError,
                        MattermostRejected,
                        MattermostUnavailable,
                    ) as exc:
                        if not started:
                            raise
                        delay = next(delays)
                        log.warning(
                            "mattermost connection lost (%r); reconnecting in %.0f s",
                            exc,
                            delay,
                            extra={"event": "source_reconnecting", "source": self.name},
                        )
                        await trio.sleep(delay)
            finally:
                self._api = None

    async def catch_up(self, ctx: SourceContext, principal: str) -> set[str]:
        """Take every watched channel's posts the WebSocket did not deliver (see
        :mod:`taskplane.sources.mattermost_catchup`), each through :meth:`take` like a
        WebSocket post; return the IDs taken, which the connection then skips.

        The first connection ever arms the catch-up: it records ``catchUpFrom`` (the
        local clock, Unix ms) in the checkpoint and takes nothing older. A channel the
        bot may not read, or whose answer is not a post list, is logged and skipped.

        Raises:
            MattermostUnavailable, MattermostRateLimited: the connection retries.
        """
        api = self._connected()
        now_ms = int(self.clock() * 1000)
        state = await load_state(ctx, principal)
        origin = state.get("catchUpFrom")
        if not isinstance(origin, int):
            origin = now_ms
            await ctx.save_checkpoint(principal, {**state, "catchUpFrom": origin})
            return set()
        cursors = read_cursors(state.get("channels"))
        caught: set[str] = set()
        names: dict[str, str] = {}

        async def take(raws: list[dict[str, Any]]) -> None:
            unknown = sorted({str(r.get("user_id")) for r in raws} - names.keys())
            if unknown:
                names.update({i: "" for i in unknown})  # asked once, even if unknown
                names.update(await usernames(api, unknown))
            for raw in raws:
                sender = names.get(str(raw.get("user_id")), "")
                try:
                    post = rest_post(raw, channel, sender, self._bot_username, self._bot_user)
                except ValueError as exc:
                    await ctx.evidence("malformed", {"error": str(exc), "channelId": channel.id})
                    continue
                caught.add(post.id)
                await self._retained(ctx, principal, post)

        for channel in await watched_channels(api, self.allowed_channels):
            cursor = cursors.get(channel.id, Cursor(None, origin))
            try:
                taken = await catch_up(api, channel, cursor, now_ms, take)
            except MattermostRateLimited:
                raise
            except (MattermostRejected, ValueError) as exc:
                log.warning(
                    "mattermost channel %s not caught up: %s",
                    channel.id,
                    exc,
                    extra={"event": "source_catchup_failed", "source": self.name},
                )
                continue
            if taken:
                log.info(
                    "mattermost channel %s: %d missed posts caught up",
                    channel.id,
                    taken,
                    extra={"event": "source_caught_up", "source": self.name},
                )
        return caught

    async def _serve(
        self, ctx: SourceContext, ws: WebSocketConnection, principal: str, caught: set[str]
    ) -> None:
        while True:
            raw = await ws.get_message()
            try:
                frame = json.loads(raw)
            except ValueError:
                frame = None
            if not isinstance(frame, dict) or frame.get("event") != "posted":
                continue  # hello, typing, status changes, replies to our actions
            try:
                post = parse_posted(frame)
            except ValueError as exc:
                await ctx.evidence("malformed", {"error": str(exc), "seq": str(frame.get("seq"))})
                continue
            if post.id in caught:
                continue  # made while the catch-up read: taken already
            await self._retained(ctx, principal, post)

    async def _retained(self, ctx: SourceContext, principal: str, post: Post) -> None:
        """Take ``post`` until its outcome is durable, retrying a transient failure
        with backoff on the same connection (the WebSocket cannot replay it)."""
        await take_retained(
            lambda: self.take(ctx, principal, post),
            retry_later=retry_later,
            delays=backoff(RETRY_FIRST_S, RETRY_CAP_S),
            wait_of=lambda exc: exc.wait_s if isinstance(exc, MattermostRateLimited) else None,
            log=log,
            what=f"mattermost post {post.id}",
            source=self.name,
        )

    async def take(self, ctx: SourceContext, principal: str, post: Post) -> None:
        """Accept, count or refuse one post, then its receipt.

        Raises:
            an error :func:`retry_later` keeps: nothing durable changed for the post
                beyond what a retry repeats harmlessly (a duplicate, the same receipt).
        """
        kind = classify(post, self._bot_user, self.allowed_channels)
        state = await load_state(ctx, principal)
        if kind != "work":
            counters = dict(state.get("nonWork", {}))
            key = f"{post.channel_id}/{kind}"
            counters[key] = counters.get(key, 0) + 1
            await ctx.save_checkpoint(principal, advanced({**state, "nonWork": counters}, post))
            return
        try:
            task_id = await ctx.ingest(post_event(principal, post))
        except TaskplaneError as exc:
            if retry_later(exc):
                raise
            await ctx.evidence("refused", {"postId": post.id, "error": str(exc)})
            await ctx.save_checkpoint(principal, advanced({**state, "lastPostId": post.id}, post))
            return
        await ctx.save_checkpoint(principal, advanced({**state, "lastPostId": post.id}, post))
        await self._receipt(ctx, task_id, post)

    async def _receipt(self, ctx: SourceContext, task_id: str, post: Post) -> None:
        body = {"user_id": self._bot_user, "post_id": post.id, "emoji_name": RECEIPT_EMOJI}

        async def react() -> str:
            await self._connected().request("POST", "/reactions", body=body)
            return f"{post.id}:{RECEIPT_EMOJI}"

        await acknowledge(
            ctx,
            task_id,
            f"handled:{post.id}",
            json.dumps(body),
            react,
            retry_later=retry_later,
            log=log,
            what=f"the receipt of post {post.id}",
            source=self.name,
        )

    def _connected(self) -> MattermostApi:
        if self._api is None:
            raise ProviderRejected("the mattermost source is not connected")
        return self._api

    def sender(self, result: Result) -> Sender:
        """One post at the root of the exact post's thread (``ambiguous`` policy)."""
        body = {
            "channel_id": result.locator["channelId"],
            "root_id": result.locator["rootId"],
            "message": result.text,
            "props": {"taskplane_delivery_id": result.delivery.delivery_id},
        }

        async def send() -> str:
            post = await self._connected().request("POST", "/posts", body=body)
            return str(post["id"])

        return Sender(send=send)
