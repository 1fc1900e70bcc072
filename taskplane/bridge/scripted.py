"""The scripted agent: deterministic, no network; the embedded default and test fixture.

Behaviour (the newest user message's text decides; ``docs/scripted-agent.md``):

=====================  ==============================================================
``ping``               a direct Message ``pong``; no Task
``ask: <question>``    INPUT_REQUIRED with the question; the follow-up completes with
                       an artifact quoting the answer
``form: <question>``   the same, with a one-field ``requestedSchema`` (elicitation/v1)
``auth: <text>``       AUTH_REQUIRED with the text
``sleep: <ms>``        WORKING for that many ms, then COMPLETED
``reject: <reason>``   REJECTED with the reason
``fail``               the turn raises (the wake queue retries it 3 times)
``output: <n> <json>`` records workflow output ``n`` (a JSON object), then completes
anything else          COMPLETED with a ``response`` artifact echoing the text
=====================  ==============================================================

It also answers the a2a-tck ``messageId`` prefixes (``docs/scripted-agent.md``). Every Task
action goes through the wake queue and the task tools; only ``triage`` (the
Message-versus-Task decision) runs before a Task exists.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import trio

from taskplane.bridge.tool_api import TaskTools
from taskplane.bridge.tools import MAX_TEXT_CHARS, latest_user_message
from taskplane.model.enums import Role
from taskplane.model.types import Message, Part, Task

FORM_SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string", "title": "Answer"}},
    "required": ["answer"],
}
MAX_SLEEP_MS = 600_000
ELLIPSIS = "…"


def within_limit(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    """``text`` cut to at most ``limit`` characters (an ellipsis marks a cut).

    The agent quotes caller text back (questions, echoes, answers); caller text may be
    longer than a tool accepts, so every quoted argument goes through here: the
    agent stays within the tool limits it is given (rule: "No caller input may put a
    Task where it cannot move").
    """
    if len(text) <= limit:
        return text
    return text[: limit - len(ELLIPSIS)] + ELLIPSIS


def _text_of(message: Message | None) -> str:
    if message is None:
        return ""
    return "\n".join(p.text for p in message.parts if p.text is not None).strip()


def _command(text: str) -> tuple[str, str]:
    head, sep, rest = text.partition(":")
    if sep and head.strip().lower() in {"ask", "form", "auth", "sleep", "reject", "output"}:
        return head.strip().lower(), rest.strip()
    return text.strip().lower(), ""


class ScriptedRuntime:
    """A deterministic :class:`~taskplane.bridge.runtime.AgentRuntime`."""

    def triage(self, message: Message) -> Sequence[Part] | None:
        """``ping`` and the TCK's ``tck-message-response`` get a direct Message."""
        if message.task_id is not None:
            return None
        if message.message_id.startswith("tck-message-response"):
            return (Part.from_text("Direct message response"),)
        if _text_of(message).lower() == "ping":
            return (Part.from_text("pong"),)
        return None

    async def release(self, task_id: str) -> None:
        """No live resources to close."""

    async def aclose(self) -> None:
        """No live resources to close."""

    async def run_turn(self, task_id: str, prompt: str, tools: TaskTools) -> None:
        """Read the Task, then act on its newest user message (table above)."""
        read = await tools.a2a_read_task(task_id)
        task: Task = read.details["task"]
        latest = latest_user_message(task)
        if await self._tck(task, latest, tools):
            return
        if _answered_question(task):
            answer = _text_of(latest)
            await tools.a2a_complete_task(task_id, within_limit(f"You answered: {answer}"))
            return
        verb, arg = _command(_text_of(latest))
        quoted = within_limit(arg)
        if verb == "ask":
            await tools.a2a_require_input(task_id, quoted or "What is your answer?")
        elif verb == "form":
            await tools.a2a_require_input(task_id, quoted or "What is your answer?", FORM_SCHEMA)
        elif verb == "auth":
            await tools.a2a_require_input(task_id, quoted or "Please authenticate.", kind="auth")
        elif verb == "sleep":
            await trio.sleep(_sleep_ms(arg) / 1000)
            await tools.a2a_complete_task(task_id, f"Slept {_sleep_ms(arg)} ms.")
        elif verb == "reject":
            await tools.a2a_complete_task(task_id, quoted or "rejected", outcome="rejected")
        elif verb == "fail":
            raise RuntimeError("the scripted agent was told to fail this turn")
        elif verb == "output":
            name, _, raw = arg.partition(" ")
            value = json.loads(raw) if raw.strip() else None
            await tools.a2a_record_output(task_id, name, value)
            await tools.a2a_complete_task(task_id, f"Recorded output {name}.")
        else:
            await tools.a2a_complete_task(task_id, within_limit(_text_of(latest)) or "(no text)")

    async def _tck(self, task: Task, latest: Message | None, tools: TaskTools) -> bool:
        """The a2a-tck messageId-prefix behaviours.

        The prefix of the newest user message decides when it has one (a reply to a
        ``tck-input-required`` Task may ask for another behaviour); otherwise the
        prefix of the Task's first message does.
        """
        first = task.history[0].message_id if task.history else ""
        if latest is not None and latest.message_id.startswith(_TCK_PREFIXES):
            first = latest.message_id
        tid = task.id
        if not first.startswith(_TCK_PREFIXES):
            return False
        if first.startswith("tck-complete-task"):
            await tools.a2a_complete_task(tid, "Hello from TCK")
        elif first.startswith("tck-artifact-text"):
            await tools.a2a_complete_task(tid, "Generated text content")
        elif first.startswith("tck-artifact-file-url"):
            part = Part.from_url(
                "https://example.com/output.txt", filename="output.txt", media_type="text/plain"
            )
            await tools.a2a_complete_task(tid, "File URL artifact", extra_parts=(part,))
        elif first.startswith("tck-artifact-file"):
            part = Part.from_raw(b"file content", filename="output.txt", media_type="text/plain")
            await tools.a2a_complete_task(tid, "File artifact", extra_parts=(part,))
        elif first.startswith("tck-artifact-data"):
            part = Part.from_data({"key": "value", "count": 42})
            await tools.a2a_complete_task(tid, "Data artifact", extra_parts=(part,))
        elif first.startswith("tck-input-required"):
            # The kit's scenario only ever asks: a follow-up without another TCK
            # prefix leaves the Task waiting (it asks again), never completes it.
            await tools.a2a_require_input(tid, "Please provide input")
        elif first.startswith("tck-reject-task"):
            await tools.a2a_complete_task(tid, "rejected", outcome="rejected")
        elif first.startswith("test-resubscribe"):
            await trio.sleep(4)
            await tools.a2a_complete_task(tid, "Resubscribe complete")
        else:
            await tools.a2a_complete_task(tid, within_limit(first))
        return True


_TCK_PREFIXES = ("tck-", "test-resubscribe")


def _answered_question(task: Task) -> bool:
    """The newest user message answers an agent question asked just before it."""
    if len(task.history) < 2:
        return False
    last, before = task.history[-1], task.history[-2]
    return last.role is Role.ROLE_USER and before.role is Role.ROLE_AGENT


def _sleep_ms(arg: str) -> int:
    try:
        return max(0, min(int(arg), MAX_SLEEP_MS))
    except ValueError:
        return 0
