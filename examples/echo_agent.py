#!/usr/bin/env python3
"""An echo agent for taskplane's ``subprocess`` runtime (standard library only).

Run it behind the task plane with::

    A2A_AGENT_RUNTIME=subprocess A2A_AGENT_COMMAND="python3 examples/echo_agent.py" \\
        taskplane quickstart

It speaks the agent protocol (docs/agent-protocol.md): JSON-RPC 2.0, one JSON object
per line on stdin/stdout, logs on stderr. Per turn it reads the Task with
``a2a_read_task``, then:

- ``ask: <question>`` pauses the Task with the question (``a2a_require_input``);
- the caller's answer to that question completes it with ``You answered: <answer>``;
- anything else completes it with the caller's text echoed back.

With ``A2A_AGENT_TRIAGE=on`` the host first asks it to ``triage`` each new message:
a bare greeting (``hello``, ``hi``) is answered at once with a direct Message, and
everything else becomes a Task.

Several turns may be open at once: each turn is a generator that yields tool calls
and receives their results, so one loop serves them all without threads.
"""

from __future__ import annotations

import itertools
import json
import sys
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

ToolCall = tuple[str, dict[str, Any]]
Turn = Generator[ToolCall, dict[str, Any], Any]
NO_ANSWER = object()
"""Returned by a turn that must never be answered (tests of the host's cancel)."""


def user_texts(task: dict[str, Any]) -> list[tuple[str, str]]:
    """``(role, text)`` of every message in the Task's history, oldest first."""
    out = []
    for message in task.get("history", []):
        text = "\n".join(p["text"] for p in message.get("parts", []) if "text" in p)
        out.append((message.get("role", ""), text.strip()))
    return out


def decide(task_id: str, task: dict[str, Any], session_dir: Path) -> ToolCall:
    """The echo policy: the one tool call that finishes this turn."""
    history = user_texts(task)
    role, text = history[-1] if history else ("", "")
    if len(history) >= 2 and history[-2][0] == "ROLE_AGENT" and role == "ROLE_USER":
        return "a2a_complete_task", {"taskId": task_id, "response": f"You answered: {text}"}
    if text.lower().startswith("ask:"):
        question = text[4:].strip() or "What is your answer?"
        return "a2a_require_input", {"taskId": task_id, "question": question}
    return "a2a_complete_task", {"taskId": task_id, "response": text or "(no text)"}


Policy = Callable[[str, dict[str, Any], Path], Any]
GREETINGS = ("hello", "hi")
GREETING_REPLY = "Hello! Send me a message and I will echo it back in a task."


def triage(message: dict[str, Any]) -> str | None:
    """A direct reply to a new message, or ``None`` to make it a Task."""
    text = " ".join(p["text"] for p in message.get("parts", []) if "text" in p)
    return GREETING_REPLY if text.strip().lower().rstrip("!.") in GREETINGS else None


def turn(params: dict[str, Any], policy: Policy) -> Turn:
    """One turn: read the Task, then make the policy's tool call."""
    task_id = params["taskId"]
    session_dir = Path(params["sessionDir"])
    read = yield "a2a_read_task", {"taskId": task_id}
    call = policy(task_id, read["details"]["task"], session_dir)
    if call is NO_ANSWER:
        return NO_ANSWER
    yield call
    with (session_dir / "turns.log").open("a", encoding="utf-8") as log:
        log.write(f"{call[0]}\n")  # the session directory survives restarts
    return {"status": "done"}


class Agent:
    """The protocol loop: turns by request ID, tool calls waiting for their results."""

    def __init__(self, policy: Policy, out: Any = sys.stdout) -> None:
        self.policy = policy
        self.out = out
        self.turns: dict[Any, tuple[str, Turn]] = {}
        self.waiting: dict[int, Any] = {}  # tool_call request ID -> turn request ID
        self.ids = itertools.count(1)

    def send(self, message: dict[str, Any]) -> None:
        self.out.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
        self.out.flush()

    def handle(self, message: dict[str, Any]) -> None:
        method = message.get("method")
        if method == "turn":
            generator = turn(message["params"], self.policy)
            self.turns[message["id"]] = (message["params"]["taskId"], generator)
            self.advance(message["id"], None)
        elif method == "cancel":
            task_id = message["params"]["taskId"]
            for turn_id in [t for t, (tid, _) in self.turns.items() if tid == task_id]:
                del self.turns[turn_id]
        elif method == "release":
            pass  # nothing held in memory between turns
        elif method == "triage":
            reply = triage(message["params"]["message"])
            self.send({"id": message["id"], "result": {"reply": reply}})
        elif method is None and message.get("id") in self.waiting:
            turn_id = self.waiting.pop(message["id"])
            if "error" in message:
                self.finish(turn_id, error=message["error"]["message"])
            else:
                self.advance(turn_id, message["result"])
        elif method is not None and "id" in message:
            self.send({"id": message["id"], "error": {"code": -32601, "message": "no such method"}})

    def advance(self, turn_id: Any, value: dict[str, Any] | None) -> None:
        entry = self.turns.get(turn_id)
        if entry is None:
            return  # cancelled meanwhile
        try:
            name, arguments = entry[1].send(value)  # type: ignore[arg-type]
        except StopIteration as done:
            self.finish(turn_id, result=done.value)
        except Exception as exc:  # a bug in the policy fails this turn only
            self.finish(turn_id, error=f"{type(exc).__name__}: {exc}")
        else:
            call_id = next(self.ids)
            self.waiting[call_id] = turn_id
            params = {"turn": turn_id, "name": name, "arguments": arguments}
            self.send({"id": call_id, "method": "tool_call", "params": params})

    def finish(self, turn_id: Any, result: Any = None, error: str | None = None) -> None:
        self.turns.pop(turn_id, None)
        if result is NO_ANSWER:
            return
        if error is not None:
            self.send({"id": turn_id, "error": {"code": 1, "message": error}})
        else:
            self.send({"id": turn_id, "result": result})


def main(policy: Policy = decide) -> None:
    agent = Agent(policy)
    print("echo agent ready", file=sys.stderr, flush=True)
    for line in sys.stdin:
        if line.strip():
            agent.handle(json.loads(line))


if __name__ == "__main__":
    main()
