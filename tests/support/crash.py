"""A crash button: the ``crash_hook`` of :class:`~taskplane.app.PlaneOptions` that
makes an actor's loop raise ``RuntimeError("drill")`` a set number of times (STYLE
SUP-4 restart drills)."""

from __future__ import annotations

from collections import Counter


class CrashButton:
    """A ``CrashHook`` that crashes the next ``n`` loop iterations of an actor kind."""

    def __init__(self) -> None:
        self.armed: Counter[str] = Counter()
        self.fired: Counter[str] = Counter()

    def arm(self, kind: str, n: int = 1) -> None:
        self.armed[kind] += n

    def disarm(self) -> None:
        self.armed.clear()

    def __call__(self, kind: str) -> None:
        if self.armed[kind] > 0:
            self.armed[kind] -= 1
            self.fired[kind] += 1
            raise RuntimeError("drill")
