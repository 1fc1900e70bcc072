"""How long a native source waits when its provider rate-limits it.

Rule "A rate limit is a wait, not a retry loop": every provider client turns a rate
limit answer into one wait, and every wait is at least :data:`MIN_WAIT_S` (1 s) and at
most :data:`MAX_WAIT_S` (1 h), whatever the provider asked for. Which headers or body
fields carry the wait, and the default when none does, are each provider's own and stay
in its client module. A poll loop held by a transient failure sleeps what
:func:`held_poll_wait` says: the provider's wait after a rate limit, else its backoff."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import httpx

MIN_WAIT_S = 1.0
"""The shortest wait after a rate limit, in seconds."""
MAX_WAIT_S = 3600.0
"""The longest wait after a rate limit, in seconds."""


def clamp_wait(seconds: float) -> float:
    """``seconds`` bounded to ``[MIN_WAIT_S, MAX_WAIT_S]``."""
    return max(MIN_WAIT_S, min(MAX_WAIT_S, seconds))


def header_wait(response: httpx.Response, *headers: str) -> float | None:
    """The first of ``headers`` on ``response`` that holds a whole number of seconds,
    bounded by :func:`clamp_wait`; ``None`` when none does."""
    for header in headers:
        raw = response.headers.get(header, "").strip()
        if raw.isdigit():
            return clamp_wait(float(raw))
    return None


def held_poll_wait(
    exc: Exception,
    *,
    limited_wait: float | None,
    delays: Iterator[float],
    log: logging.Logger,
    what: str,
    source: str,
) -> float:
    """The seconds a poll loop sleeps after a transient failure ``exc`` of one poll,
    logged once (rule "Failure is visible").

    Args:
        limited_wait: the provider's wait when ``exc`` is a rate limit (the warning is
            then ``source_rate_limited``), else ``None`` (``source_poll_failed``, and
            the wait is ``next(delays)``).
        what: what was held, in the warning (``"jmap sync"``).
        source: the source's name in the warning's ``source`` field.
    """
    wait = next(delays) if limited_wait is None else limited_wait
    log.warning(
        "%s held (%s); retrying in %.0f s",
        what,
        exc,
        wait,
        extra={
            "event": "source_poll_failed" if limited_wait is None else "source_rate_limited",
            "source": source,
        },
    )
    return wait
