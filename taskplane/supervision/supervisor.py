"""Static supervisors: :func:`supervise` (one child) and the strategy helpers.

OTP semantics on trio (docs/design-rules.md):

* :func:`supervise` runs one child and restarts it per its :class:`RestartType`, with
  restart intensity (rule "bounded restarts") and an optional capped exponential backoff.
* :func:`one_for_one` gives every child its own :func:`supervise` (rule "one supervise
  per child"): each child
  has its own intensity window, and one child's escalation cancels the others and
  propagates.
* :func:`one_for_all` restarts every child when one crashes; :func:`rest_for_one`
  restarts the crashed child and the ones started after it. Both count intensity for
  the group, start children in list order and stop them in reverse order.

Error handling, common to all of them:

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
  intensity, the supervisor cancels its children and raises
  :class:`RestartIntensityExceeded` chained from that crash.

The helpers collapse an exception group holding exactly one ``Exception`` to that
exception at their boundary, so a parent sees :class:`RestartIntensityExceeded` itself,
just as from :func:`supervise`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import trio

from ._common import (
    _account_restart,
    _being_cancelled,
    _check_unique,
    _IncarnationStatus,
    _report_unrestarted,
    _reraise_leaf,
    _RestartWindow,
    _single_leaf,
)
from ._group import _Group, _Strategy
from .policy import ChildSpec, RestartPolicy, RestartType
from .reports import CrashReport

__all__ = ["one_for_all", "one_for_one", "rest_for_one", "supervise"]


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
    await _supervise(spec, policy, reports, task_status, None)


async def _supervise(
    spec: ChildSpec,
    policy: RestartPolicy,
    reports: trio.MemorySendChannel[CrashReport] | None,
    task_status: trio.TaskStatus[Any],
    on_restart: Callable[[], None] | None,
) -> None:
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
                _report_unrestarted(spec.name, exc, 0, policy, reports)
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
        if on_restart is not None:
            on_restart()
        # Always a checkpoint, so a child that fails without one cannot starve cancellation.
        await trio.sleep(policy.backoff_delay_s(restarts))
        first = False
        status = _IncarnationStatus(None)


async def one_for_one(
    specs: Sequence[ChildSpec],
    policy: RestartPolicy,
    reports: trio.MemorySendChannel[CrashReport] | None = None,
    *,
    task_status: trio.TaskStatus[tuple[Any, ...]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Supervise ``specs`` independently, each with its own :func:`supervise`
    (rule "one supervise per child").

    Children start in order, each only after the previous one called ``started()``.
    Each child has its own intensity window over ``policy`` (this differs from OTP,
    where a ``one_for_one`` supervisor counts restarts of all children together).

    Args:
        specs: children with unique names.
        policy: restart intensity and backoff, applied per child.
        reports: as for :func:`supervise`; shared by all children.
        task_status: ``started(values)`` once every child started; ``values`` is the
            tuple of the children's started values, in ``specs`` order.

    Returns:
        When every child's supervision ended normally (see :func:`supervise`).

    Raises:
        ValueError: duplicate names. TypeError: an item is not a :class:`ChildSpec`.
        RestartIntensityExceeded: a child escalated; the others were cancelled first.
        Exception: a child failed its first start (the others are cancelled).
        ExceptionGroup: several children failed at once (rare; same tick).

    Concurrency: runs one task per child in its own nursery; cancel-safe.
    """
    specs = _check_unique(specs)
    try:
        async with trio.open_nursery() as nursery:
            values = [await nursery.start(supervise, spec, policy, reports) for spec in specs]
            task_status.started(tuple(values))
    except BaseExceptionGroup as group:
        leaf = _single_leaf(group)
        if leaf is None:
            raise
        _reraise_leaf(leaf)


async def one_for_all(
    specs: Sequence[ChildSpec],
    policy: RestartPolicy,
    reports: trio.MemorySendChannel[CrashReport] | None = None,
    *,
    task_status: trio.TaskStatus[tuple[Any, ...]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Supervise ``specs`` as a unit: a crash restarts every child (OTP ``one_for_all``).

    Children start in list order, each after the previous one called ``started()``.
    When a child crashes (or a PERMANENT child returns), the others are cancelled in
    reverse start order, each awaited until it has exited, then -- after the backoff --
    all are started again in order. Intensity is counted for the group: one window
    holds the restarts of every child. A TRANSIENT child that returns, and a TEMPORARY
    child that ends either way, is dropped without touching the others; a TEMPORARY
    child cancelled by a group restart is dropped too (never restarted).

    Args:
        specs: children with unique names.
        policy: restart intensity and backoff for the group.
        reports: as for :func:`supervise`.
        task_status: ``started(values)`` once all children started the first time;
            ``values`` is the tuple of their started values in ``specs`` order.

    Returns:
        When every child has been dropped (see above).

    Raises:
        ValueError: duplicate names. TypeError: an item is not a :class:`ChildSpec`.
        RestartIntensityExceeded: the group exceeded ``policy``; all children were
            cancelled first; ``__cause__`` is the last crash.
        Exception: a child failed its first start, or a child raised while being
            cancelled by a group restart (both end the group; nothing is restarted).

    Concurrency: one task per child plus this controller; cancel-safe. A restart that
    fails before the new incarnation calls ``started()`` counts as a crash of that child.
    """
    await _run_group(_Strategy.ONE_FOR_ALL, specs, policy, reports, task_status)


async def rest_for_one(
    specs: Sequence[ChildSpec],
    policy: RestartPolicy,
    reports: trio.MemorySendChannel[CrashReport] | None = None,
    *,
    task_status: trio.TaskStatus[tuple[Any, ...]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Like :func:`one_for_all`, but a crash of child *k* restarts only children *k..n*.

    Children started before the crashed one keep running (OTP ``rest_for_one``): use it
    when later children depend on earlier ones. Everything else -- ordering, group
    intensity, restart types, errors, ``task_status`` -- is as for :func:`one_for_all`.
    """
    await _run_group(_Strategy.REST_FOR_ONE, specs, policy, reports, task_status)


async def _run_group(
    strategy: _Strategy,
    specs: Sequence[ChildSpec],
    policy: RestartPolicy,
    reports: trio.MemorySendChannel[CrashReport] | None,
    task_status: trio.TaskStatus[tuple[Any, ...]],
) -> None:
    group = _Group(strategy, _check_unique(specs), policy, reports)
    try:
        await group.run(task_status)
    except BaseExceptionGroup as eg:
        leaf = _single_leaf(eg)
        if leaf is None:
            raise
        _reraise_leaf(leaf)
