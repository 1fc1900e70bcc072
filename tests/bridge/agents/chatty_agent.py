"""A subprocess agent that answers its first turn in plain text (a ``turn`` result
``{"text": ...}`` without calling a tool) and, reminded, completes the Task with that
answer: how a small model behind an agent program behaves."""

from __future__ import annotations

import json
import sys

ANSWER = "The answer is 42."


def send(message: dict[str, object]) -> None:
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
    sys.stdout.flush()


def main() -> None:
    calls = 0
    for line in sys.stdin:
        if not line.strip():
            continue
        message = json.loads(line)
        if message.get("method") != "turn":
            continue  # cancel, release, tool results (answered below, one at a time)
        params = message["params"]
        if "is not finished" not in params["prompt"]:
            send({"id": message["id"], "result": {"text": ANSWER}})
            continue
        calls += 1
        arguments = {"taskId": params["taskId"], "response": ANSWER}
        call = {"turn": message["id"], "name": "a2a_complete_task", "arguments": arguments}
        send({"id": calls, "method": "tool_call", "params": call})
        json.loads(sys.stdin.readline())  # the tool's result
        send({"id": message["id"], "result": {"status": "done"}})


if __name__ == "__main__":
    main()
