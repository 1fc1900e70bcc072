"""The example echo agent, with two test behaviours added by the caller's text.

- ``crash``: the first time (per session directory) the program exits mid-turn,
  after reading the Task; after the restart it echoes.
- ``hang``: the turn is never answered (the host must be able to cancel it).
- ``exit during triage``: asked to triage that message, the program exits.
Every ``turn``, ``cancel`` and ``release`` is also appended to
``<sessionDir>/received.jsonl``, so a test can see exactly what the agent was sent.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples"))

import echo_agent


def policy(task_id: str, task: dict[str, Any], session_dir: Path) -> Any:
    text = echo_agent.user_texts(task)[-1][1]
    marker = session_dir / "crashed-once"
    if text == "crash" and not marker.exists():
        marker.write_text("1")
        print("crashing on purpose", file=sys.stderr, flush=True)
        os._exit(3)
    if text == "hang":
        return echo_agent.NO_ANSWER
    return echo_agent.decide(task_id, task, session_dir)


class RecordingAgent(echo_agent.Agent):
    """Appends every ``turn``, ``cancel`` and ``release`` it receives to
    ``<sessionDir>/received.jsonl`` of the message's Task."""

    def __init__(self, policy: Any) -> None:
        super().__init__(policy)
        self.dirs: dict[str, Path] = {}

    def handle(self, message: dict[str, Any]) -> None:
        params = message.get("params") or {}
        if message.get("method") == "triage":
            parts = params["message"].get("parts", [])
            if any(p.get("text") == "exit during triage" for p in parts):
                os._exit(4)
        if message.get("method") == "turn":
            self.dirs[params["taskId"]] = Path(params["sessionDir"])
        if message.get("method") in ("turn", "cancel", "release"):
            directory = self.dirs.get(params.get("taskId"))
            if directory is not None:
                with (directory / "received.jsonl").open("a", encoding="utf-8") as out:
                    out.write(json.dumps(message) + "\n")
        super().handle(message)


def main() -> None:
    agent = RecordingAgent(policy)
    print("echo agent ready (misbehaving variant)", file=sys.stderr, flush=True)
    for line in sys.stdin:
        if line.strip():
            agent.handle(json.loads(line))


if __name__ == "__main__":
    main()
