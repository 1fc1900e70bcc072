"""Direct Messages from real agents: the bounded, asynchronous triage of a new send.

Design document, "Message versus Task is the executor's decision". The synchronous
:meth:`~taskplane.bridge.runtime.AgentRuntime.triage` may not do I/O, so a runtime
whose decision needs its agent (a program, a function, a model) implements
:class:`DirectReplies` as well: intake awaits :meth:`DirectReplies.reply_directly`
for an A2A send without a ``taskId`` that is not a duplicate, after the synchronous
triage declined it, and records a reply exactly like the scripted agent's (one
acceptance, deduplicated by messageId: a duplicate send returns the recorded Message
verbatim and does not ask the agent again).

The call is bounded (``A2A_AGENT_TRIAGE_TIMEOUT_MS``, default 2 s): past the bound,
or when the agent fails, declines or answers something unusable, the send becomes a
Task as before. ``A2A_AGENT_TRIAGE`` (default off) turns it on for the
``subprocess``, ``python`` and ``openai`` runtimes.

Log events: ``agent_triage_failed`` (the agent raised or answered an error, or its
program exited during the triage: the send becomes a Task at once),
``agent_triage_timed_out``, ``agent_triage_unusable`` (an answer that is neither a
usable reply nor ``None``: ``""``, a number, a text over 40,000 characters; warning).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import trio

from taskplane.bridge.tools import MAX_TEXT_CHARS
from taskplane.model.types import Message, Part

log = logging.getLogger("taskplane.bridge.triage")

DEFAULT_TRIAGE_TIMEOUT_S = 2.0


@runtime_checkable
class DirectReplies(Protocol):
    """A runtime that may answer a new send with a direct Message (module docstring)."""

    async def reply_directly(self, message: Message) -> Sequence[Part] | None:
        """The parts of a direct reply to ``message``, or ``None`` to make it a Task.

        Bounded in time by the runtime; never raises (a failure means ``None``) but
        ``trio.Cancelled``.
        """
        ...


def unusable(value: Any) -> str | None:
    """Why ``value``, an agent's triage answer, is neither a reply nor ``None`` (a
    Task asked for), or ``None`` if it is one of those."""
    if value is None:
        return None
    if not isinstance(value, str):
        return f"{value!r}, not a string"
    if not value:
        return "an empty string"
    if len(value) > MAX_TEXT_CHARS:
        return f"{len(value)} characters, over {MAX_TEXT_CHARS}"
    return None


def reply_parts(value: Any) -> tuple[Part, ...] | None:
    """A direct reply's parts from an agent's answer: a string of 1..40,000
    characters is one text part; anything else (``None``, empty, too long, another
    type) is ``None`` (make a Task)."""
    if isinstance(value, str) and 1 <= len(value) <= MAX_TEXT_CHARS:
        return (Part.from_text(value),)
    return None


async def bounded_reply(
    ask: Callable[[], Awaitable[Any]], timeout_s: float, runtime: str
) -> tuple[Part, ...] | None:
    """``reply_parts`` of ``await ask()``, or ``None`` if it raised or took longer than
    ``timeout_s`` seconds (logged; the send becomes a Task)."""
    answer: Any = None
    with trio.move_on_after(timeout_s) as scope:
        try:
            answer = await ask()
        except Exception as exc:
            log.warning(
                "the %s agent's triage failed (%r); the message becomes a task",
                runtime,
                exc,
                extra={"event": "agent_triage_failed", "runtime": runtime},
            )
            return None
    if scope.cancelled_caught:
        log.warning(
            "the %s agent's triage took longer than %s s; the message becomes a task",
            runtime,
            timeout_s,
            extra={"event": "agent_triage_timed_out", "runtime": runtime, "timeoutS": timeout_s},
        )
        return None
    why = unusable(answer)
    if why is not None:
        log.warning(
            "the %s agent's triage answered %s; the message becomes a task",
            runtime,
            why,
            extra={"event": "agent_triage_unusable", "runtime": runtime},
        )
    return reply_parts(answer)
