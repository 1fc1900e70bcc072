"""The engine behind ``one_for_all`` and ``rest_for_one``: group-counted restarts.

One controller (the caller's task) owns a nursery with one task per live child. Each
child task runs the child inside its own cancel scope, so the controller can stop any
subset of children. A child that ends on its own leaves an ``_Exit`` note in a queue
and wakes the controller; a child the controller stopped leaves none. The controller
handles one note at a time, so there is never more than one restart in progress.
"""

from __future__ import annotations

import enum
from collections import deque
from typing import Any, final

import attrs
import trio

from ._common import (
    _account_restart,
    _being_cancelled,
    _IncarnationStatus,
    _report_unrestarted,
    _RestartWindow,
)
from .policy import ChildSpec, RestartPolicy, RestartType
from .reports import CrashReport


class _Strategy(enum.Enum):
    ONE_FOR_ALL = "one_for_all"
    REST_FOR_ONE = "rest_for_one"


@attrs.define(eq=False)
class _Member:
    spec: ChildSpec
    index: int
    incarnation: int = 0
    scope: trio.CancelScope | None = None
    # Set when the current incarnation's task has exited; a fresh Event per incarnation.
    done: trio.Event = attrs.field(factory=trio.Event)
    retired: bool = False

    @property
    def running(self) -> bool:
        return self.incarnation > 0 and not self.done.is_set()


@attrs.frozen
class _Exit:
    member: _Member
    incarnation: int
    error: Exception | None  # None: a normal return


@final
class _Group:
    def __init__(
        self,
        strategy: _Strategy,
        specs: tuple[ChildSpec, ...],
        policy: RestartPolicy,
        reports: trio.MemorySendChannel[CrashReport] | None,
    ) -> None:
        self._strategy = strategy
        self._members = [_Member(spec, i) for i, spec in enumerate(specs)]
        self._policy = policy
        self._reports = reports
        self._window = _RestartWindow(policy)
        # At most one note per ended incarnation, and intensity bounds incarnations.
        self._exits: deque[_Exit] = deque()
        self._wakeup = trio.Event()

    async def run(self, task_status: trio.TaskStatus[tuple[Any, ...]]) -> None:
        async with trio.open_nursery() as nursery:
            # A first start that fails propagates: the group never became ready.
            values = [await self._start(nursery, m) for m in self._members]
            task_status.started(tuple(values))
            while not all(m.retired for m in self._members):
                pending: _Exit | None = await self._next_exit()
                while pending is not None:
                    pending = await self._handle(nursery, pending)

    async def _start(self, nursery: trio.Nursery, member: _Member) -> Any:
        member.incarnation += 1
        member.done = trio.Event()
        return await nursery.start(self._child, member, member.incarnation)

    async def _child(
        self, member: _Member, incarnation: int, *, task_status: trio.TaskStatus[Any]
    ) -> None:
        status = _IncarnationStatus(task_status)
        error: Exception | None = None
        try:
            with trio.CancelScope() as scope:
                member.scope = scope
                try:
                    await member.spec.start(task_status=status)
                except Exception as exc:
                    # Before started(): nursery.start() raises it to the controller.
                    # While cancelled (stopped by us or from outside): not a crash to
                    # restart, so it propagates and ends the group.
                    if not status.started_called or _being_cancelled():
                        raise
                    error = exc
            if scope.cancel_called or not status.started_called:
                # Stopped by the controller, which is waiting on ``done``; or returned
                # before started(), which nursery.start() turns into a RuntimeError.
                return
            self._exits.append(_Exit(member, incarnation, error))
            self._wakeup.set()
        finally:
            member.done.set()

    async def _next_exit(self) -> _Exit:
        while not self._exits:
            await self._wakeup.wait()
            self._wakeup = trio.Event()
        return self._exits.popleft()

    async def _handle(self, nursery: trio.Nursery, note: _Exit) -> _Exit | None:
        """Act on one exit; return a follow-up exit if a restart failed to start."""
        member, exc = note.member, note.error
        if note.incarnation != member.incarnation:
            # It ended while a group restart already replaced it: report, no new restart.
            if exc is not None:
                restarts = self._window.count(trio.current_time())
                _report_unrestarted(member.spec.name, exc, restarts, self._policy, self._reports)
            return None
        restart_type = member.spec.restart_type
        if exc is None and restart_type is not RestartType.PERMANENT:
            member.retired = True
            return None
        if exc is not None and restart_type is RestartType.TEMPORARY:
            member.retired = True
            _report_unrestarted(member.spec.name, exc, 0, self._policy, self._reports)
            return None
        restarts = _account_restart(
            member.spec.name, exc, self._window, self._policy, self._reports
        )
        return await self._restart(nursery, member, restarts)

    async def _restart(self, nursery: trio.Nursery, failed: _Member, restarts: int) -> _Exit | None:
        affected = [
            m
            for m in self._members
            if not m.retired
            and (self._strategy is _Strategy.ONE_FOR_ALL or m.index >= failed.index)
        ]
        for m in reversed(affected):  # stop in reverse start order
            if m.running:
                assert m.scope is not None
                m.scope.cancel()
                await m.done.wait()
        for m in affected:
            if m is not failed and m.spec.restart_type is RestartType.TEMPORARY:
                m.retired = True  # OTP: a temporary child is never restarted
        await trio.sleep(self._policy.backoff_delay_s(restarts))
        for m in affected:
            if m.retired:
                continue
            try:
                await self._start(nursery, m)
            except Exception as exc:
                if _being_cancelled():
                    raise
                # A failed restart is a crash of that child: count it and go again.
                return _Exit(m, m.incarnation, exc)
        return None
