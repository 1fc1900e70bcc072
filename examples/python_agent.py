"""An echo agent for taskplane's ``python`` runtime.

Run it behind the task plane with::

    PYTHONPATH=examples A2A_AGENT_RUNTIME=python \\
        A2A_AGENT_CALLABLE=python_agent:agent taskplane quickstart

``agent`` is called once per turn on the server's event loop (trio) with the wake
prompt and the turn's tools, bound to its Task. It reads the Task, then asks,
completes with the answer to its question, or echoes the caller's text.
"""

from __future__ import annotations

from typing import Any


def _texts(task: Any) -> list[tuple[str, str]]:
    """``(role name, text)`` of every message of the Task, oldest first."""
    out = []
    for message in task.history:
        text = "\n".join(p.text for p in message.parts if p.text is not None).strip()
        out.append((message.role.name, text))
    return out


async def agent(prompt: str, tools: Any) -> None:
    """One turn. ``tools`` is a ``taskplane.bridge.python_runtime.TurnTools``."""
    read = await tools.read()
    history = _texts(read.details["task"])
    role, text = history[-1] if history else ("", "")
    if len(history) >= 2 and history[-2][0] == "ROLE_AGENT" and role == "ROLE_USER":
        await tools.complete(f"You answered: {text}")
    elif text.lower().startswith("ask:"):
        await tools.require_input(text[4:].strip() or "What is your answer?")
    else:
        await tools.complete(text or "(no text)")
