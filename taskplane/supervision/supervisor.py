"""The static supervisor: :func:`supervise` runs one child and restarts it.

OTP semantics on trio (docs/design-rules.md): :func:`supervise` restarts its child per
its :class:`RestartType`, with restart intensity (rule "bounded restarts") and an
optional capped exponential backoff. Several children each get their own
:func:`supervise` (rule "one supervise per child"), so each has its own intensity
window, and one child's escalation cancels its siblings and propagates.

Error handling:

* An :class:`Exception` escaping a child is a crash. :class:`trio.Cancelled` (and any
  other non-``Exception``) is never a crash: it propagates and ends supervision.
* A crash before a child's *first* ``task_status.started()`` is not restarted: the
  supervisor has not started yet, so the error propagates to whoever awaits
  ``nursery.start(...)`` (as an OTP supervisor fails when a child's init fails). A
  first incarnation that returns without calling ``started()`` raises
  :class:`RuntimeError` there, as :meth:`trio.Nursery.start` would.
* A crash that happens while the supervisor itself is being cancelled propagates
  unchanged and is not restarted.
* Every other crash is reported once (see :mod:`.reports`) and restarted, or, past the
  intensity, the supervisor raises :class:`RestartIntensityExceeded` chained from that
  crash.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any, final

import trio

from .policy import ChildSpec, RestartIntensityExceeded, RestartPolicy, RestartType
from .reports import CrashReport, _emit_crash, _emit_escalation, _emit_return

__all__ = ["supervise"]


async def supervise(
    spec: ChildSpec,
    policy: RestartPolicy,
    reports: trio.MemorySendChannel[CrashReport] | None = None,
    *,
    task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run one child under one-for-one restart semantics (OTP ``one_for_one``).

    The child runs in this task: ``await spec.start(task_status=...)`` is called once
    per incarnation, so ``spec.start`` must build fresh per-incarnation resources
    (for a mailbox, ``inbox.clone()``: see :class:`ChildSpec` and rule "inboxes outlive restarts").

    Args:
        spec: the child. ``spec.restart_type`` decides what a return or crash does.
        policy: restart intensity (``max_restarts`` per ``period_s`` seconds of trio's
            clock) and backoff before each restart.
        reports: borrowed, never closed: each crash is offered with ``send_nowait``
            and dropped if the channel is full or broken.
        task_status: ``started()`` is called exactly once, when the first incarnation
            calls its own ``started(value)``; ``value`` is forwarded, so
            ``await nursery.start(supervise, ...)`` returns it.

    Returns:
        When supervision ends normally: a TRANSIENT or TEMPORARY child returned, or a
        TEMPORARY child crashed (reported, not restarted). A PERMANENT child never
        ends supervision this way.

    Raises:
        RestartIntensityExceeded: a restart would exceed ``policy``; ``__cause__`` is
            the last crash. Logged as ``actor_escalated``.
        Exception: whatever the first incarnation raised before calling ``started()``,
            or a crash while this supervisor was being cancelled.
        RuntimeError: the first incarnation returned without calling ``started()``.

    Concurrency: blocks for the child's whole supervised life; cancel-safe (cancelling
    it cancels the child, and nothing is restarted). Backoff is ``trio.sleep`` and
    there is always a checkpoint between incarnations.
    """
    window = _RestartWindow(policy)
    status = _IncarnationStatus(task_status)
    first = True
    while True:
        try:
            await spec.start(task_status=status)
        except Exception as exc:
            if (first and not status.started_called) or _being_cancelled():
                raise
            if spec.restart_type is RestartType.TEMPORARY:
                _report_unrestarted(spec.name, exc, policy, reports)
                return
            restarts = _account_restart(spec.name, exc, window, policy, reports)
        else:
            if first and not status.started_called:
                raise RuntimeError(
                    f"child {spec.name!r} returned without calling task_status.started()"
                )
            if spec.restart_type is not RestartType.PERMANENT:
                return
            restarts = _account_restart(spec.name, None, window, policy, reports)
        # Always a checkpoint, so a child that fails without one cannot starve cancellation.
        await trio.sleep(policy.backoff_delay_s(restarts))
        first = False
        status = _IncarnationStatus(None)


# --- private pieces ----------------------------------------------------------------------


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
    policy: RestartPolicy,
    reports: trio.MemorySendChannel[CrashReport] | None,
) -> None:
    """Report the crash of a TEMPORARY child, which is never restarted."""
    report = CrashReport.from_exception(name, exc, at=trio.current_time(), restarts_in_window=0)
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
