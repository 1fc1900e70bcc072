"""Garbage-collector settings of the ``taskplane serve`` process.

Every request allocates thousands of short-lived container objects (records,
messages, channels, cancel scopes). With CPython's default thresholds
``(700, 10, 10)`` the cyclic collector runs every few requests, and every hundred
young collections it scans every object the process holds (some 65,000 of them are
modules, classes and functions that live as long as the process) on the trio thread
while every request waits: that scan was the largest part of the tail latency of a
busy server (blocking sends at 16 connections: p99 64-88 ms with the defaults,
46-54 ms with the startup objects frozen; ``bench/README.md``).

So the server (only the server process: the library never touches a process-wide
setting) raises the young generation's threshold to ``TASKPLANE_GC_GEN0``
allocations and makes middle and full collections rarer (``GEN1_THRESHOLD``,
``GEN2_THRESHOLD``: they stalled SSE fan-out to 1,000 streams), and once it is
listening moves everything that exists then (modules, the claim index,
configuration) to the permanent generation with
:func:`gc.freeze`, which later full collections skip. Reference counting still frees
almost everything at once; only reference cycles wait for the next collection, so
memory grows by at most one young generation's worth of cyclic garbage.
"""

from __future__ import annotations

import gc
import logging

log = logging.getLogger("taskplane.cli")

GEN1_THRESHOLD = 50
"""Young collections between two collections of the middle generation (CPython: 10).

A middle collection walks every object that survived a young one since the last, so
with 1,000 open SSE streams (a few hundred thousand long-lived objects arriving) and
CPython's 10 it stopped the event loop for 35-65 ms every ~0.6 s of fan-out traffic
(``bench/README.md``, sse_fanout.py); with 50 they come 5x less often."""
GEN2_THRESHOLD = 100
"""Middle-generation collections between two full collections (CPython: 10; it also
waits until the long-lived objects grew by a quarter). A full collection walks the
whole heap: 100-330 ms with 1,000 open streams."""


def raise_thresholds(gen0: int) -> None:
    """Collect the young generation every ``gen0`` net container allocations.

    ``gen0 == 0`` keeps CPython's defaults.
    """
    if gen0:
        gc.set_threshold(gen0, GEN1_THRESHOLD, GEN2_THRESHOLD)


def freeze_startup_objects() -> None:
    """Collect once, then exempt every object alive now from later collections.

    Logs ``gc_tuned`` (INFO) with the thresholds and the number of objects frozen.
    """
    gc.collect()
    gc.freeze()
    thresholds = list(gc.get_threshold())
    log.info(
        "garbage collector: thresholds %s, %d startup objects frozen",
        thresholds,
        gc.get_freeze_count(),
        extra={"event": "gc_tuned", "thresholds": thresholds, "frozen": gc.get_freeze_count()},
    )
