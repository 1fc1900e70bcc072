"""Taking one retained provider item until its outcome is durable.

A push source (a WebSocket, an EventSource, a subprocess's stdout) cannot ask its
provider to send an item again, so it keeps the item it read and retries taking it,
on the same connection, until the take is durable (accepted, counted or refused) or
fails for good. Design rules "Failure is visible" and "A rate limit is a wait, not a
retry loop": each retry is logged as ``source_event_retry`` and spaced by the source's
backoff, or by the wait its provider's rate limit asked for. Which errors are
transient is each source's own ``retry_later``."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterator

import trio


def no_wait(exc: Exception) -> float | None:
    """For a source whose errors carry no provider wait: always ``None``."""
    return None


async def take_retained(
    take: Callable[[], Awaitable[None]],
    *,
    retry_later: Callable[[BaseException], bool],
    delays: Iterator[float],
    wait_of: Callable[[Exception], float | None] = no_wait,
    log: logging.Logger,
    what: str,
    source: str,
) -> None:
    """Await ``take()`` until it returns.

    Args:
        take: one attempt at the item; returns once its outcome is durable.
        retry_later: true for an error after which the same item is tried again.
        delays: the seconds to sleep before each retry (``taskplane.backoff.backoff``),
            unless ``wait_of`` gives the provider's wait for that error.
        wait_of: the seconds a rate limit asked for, else ``None``.
        log, what, source: the logger, the item's name in the warning (``"mattermost
            post <id>"``) and the source's name in its ``source`` field.

    Raises:
        the first error ``retry_later`` does not keep (``trio.Cancelled``, like any
        other ``BaseException`` that is not an ``Exception``, passes through untouched).
    """
    while True:
        try:
            await take()
            return
        except Exception as exc:
            if not retry_later(exc):
                raise
            wait = wait_of(exc)
            if wait is None:
                wait = next(delays)
            log.warning(
                "%s not taken yet (%s); retrying in %.0f s",
                what,
                exc,
                wait,
                extra={"event": "source_event_retry", "source": source},
            )
            await trio.sleep(wait)
