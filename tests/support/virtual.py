"""A task plane in virtual time, and bounded reads of what it recorded.

:func:`options` runs SQLite on the trio thread with a record clock that follows trio's
clock, so under ``autojump_clock`` sleeps, retries and backoffs take exact virtual time.
:func:`send` is one A2A send through intake as :data:`ALICE`; :func:`settle` waits (60
virtual seconds at most) for a Task to settle; :func:`journal` and :func:`evidence` read
the durable records from the store itself; :func:`quiesce` lets virtual time pass and
waits until every task is blocked.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
import trio
import trio.testing

from taskplane.actors.plane import TaskPlane
from taskplane.app import PlaneOptions
from taskplane.bridge.manifest import WorkflowOutputs, parse_manifest
from taskplane.model.enums import Role, TaskState
from taskplane.model.types import Message, Part, Task
from taskplane.scope import Scope
from taskplane.store.records import Accepted
from tests.support.agent import Agent
from tests.support.plane import MANIFEST

ALICE = Scope("", "alpha")
EPOCH_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z: record timestamps follow trio's clock

SUBMITTED = TaskState.TASK_STATE_SUBMITTED
WORKING = TaskState.TASK_STATE_WORKING
COMPLETED = TaskState.TASK_STATE_COMPLETED
CANCELED = TaskState.TASK_STATE_CANCELED
INPUT_REQUIRED = TaskState.TASK_STATE_INPUT_REQUIRED


def virtual_now_ms() -> int:
    """The store clock: a fixed epoch plus trio's (virtual) time."""
    return EPOCH_MS + round(trio.current_time() * 1000)


def outputs() -> WorkflowOutputs:
    """The declared workflow outputs of the test manifest (``pull-request``)."""
    return parse_manifest(MANIFEST, None, where="tests")


def options(agent: Agent, **extra: Any) -> PlaneOptions:
    """Deterministic plane options: SQLite on the trio thread, virtual record clock."""
    return PlaneOptions(runtime=agent, now_ms=virtual_now_ms, store_in_thread=False, **extra)


def message(
    text: str, message_id: str, *, task_id: str | None = None, context_id: str | None = None
) -> Message:
    return Message(
        message_id=message_id,
        role=Role.ROLE_USER,
        parts=(Part.from_text(text),),
        task_id=task_id,
        context_id=context_id,
    )


async def send(
    plane: TaskPlane,
    text: str,
    message_id: str,
    *,
    task_id: str | None = None,
    context_id: str | None = None,
    scope: Scope = ALICE,
) -> Accepted:
    """One A2A send through intake (what ``POST /message:send`` does before waiting)."""
    return await plane.send(
        scope, message(text, message_id, task_id=task_id, context_id=context_id), ()
    )


def task_id_of(accepted: Accepted) -> str:
    assert accepted.task is not None, accepted
    return accepted.task.id


async def state_of(plane: TaskPlane, task_id: str, scope: Scope = ALICE) -> TaskState:
    return (await plane.get_task(scope, task_id)).status.state


async def settle(plane: TaskPlane, task_id: str, scope: Scope = ALICE) -> Task:
    """The Task once terminal or interrupted (bounded: 60 virtual seconds)."""
    with trio.fail_after(60):
        task = await plane.wait_settled(scope, task_id, 0)
    assert task.status.state.is_settled, task.status
    return task


async def journal(plane: TaskPlane, *, task_id: str | None = None) -> list[tuple[str, str, dict]]:
    """``(kind, activation_id, record)`` of the journal, oldest first."""
    entries = await plane.store.journal(task_id=task_id)
    return [(e.kind, e.activation_id, dict(e.fields)) for e in entries]


def kinds_of(rows: list[tuple[str, str, dict]], activation_id: str) -> list[str]:
    return [k for k, a, _ in rows if a == activation_id]


def deliveries_of(rows: list[tuple[str, str, dict]], activation_id: str) -> list[int]:
    return [r["delivery"] for k, a, r in rows if a == activation_id and k == "WAKE_DELIVERED"]


async def evidence(plane: TaskPlane, record_type: str) -> list[dict]:
    return [dict(e.fields) for e in await plane.store.evidence(record_type=record_type)]


def events(caplog: pytest.LogCaptureFixture, name: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "event", None) == name]


async def quiesce(seconds: float = 0) -> None:
    """Let virtual time pass (if asked), then wait until every task is blocked."""
    if seconds:
        await trio.sleep(seconds)
    await trio.testing.wait_all_tasks_blocked()
