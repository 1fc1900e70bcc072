"""A dynamic supervisor: children started on demand (OTP ``simple_one_for_one``).

Used for per-task owners and per-delivery serializers (ARCHITECTURE: "owners sup."):
the registry calls :meth:`DynamicSupervisor.start_child` when a Task first needs an
owner; each child gets its own :func:`supervise` loop, so intensity is per child; a
TRANSIENT child that returns (an owner that retired) is forgotten.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, final

import attrs
import trio

from ._common import _reraise_leaf, _single_leaf
from .policy import ChildSpec, RestartPolicy
from .reports import CrashReport
from .supervisor import _supervise

__all__ = ["DynamicSupervisor", "DynamicSupervisorStatistics", "open_dynamic_supervisor"]


@attrs.frozen
class DynamicSupervisorStatistics:
    """A snapshot of a :class:`DynamicSupervisor`, for metrics.

    Attributes:
        active_children: children currently supervised (running, or waiting out a
            restart backoff), including ones still starting (count).
        started_children: successful :meth:`~DynamicSupervisor.start_child` calls since
            the supervisor opened (count).
        restarts: restarts decided, over all children, since it opened (count; each
            is counted when the child's supervisor commits to it, before any backoff).
    """

    active_children: int
    started_children: int
    restarts: int


@final
class DynamicSupervisor:
    """Supervises children started on demand; obtain one from :func:`open_dynamic_supervisor`.

    Every child runs under its own :func:`supervise` with the supervisor's policy and
    reports channel, in the supervisor's nursery, so restart types, intensity (per
    child) and reporting are exactly those of :func:`supervise`. A TRANSIENT child that
    returns, a TEMPORARY child that ends either way, and a child whose start failed are
    forgotten. Child names are unique among active children; a name becomes free again
    once that child's supervision has ended.
    """

    def __init__(
        self,
        nursery: trio.Nursery,
        policy: RestartPolicy,
        reports: trio.MemorySendChannel[CrashReport] | None,
    ) -> None:
        self._nursery = nursery
        self._policy = policy
        self._reports = reports
        self._active: dict[str, object] = {}  # name -> token of the reservation
        self._started = 0
        self._restarts = 0

    @property
    def cancel_scope(self) -> trio.CancelScope:
        """The nursery's cancel scope: cancel it, or set a deadline, to shut down
        (rule "cancel-scope shutdown")."""
        return self._nursery.cancel_scope

    def __contains__(self, name: object) -> bool:
        """Whether a child called ``name`` is active (starting, running or restarting)."""
        return name in self._active

    async def start_child(self, spec: ChildSpec) -> Any:
        """Start ``spec`` under supervision and wait until its first incarnation started.

        Args:
            spec: the child; see :class:`ChildSpec` for ``inbox.clone()`` per
                incarnation (rule "inboxes outlive restarts").

        Returns:
            The value the child passed to ``task_status.started(value)``.

        Raises:
            ValueError: a child with ``spec.name`` is already active.
            RuntimeError: the supervisor is closed (its ``async with`` block has
                exited), or the child returned before calling ``started()``.
            Exception: whatever the child raised before its first ``started()``; the
                supervisor and its other children are unaffected, nothing is restarted.

        Concurrency: callable from any task while the supervisor is open. Blocks until
        the child calls ``started()``; cancelling the caller meanwhile cancels the
        child's start. Later crashes never reach the caller: they are restarted, or
        escalate out of the supervisor's ``async with`` block.
        """
        if spec.name in self._active:
            raise ValueError(f"child {spec.name!r} is already active")
        token = object()
        self._active[spec.name] = token  # reserved before awaiting: no duplicate race
        try:
            value = await self._nursery.start(self._run_child, spec, token)
        except BaseException:
            self._release(spec.name, token)
            raise
        self._started += 1
        return value

    def statistics(self) -> DynamicSupervisorStatistics:
        """Return a :class:`DynamicSupervisorStatistics` snapshot (pure, never blocks)."""
        return DynamicSupervisorStatistics(
            active_children=len(self._active),
            started_children=self._started,
            restarts=self._restarts,
        )

    async def _run_child(
        self, spec: ChildSpec, token: object, *, task_status: trio.TaskStatus[Any]
    ) -> None:
        try:
            await _supervise(spec, self._policy, self._reports, task_status, self._on_restart)
        finally:
            self._release(spec.name, token)

    def _on_restart(self) -> None:
        self._restarts += 1

    def _release(self, name: str, token: object) -> None:
        if self._active.get(name) is token:
            del self._active[name]


@asynccontextmanager
async def open_dynamic_supervisor(
    policy: RestartPolicy,
    reports: trio.MemorySendChannel[CrashReport] | None = None,
) -> AsyncIterator[DynamicSupervisor]:
    """Open a :class:`DynamicSupervisor` whose children live in a new nursery.

    Usage::

        async with open_dynamic_supervisor(policy, reports) as sup:
            await sup.start_child(ChildSpec(f"owner:{task_id}", start))

    Like a nursery, leaving the block waits for every child; PERMANENT children never
    end on their own, so cancel :attr:`DynamicSupervisor.cancel_scope` (or set its
    deadline) to shut down.

    Args:
        policy: per-child restart intensity and backoff (each child has its own window).
        reports: as for :func:`supervise`; borrowed and shared by all children.

    Raises:
        RestartIntensityExceeded: out of the ``async with``, when a child escalated; all
            other children and the block's body were cancelled first.
        Exception: an error raised by the block's body (children are cancelled). A group
            holding exactly one ``Exception`` is collapsed to it; several simultaneous
            failures stay an ``ExceptionGroup``.
    """
    try:
        async with trio.open_nursery() as nursery:
            yield DynamicSupervisor(nursery, policy, reports)
    except BaseExceptionGroup as group:
        leaf = _single_leaf(group)
        if leaf is None:
            raise
        _reraise_leaf(leaf)
