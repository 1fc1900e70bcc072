"""A ``python``-runtime agent for the end-to-end tests whose turn never ends by itself.

Its Task stays ``WORKING`` with no result until the server stops or is killed, so a
test can kill the server after a source accepted an event and before any reply to it
exists; the turn is replayed at the next start, by whatever runtime that start runs.
Load it with ``PYTHONPATH`` set to this folder and ``A2A_AGENT_CALLABLE=held_agent:hold``.
"""

from __future__ import annotations

import trio


async def hold(prompt: str, tools: object) -> None:
    """Wait until the turn is cancelled (the server stops); settle nothing."""
    await trio.sleep_forever()
