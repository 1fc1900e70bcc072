"""A scripted test runtime with a turn log: :class:`Agent` and its default script.

:class:`Agent` is a :class:`~taskplane.bridge.runtime.AgentRuntime` that records each
``run_turn`` as a :class:`Turn` (with ``trio.current_time()`` at entry and exit), flags
turns that overlap beyond its concurrency, and acts on the newest user message through
:func:`behave` unless given another script. Run it under ``autojump_clock`` with the
options of :func:`tests.support.virtual.options`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import trio

from taskplane.actors.plane import TaskPlane
from taskplane.bridge.tool_api import TaskTools
from taskplane.bridge.tools import latest_user_message
from taskplane.model.types import Message, Task


@attrs.define(eq=False)
class Turn:
    """One ``run_turn`` call, as the runtime saw it.

    Attributes:
        n: 1-based index of this turn among the turns of ``task_id``.
        started / ended: ``trio.current_time()`` at entry and exit.
        outcome: ``running``, ``returned``, ``raised`` or ``cancelled``.
    """

    task_id: str
    n: int
    started: float
    tools: TaskTools
    ended: float | None = None
    outcome: str = "running"
    error: BaseException | None = None
    notes: dict[str, Any] = attrs.Factory(dict)


Script = Callable[["Agent", Turn], Awaitable[None]]


class Agent:
    """A test :class:`~taskplane.bridge.runtime.AgentRuntime` with a turn log.

    Each turn runs ``observe`` (if set), then ``script`` (default :func:`behave`).
    Turns that overlap beyond ``concurrency`` (default 1: a second ``run_turn`` while
    one is running), or two turns of one Task at once, are recorded in
    ``violations``. ``peak`` is the most turns seen running at once.
    """

    def __init__(self, script: Script | None = None, *, concurrency: int = 1) -> None:
        self.script = script
        self.concurrency = concurrency
        self.peak = 0
        self.active: list[Turn] = []
        self.observe: Callable[[Turn], Awaitable[None]] | None = None
        self.turns: list[Turn] = []
        self.released: list[str] = []
        self.violations: list[str] = []
        self.gates: dict[str, trio.Event] = {}
        self.plane: TaskPlane | None = None
        self._running: Turn | None = None
        self._changed = trio.Event()

    # AgentRuntime
    def triage(self, message: Message) -> None:
        return None  # every send is work: a Task

    async def release(self, task_id: str) -> None:
        self.released.append(task_id)

    async def aclose(self) -> None:
        pass

    async def run_turn(self, task_id: str, prompt: str, tools: TaskTools) -> None:
        assert task_id in prompt and tools.task_id == task_id
        n = 1 + sum(t.task_id == task_id for t in self.turns)
        turn = Turn(task_id, n, trio.current_time(), tools)
        if len(self.active) >= self.concurrency:
            others = ", ".join(t.task_id for t in self.active)
            self.violations.append(f"turn of {task_id} overlaps {others}")
        if any(t.task_id == task_id for t in self.active):
            self.violations.append(f"two turns of {task_id} at once")
        self._running = turn
        self.active.append(turn)
        self.peak = max(self.peak, len(self.active))
        self.turns.append(turn)
        self._notify()
        try:
            if self.observe is not None:
                await self.observe(turn)
            await (self.script or behave)(self, turn)
        except trio.Cancelled:
            turn.outcome = "cancelled"
            raise
        except Exception as exc:
            turn.outcome, turn.error = "raised", exc
            raise
        else:
            turn.outcome = "returned"
        finally:
            turn.ended = trio.current_time()
            self.active.remove(turn)
            if self._running is turn:
                self._running = None
            self._notify()

    # test controls
    def gate(self, name: str) -> trio.Event:
        return self.gates.setdefault(name, trio.Event())

    def open(self, name: str) -> None:
        self.gate(name).set()

    def of(self, task_id: str) -> list[Turn]:
        return [t for t in self.turns if t.task_id == task_id]

    def order(self) -> list[str]:
        return [t.task_id for t in self.turns]

    @property
    def running(self) -> Turn | None:
        return self._running

    async def wait_turns(self, count: int, *, ended: bool = False) -> None:
        """Wait until ``count`` turns have started (or ended); 10 virtual minutes at most."""
        with trio.fail_after(600):
            while True:
                done = [t for t in self.turns if not ended or t.ended is not None]
                if len(done) >= count:
                    return
                await self._changed.wait()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()


def user_text(task: Task) -> str:
    latest = latest_user_message(task)
    if latest is None:
        return ""
    return "\n".join(p.text for p in latest.parts if p.text is not None)


async def behave(agent: Agent, turn: Turn) -> None:
    """The default script; the newest user message decides.

    ``block:<gate>`` waits for ``agent.open(gate)`` then completes; ``fail`` raises;
    ``idle`` returns without settling; ``ask`` pauses on INPUT_REQUIRED; anything
    else completes with the text as the response.
    """
    tools, task_id = turn.tools, turn.task_id
    task: Task = (await tools.a2a_read_task(task_id)).details["task"]
    text = user_text(task)
    verb, _, arg = text.partition(":")
    if verb == "block":
        await agent.gate(arg).wait()
        await tools.a2a_complete_task(task_id, text)
    elif verb == "fail":
        raise RuntimeError(f"turn {turn.n} of {task_id} failed")
    elif verb == "idle":
        return
    elif verb == "ask":
        await tools.a2a_require_input(task_id, arg or "Which colour?")
    else:
        await tools.a2a_complete_task(task_id, text)
