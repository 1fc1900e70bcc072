"""Catching up on the Zulip messages no event queue carried.

An event queue only holds what was sent while it existed: when Zulip drops one
(``BAD_EVENT_QUEUE_ID``, a queue nobody polled for about ten minutes: an outage, a
long stop), the messages sent until its replacement was registered are on no queue.
So when the source registers a replacement while it knows the last message it
handled, it reads the messages after that one through ``GET /api/v1/messages`` and
takes each, oldest first, through the same path as a queue event.

The replacement is registered *first*, and the catch-up reads up to the
registration's ``max_message_id`` (the newest message the bot had received when the
queue was made): every message up to it is in the listing, every later one is on the
new queue, so nothing falls between the two. Reading first and registering after
would leave a window (a message sent between the last page and the registration is
on neither). A message on both (a race at the boundary) is taken twice, and the
second take makes no second Task: the claim key is the message ID.

The server's rules this relies on (Zulip API, "Get messages"): ``anchor=<message
ID>`` with ``include_anchor=false``, ``num_before=0`` and ``num_after=N`` lists at
most ``N`` messages with a larger ID, sorted by ID; the anchor need not exist (a
deleted message is still a position); ``found_newest`` says the listing reached the
newest match; at most 5000 messages per request, 1000 recommended. ``narrow=[]`` is
the bot's own message history, the same messages its queue receives (the queue is
registered without a narrow), each with its ``flags``; the source then decides what is
work exactly as for a queue event (a narrow cannot say "direct message *or*
mention": a narrow's terms all hold at once). ``apply_markdown=false`` gives the
Markdown source, as the queue does.

Bounds (rule "Bad input is bounded the same way on every intake path"): at most
:data:`MAX_PAGES` requests of :data:`NUM_AFTER` messages per catch-up, and nothing
sent more than :data:`MAX_AGE_S` before it. Both are logged when they cut
(``source_catchup_truncated``, ``source_catchup_too_old``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from taskplane.sources.zulip_api import ZulipApi

log = logging.getLogger("taskplane.sources.zulip")

NUM_AFTER = 1000
"""Messages asked for per request (Zulip's recommended batch)."""
MAX_PAGES = 10
"""Requests per catch-up: at most ``MAX_PAGES * NUM_AFTER`` messages are read."""
MAX_AGE_S = 24 * 3600.0
"""Messages sent longer ago than this, in seconds, are not caught up."""


def page_params(after: int) -> dict[str, object]:
    """The query of one page: the messages after message ID ``after``."""
    return {
        "anchor": after,
        "include_anchor": False,
        "num_before": 0,
        "num_after": NUM_AFTER,
        "narrow": [],
        "apply_markdown": False,
    }


def listed_messages(body: Mapping[str, Any], after: int) -> list[dict[str, Any]]:
    """The messages of a ``GET /messages`` answer with an ID above ``after``, by ID.

    Raises:
        ValueError: ``body`` has no ``messages`` list.
    """
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise ValueError("a message listing needs its messages")
    kept = [
        dict(m)
        for m in messages
        if isinstance(m, Mapping) and isinstance(m.get("id"), int) and m["id"] > after
    ]
    return sorted(kept, key=lambda m: int(m["id"]))


async def catch_up(
    api: ZulipApi,
    after: int,
    upto: int | None,
    now_s: float,
    take: Callable[[dict[str, Any]], Awaitable[None]],
) -> int:
    """Read the messages with an ID above ``after`` and up to ``upto`` (``None``: up
    to the newest), and ``await take(message)`` for each, oldest first; ``take``
    returns once the message is handled durably. ``now_s`` is Unix time. Returns the
    number of messages taken.

    Raises:
        ValueError: an answer is not a message listing.
        ZulipRateLimited, ZulipRejected, ZulipUnavailable: from the request.
    """
    floor_s = now_s - MAX_AGE_S
    taken = too_old = 0
    for _ in range(MAX_PAGES):
        body = await api.call("GET", "/messages", page_params(after))
        messages = listed_messages(body, after)
        for message in messages:
            if upto is not None and message["id"] > upto:
                return _done(taken, too_old)
            timestamp = message.get("timestamp")
            if isinstance(timestamp, int | float) and timestamp < floor_s:
                too_old += 1
            else:
                await take(message)
                taken += 1
            after = message["id"]
        if not messages or body.get("found_newest") or len(messages) < NUM_AFTER:
            return _done(taken, too_old)
        if upto is not None and after >= upto:
            return _done(taken, too_old)
    log.warning(
        "zulip catch-up stopped after %d requests (%d messages); newer missed messages "
        "are not taken",
        MAX_PAGES,
        taken,
        extra={"event": "source_catchup_truncated", "source": "zulip"},
    )
    return _done(taken, too_old)


def _done(taken: int, too_old: int) -> int:
    if too_old:
        log.warning(
            "zulip catch-up: %d messages older than %.0f h were not taken",
            too_old,
            MAX_AGE_S / 3600,
            extra={"event": "source_catchup_too_old", "source": "zulip"},
        )
    return taken
