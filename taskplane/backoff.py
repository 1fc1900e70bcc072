"""Capped exponential backoff: the delays every retry loop of taskplane waits.

A retry loop takes its delays from :func:`backoff`, one ``next()`` per failure, and
starts a fresh iterator when it succeeds; it keeps no counter and writes no formula.
A loop whose position can move back (a supervisor counts only the restarts inside
its sliding window) asks :func:`backoff_delay_s` for the ``n``-th delay instead. Both
compute the same sequence::

    first_s, 2 * first_s, 4 * first_s, ... , cap_s, cap_s, ...

Delays are plain seconds: the caller sleeps them with ``trio.sleep`` (so a
``MockClock`` drives every retry in tests) or adds them to ``trio.current_time()``.

Design rules "Failure is visible" and "bounded restarts": retries are spaced, never a
busy loop, and no delay grows without bound. This module imports nothing from the
package (a leaf).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

MAX_DOUBLINGS = 64
"""Doublings after which the delay stops growing (keeps ``first_s * 2**n`` finite)."""


def backoff_delay_s(first_s: float, cap_s: float, n: int) -> float:
    """The ``n``-th delay (1-based) of a capped exponential backoff, in seconds.

    Args:
        first_s: the first delay in seconds (>= 0).
        cap_s: the longest delay in seconds (``math.inf``: uncapped).
        n: which delay; 1 is the first. Values below 1 give 0.0 (nothing to wait).

    Returns:
        ``min(cap_s, first_s * 2 ** (n - 1))`` as a float. Doubling is exact in
        binary floating point, so ``backoff_delay_s(0.01, 1.0, 3)`` is exactly
        ``0.04`` (what ``40 / 1000`` gives). Pure; never raises.
    """
    if n < 1:
        return 0.0
    return float(min(cap_s, first_s * 2.0 ** min(n - 1, MAX_DOUBLINGS)))


def backoff(first_s: float, cap_s: float = math.inf) -> Iterator[float]:
    """An endless iterator of capped exponential delays in seconds.

    Args:
        first_s: the first delay in seconds (>= 0).
        cap_s: the longest delay in seconds (default: uncapped; a loop that stops
            after a few attempts needs no cap).

    Yields:
        ``backoff_delay_s(first_s, cap_s, n)`` for ``n = 1, 2, 3, ...``: ``first_s``,
        twice that, and so on, then ``cap_s`` forever. Never ends, never raises.

    Example::

        delays = backoff(1.0, 30.0)
        while True:
            try:
                return await connect()
            except OSError:
                await trio.sleep(next(delays))   # 1 s, 2 s, 4 s ... 30 s, 30 s
    """
    n = 1
    while True:
        yield backoff_delay_s(first_s, cap_s, n)
        n += 1
