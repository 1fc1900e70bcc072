"""Wakes shared by the wake-queue models: the one process's (``WakeQueue``) and the
database's (the wake rows of a shared store).
"""

from __future__ import annotations

from taskplane.actors.wake_queue import Wake

# Two activations share a Task (a continuation), so "authority is the offered Task"
# is not the same as "authority is the offered activation".
# Tasks b and c share context "ctx-1"; d has no known context.
WAKES = [
    Wake("activation-0", "task-a", "ctx-0"),
    Wake("activation-1", "task-a", "ctx-0"),
    Wake("activation-2", "task-b", "ctx-1"),
    Wake("activation-3", "task-c", "ctx-1"),
    Wake("activation-4", "task-d"),
    Wake("activation-5", "task-e", "ctx-2"),
    Wake("activation-6", "task-e", "ctx-2"),
]


def shares_a_lane(a: Wake, b: Wake) -> bool:
    """Same Task, or same known context: their turns must not overlap or reorder."""
    return a.task_id == b.task_id or (a.context_id is not None and a.context_id == b.context_id)
