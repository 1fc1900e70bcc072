"""Pieces shared by every supervisor: the intensity window, restart accounting,
the per-incarnation task status, and exception-group collapsing at API boundaries."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from typing import Any, NoReturn, final

import trio

from .policy import ChildSpec, RestartIntensityExceeded, RestartPolicy
from .reports import CrashReport, _emit_crash, _emit_escalation, _emit_return


@final
class _RestartWindow:
    """Restart timestamps (trio clock, s) within the last ``period_s``; inclusive edge."""

    __slots__ = ("_period_s", "_times")

    def __init__(self, policy: RestartPolicy) -> None:
        self._period_s = policy.period_s
        self._times: deque[float] = deque()

    def count(self, now: float) -> int:
        horizon = now - self._period_s
        while self._times and self._times[0] < horizon:
            self._times.popleft()
        return len(self._times)

    def record(self, now: float) -> int:
        # Escalation happens at max_restarts + 1 entries, so the deque stays small.
        self._times.append(now)
        return self.count(now)


def _account_restart(
    name: str,
    exc: Exception | None,
    window: _RestartWindow,
    policy: RestartPolicy,
    reports: trio.MemorySendChannel[CrashReport] | None,
) -> int:
    """Count one restart of ``name`` and report it; escalate past the intensity.

    ``exc`` is the crash, or ``None`` for a PERMANENT child's normal return. Returns the
    restarts now in the window. Raises RestartIntensityExceeded (chained from ``exc``)
    when that count exceeds ``policy.max_restarts``. Synchronous: no checkpoint.
    """
    now = trio.current_time()
    restarts = window.record(now)
    escalate = restarts > policy.max_restarts
    if exc is not None:
        report = CrashReport.from_exception(
            name, exc, at=now, restarts_in_window=restarts, escalated=escalate
        )
        _emit_crash(report, exc, policy, reports)
    elif not escalate:
        _emit_return(name, now, restarts, policy)
    if escalate:
        _emit_escalation(name, now, restarts, policy)
        raise RestartIntensityExceeded(name, restarts, policy) from exc
    return restarts


def _report_unrestarted(
    name: str,
    exc: Exception,
    restarts_in_window: int,
    policy: RestartPolicy,
    reports: trio.MemorySendChannel[CrashReport] | None,
) -> None:
    """Report a crash that asks for no restart (TEMPORARY child, or already restarting)."""
    report = CrashReport.from_exception(
        name, exc, at=trio.current_time(), restarts_in_window=restarts_in_window
    )
    _emit_crash(report, exc, policy, reports)


def _being_cancelled() -> bool:
    """True when an enclosing cancel scope of the current task has been cancelled.

    A crash seen then is not restarted: the new incarnation would die at its first
    checkpoint, and the error belongs to whoever is shutting us down.
    """
    return trio.current_effective_deadline() == -math.inf


@final
class _IncarnationStatus:
    """The ``task_status`` one incarnation receives.

    Records whether ``started()`` was called and forwards the value to ``forward``
    (the supervisor's own starter) -- only for the first incarnation.
    """

    __slots__ = ("_forward", "started_called")

    def __init__(self, forward: trio.TaskStatus[Any] | None) -> None:
        self._forward = forward
        self.started_called = False

    def started(self, value: Any = None) -> None:
        if self.started_called:
            raise RuntimeError("called 'started' twice on the same task status")
        self.started_called = True
        if self._forward is not None:
            self._forward.started(value)


def _check_unique(specs: Iterable[ChildSpec]) -> tuple[ChildSpec, ...]:
    specs = tuple(specs)
    seen: set[str] = set()
    for spec in specs:
        if not isinstance(spec, ChildSpec):
            raise TypeError(f"expected ChildSpec, got {spec!r}")
        if spec.name in seen:
            raise ValueError(f"duplicate child name {spec.name!r}")
        seen.add(spec.name)
    return specs


def _single_leaf(group: BaseExceptionGroup[BaseException]) -> Exception | None:
    """The only ``Exception`` in ``group`` once ``Cancelled`` leaves are set aside.

    ``None`` when there are several, or none, or a non-``Exception`` leaf. A Cancelled
    beside an error is dropped: the error is what the caller must see, exactly as when
    a task raises in its cleanup while being cancelled.
    """
    _, rest = group.split(trio.Cancelled)
    leaves: list[BaseException] = []
    pending: list[BaseException] = [] if rest is None else [rest]
    while pending:
        exc = pending.pop()
        if isinstance(exc, BaseExceptionGroup):
            pending.extend(exc.exceptions)
        else:
            leaves.append(exc)
    if len(leaves) == 1 and isinstance(leaves[0], Exception):
        return leaves[0]
    return None


def _reraise_leaf(leaf: Exception) -> NoReturn:
    """Raise ``leaf`` bare, keeping its own ``__context__`` (not the group's)."""
    context = leaf.__context__
    try:
        raise leaf
    finally:
        leaf.__context__ = context
        del leaf, context
