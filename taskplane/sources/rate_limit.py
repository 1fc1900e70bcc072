"""How long a native source waits when its provider rate-limits it.

Rule "A rate limit is a wait, not a retry loop": every provider client turns a rate
limit answer into one wait, and every wait is at least :data:`MIN_WAIT_S` (1 s) and at
most :data:`MAX_WAIT_S` (1 h), whatever the provider asked for. Which headers or body
fields carry the wait, and the default when none does, are each provider's own and stay
in its client module."""

from __future__ import annotations

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
