"""A ``python`` runtime agent for the channel-tool end-to-end test: it reads its native
item, publishes one progress note twice under the same operation ID (the second call
is the same delivery), then completes with the item's text."""

from __future__ import annotations

from typing import Any


async def agent(prompt: str, tools: Any) -> None:
    """One turn; ``tools`` is a ``taskplane.bridge.python_runtime.TurnTools``."""
    task_id = tools.task_id
    item = await tools.call("channel_read", {"taskId": task_id})
    note = {"taskId": task_id, "operationId": "progress-1", "text": "on it"}
    first = await tools.call("channel_publish", note)
    again = await tools.call("channel_publish", note)
    same = first.details["deliveryId"] == again.details["deliveryId"]
    await tools.complete(f"done (same delivery: {same}; item from {item.details['source']})")
