"""A2A v1.0.1 enums (proto ``TaskState`` and ``Role``), with their wire names.

Member names equal the proto value names, which are also the ProtoJSON wire strings.
``*_UNSPECIFIED`` exists in the proto but is never valid as data, so it
is not a member here: decoding it fails like any unknown name.
"""

from __future__ import annotations

import enum


class TaskState(enum.Enum):
    """``lf.a2a.v1.TaskState``; values are the proto numbers."""

    TASK_STATE_SUBMITTED = 1
    TASK_STATE_WORKING = 2
    TASK_STATE_COMPLETED = 3
    TASK_STATE_FAILED = 4
    TASK_STATE_CANCELED = 5
    TASK_STATE_INPUT_REQUIRED = 6
    TASK_STATE_REJECTED = 7
    TASK_STATE_AUTH_REQUIRED = 8

    @property
    def is_terminal(self) -> bool:
        """COMPLETED, FAILED, CANCELED, REJECTED: the Task never changes again."""
        return self in TERMINAL_STATES

    @property
    def is_interrupted(self) -> bool:
        """INPUT_REQUIRED, AUTH_REQUIRED: settled for a blocking send, still continuable."""
        return self in INTERRUPTED_STATES

    @property
    def is_settled(self) -> bool:
        """Terminal or interrupted: a blocking ``message:send`` answers at this state."""
        return self.is_terminal or self.is_interrupted


TERMINAL_STATES = frozenset(
    {
        TaskState.TASK_STATE_COMPLETED,
        TaskState.TASK_STATE_FAILED,
        TaskState.TASK_STATE_CANCELED,
        TaskState.TASK_STATE_REJECTED,
    }
)
INTERRUPTED_STATES = frozenset(
    {TaskState.TASK_STATE_INPUT_REQUIRED, TaskState.TASK_STATE_AUTH_REQUIRED}
)


class Role(enum.Enum):
    """``lf.a2a.v1.Role``; values are the proto numbers."""

    ROLE_USER = 1
    ROLE_AGENT = 2
