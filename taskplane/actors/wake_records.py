"""The wake actor's durable decisions: the journal records and Task changes it commits.

Pure builders of store records and Task transitions (no trio, no I/O): the grant
(WORKING + ``WOKEN`` + ``WAKE_DELIVERED``), the unhealthy evidence of a failed or
abandoned wake, the failure of a Task whose wake overflowed, and the failure of a
Task the plane has given up on (design rule "Failure is visible").
"""

from __future__ import annotations

from taskplane.actors import logic
from taskplane.actors.owner import AlsoRecord, Change
from taskplane.actors.wake_queue import Wake
from taskplane.model.enums import TaskState
from taskplane.model.types import Part, Task
from taskplane.store.records import ActivationState, EvidenceRecord, JournalRecord

OVERFLOW_TEXT = (
    "Not started: the agent already had 128 tasks waiting. Send a new message "
    "(a new messageId) to try again."
)


class CancelWon(Exception):
    """The Task turned terminal before its wake was granted."""


def accepted_state(wake: Wake) -> ActivationState:
    """The journal state of an activation right after its acceptance: no ``WOKEN``,
    no delivery, no newer claim."""
    return ActivationState(wake.activation_id, wake.task_id, frozenset(), 0, False)


def grant_change(state: ActivationState, now_ms: int) -> Change:
    """The Task moved to WORKING for its turn, unless it must keep an unanswered
    question (replay of a woken INPUT_REQUIRED/AUTH_REQUIRED activation with no newer
    claim). Raises :class:`CancelWon` if the Task is already terminal."""
    keep_question = "WOKEN" in state.kinds and not state.newer_claim_exists

    def change(task: Task) -> Task:
        current = task.status.state
        if current.is_terminal:
            raise CancelWon()
        if current is TaskState.TASK_STATE_WORKING or (current.is_interrupted and keep_question):
            return task
        return logic.with_status(task, TaskState.TASK_STATE_WORKING, now_ms)

    return change


def grant_records(wake: Wake, state: ActivationState, now_ms: int) -> AlsoRecord:
    """``WOKEN`` (once per activation) and ``WAKE_DELIVERED`` (delivery n+1)."""
    delivered = JournalRecord(
        "WAKE_DELIVERED",
        wake.activation_id,
        wake.task_id,
        {"delivery": state.deliveries + 1, "deliveredAt": now_ms},
    )
    if "WOKEN" in state.kinds:
        return (delivered,)
    return (woken_record(wake, now_ms), delivered)


def woken_record(wake: Wake, now_ms: int) -> JournalRecord:
    """``WOKEN``: the activation's wake was delivered (or retired: its Task is gone)."""
    return JournalRecord("WOKEN", wake.activation_id, wake.task_id, {"wokenAt": now_ms})


def wake_failed_record(wake: Wake, attempts: int, error: str, now_ms: int) -> JournalRecord:
    """``WAKE_FAILED``: this activation will not be woken again."""
    return JournalRecord(
        "WAKE_FAILED",
        wake.activation_id,
        wake.task_id,
        {"attempts": attempts, "error": error, "failedAt": now_ms},
    )


def unhealthy_record(wake: Wake, source: str, error: str) -> EvidenceRecord:
    """``activation.unhealthy`` evidence for ``wake``'s activation."""
    return EvidenceRecord(
        "activation.unhealthy",
        {
            "activationId": wake.activation_id,
            "taskId": wake.task_id,
            "source": source,
            "error": error,
        },
        activation_id=wake.activation_id,
        task_id=wake.task_id,
    )


def unsettled_record(wake: Wake, source: str, error: str) -> EvidenceRecord:
    """``activation.unsettled`` evidence: ``wake``'s Task failed by the
    ``A2A_AGENT_PLAIN_TEXT`` policy (the agent would not settle it). A policy outcome,
    not ill-health: its type does not end with ``.unhealthy``, so readiness does not
    count it (design rule "Failure is visible")."""
    return EvidenceRecord(
        "activation.unsettled",
        {
            "activationId": wake.activation_id,
            "taskId": wake.task_id,
            "source": source,
            "error": error,
        },
        activation_id=wake.activation_id,
        task_id=wake.task_id,
    )


def overflow_change(now_ms: int) -> Change:
    """A never-started (SUBMITTED) Task failed with :data:`OVERFLOW_TEXT`; others kept."""

    def change(task: Task) -> Task:
        if task.status.state is not TaskState.TASK_STATE_SUBMITTED:
            return task
        why = logic.agent_message(task, [Part.from_text(OVERFLOW_TEXT)])
        return logic.with_status(task, TaskState.TASK_STATE_FAILED, now_ms, why)

    return change


def given_up_text(reason: str) -> str:
    """The agent status message of a Task the plane has given up on."""
    return f"The agent could not finish this task: {reason}. Send a new message to try again."


def given_up_change(reason: str, now_ms: int) -> Change:
    """A non-terminal Task moved to FAILED with :func:`given_up_text`; terminal kept."""

    def change(task: Task) -> Task:
        if task.status.state.is_terminal:
            return task
        why = logic.agent_message(task, [Part.from_text(given_up_text(reason))])
        return logic.with_status(task, TaskState.TASK_STATE_FAILED, now_ms, why)

    return change
