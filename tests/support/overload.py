"""A full wake queue, and a log of the SQL the store runs.

:class:`StatementLog` is a :class:`~tests.store.faults.Faults` that records every
statement (and can fail the claim scan); :class:`PingAgent` answers ``ping`` directly
(a Message, no Task); :func:`fill` holds one turn and queues 128 Tasks behind it, so
the wake queue is full ("Wake admission is bounded").
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

import attrs

from taskplane.actors.plane import TaskPlane
from taskplane.model.types import Message, Part
from tests.store.faults import Faults
from tests.support.agent import Agent
from tests.support.virtual import send, task_id_of


@attrs.define
class StatementLog(Faults):
    """Records every statement the store executes; optionally fails the claim scan."""

    statements: list[str] = attrs.Factory(list)
    fail_claim_scan: bool = False

    def check(self, sql: str) -> None:
        self.statements.append(sql)
        if self.fail_claim_scan and "count(*) FROM journal WHERE kind = 'CLAIM'" in sql:
            raise sqlite3.OperationalError("disk I/O error")
        super().check(sql)


class PingAgent(Agent):
    """The test agent, plus a direct reply (``pong``) to ``ping``."""

    def triage(self, message: Message) -> Sequence[Part] | None:  # type: ignore[override]
        text = "".join(p.text or "" for p in message.parts)
        return (Part.from_text("pong"),) if text == "ping" else None


async def fill(plane: TaskPlane, agent: Agent) -> tuple[str, list[str]]:
    """A held turn plus 128 waiting Tasks: the wake queue is full."""
    holder = task_id_of(await send(plane, "block:hold", "m-holder"))
    await agent.wait_turns(1)
    waiting = [task_id_of(await send(plane, f"w {n}", f"m-w{n}")) for n in range(128)]
    assert plane.wake.queue.waiting == plane.wake.queue.limit
    return holder, waiting
