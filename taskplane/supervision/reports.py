"""Crash reports: one structured log event and one optional channel message per crash.

Reporting must never delay a restart (rule "reports never delay restarts"): the log
call is synchronous, and
the report is offered with ``send_nowait`` and dropped when the channel is full or its
receiver is gone. Consumers that must not miss crashes read the log, not the channel.

Log events (logger ``taskplane.supervision``; the ``extra`` keys become attributes of
the :class:`logging.LogRecord`):

* ``event="actor_crashed"`` at ERROR with ``exc_info``: ``actor``, ``error_type``,
  ``at``, ``restarts_in_window``, ``max_restarts``, ``period_s``, ``escalated``.
* ``event="actor_escalated"`` at ERROR (the traceback is on the crash event just
  before it): ``actor``, ``at``, ``restarts_in_window``, ``max_restarts``, ``period_s``.
* ``event="actor_returned"`` at WARNING: a ``PERMANENT`` child returned and is
  restarted (counts towards intensity, but is not a crash).
* ``event="crash_report_dropped"`` at WARNING: the report channel could not take it.
"""

from __future__ import annotations

import logging

import attrs
import trio

from .policy import RestartPolicy

__all__ = ["CRASH_REPORT_BUFFER_SIZE", "LOGGER_NAME", "CrashReport"]

LOGGER_NAME = "taskplane.supervision"
CRASH_REPORT_BUFFER_SIZE = 64
"""Suggested size (reports) of the bounded channel handed to supervisors."""

log = logging.getLogger(LOGGER_NAME)


def _type_name(exc: BaseException) -> str:
    cls = type(exc)
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


@attrs.frozen
class CrashReport:
    """One crash of one supervised child, as sent to a reports channel.

    The record keeps strings, not the exception, so it is immutable, hashable and does
    not pin the crashed incarnation's frames in memory; the traceback is in the log.

    Attributes:
        child: the :class:`ChildSpec` name (str).
        error_type: the exception's class, ``module.QualName`` (bare for builtins).
        error_repr: ``repr()`` of the exception.
        at: trio clock reading (:func:`trio.current_time`, seconds) when the
            supervisor saw the crash; comparable only with that same clock.
        restarts_in_window: restarts counted in the policy window including the one this
            crash asks for (int >= 1). Above ``max_restarts`` means the supervisor
            escalated instead (``escalated`` is then true). 0 for a ``TEMPORARY`` child,
            which is never restarted.
        escalated: true when this crash made the supervisor raise
            :class:`RestartIntensityExceeded`.
    """

    child: str
    error_type: str
    error_repr: str
    at: float
    restarts_in_window: int
    escalated: bool = False

    @classmethod
    def from_exception(
        cls,
        child: str,
        exc: BaseException,
        *,
        at: float,
        restarts_in_window: int,
        escalated: bool = False,
    ) -> CrashReport:
        """Build a report for ``exc`` (pure; never raises)."""
        return cls(child, _type_name(exc), repr(exc), at, restarts_in_window, escalated)


def _emit_crash(
    report: CrashReport,
    exc: BaseException,
    policy: RestartPolicy,
    reports: trio.MemorySendChannel[CrashReport] | None,
) -> None:
    """Log ``actor_crashed`` and offer ``report`` to ``reports`` without blocking."""
    log.error(
        "actor %s crashed: %s (%d restarts in %g s window, max %d)",
        report.child,
        report.error_repr,
        report.restarts_in_window,
        policy.period_s,
        policy.max_restarts,
        exc_info=exc,
        extra={
            "event": "actor_crashed",
            "actor": report.child,
            "error_type": report.error_type,
            "at": report.at,
            "restarts_in_window": report.restarts_in_window,
            "max_restarts": policy.max_restarts,
            "period_s": policy.period_s,
            "escalated": report.escalated,
        },
    )
    if reports is None:
        return
    try:
        reports.send_nowait(report)
    except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError) as why:
        # Full, reader gone, or (a caller bug) closed: never let reporting block or kill
        # a restart. ClosedResourceError is included for the last reason.
        log.warning(
            "crash report for %s dropped (%s)",
            report.child,
            type(why).__name__,
            extra={"event": "crash_report_dropped", "actor": report.child},
        )


def _emit_escalation(child: str, at: float, restarts: int, policy: RestartPolicy) -> None:
    """Log ``actor_escalated`` (the supervisor is about to raise)."""
    log.error(
        "actor %s: %d restarts within %g s exceed max_restarts=%d; escalating",
        child,
        restarts,
        policy.period_s,
        policy.max_restarts,
        extra={
            "event": "actor_escalated",
            "actor": child,
            "at": at,
            "restarts_in_window": restarts,
            "max_restarts": policy.max_restarts,
            "period_s": policy.period_s,
        },
    )


def _emit_return(child: str, at: float, restarts: int, policy: RestartPolicy) -> None:
    """Log ``actor_returned``: a PERMANENT child returned normally and will restart."""
    log.warning(
        "permanent actor %s returned; restarting (%d restarts in %g s window)",
        child,
        restarts,
        policy.period_s,
        extra={
            "event": "actor_returned",
            "actor": child,
            "at": at,
            "restarts_in_window": restarts,
            "max_restarts": policy.max_restarts,
            "period_s": policy.period_s,
        },
    )
