"""The pure wake queue against a model (STYLE T-7).

``taskplane.actors.wake_queue.WakeQueue`` is the in-memory half of the wake actor: a
bounded FIFO of pending wakes, at most one offered wake, and the turn authority
(design document, "Wake authority begins at delivery", "Wake admission is bounded";
CONTRACTS.md §e). A hypothesis state machine drives it with random admits, offers,
grants, re-offers and retirements and compares it after every step with a plain
list-based model.
"""

from __future__ import annotations

import hypothesis.strategies as st
import pytest
from hypothesis import settings
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from taskplane.actors.wake_queue import WAKE_QUEUE_SIZE, Wake, WakeQueue

# Two activations share a Task (a continuation), so "authority is the offered Task"
# is not the same as "authority is the offered activation".
WAKES = [
    Wake("activation-0", "task-a"),
    Wake("activation-1", "task-a"),
    Wake("activation-2", "task-b"),
    Wake("activation-3", "task-c"),
    Wake("activation-4", "task-d"),
    Wake("activation-5", "task-e"),
    Wake("activation-6", "task-e"),
]


class WakeQueueModel(RuleBasedStateMachine):
    """Model: ``pending`` (list, head first), ``offered`` and ``authority``."""

    def __init__(self) -> None:
        super().__init__()
        self.queue = WakeQueue()
        self.limit = WAKE_QUEUE_SIZE
        self.pending: list[Wake] = []
        self.offered: Wake | None = None
        self.authority: str | None = None

    @initialize(limit=st.integers(min_value=1, max_value=4))
    def start(self, limit: int) -> None:
        # A small bound, so random runs reach "full" and "overflow" often.
        self.queue = WakeQueue(limit)
        self.limit = limit

    @rule(wake=st.sampled_from(WAKES))
    def admit(self, wake: Wake) -> None:
        if wake == self.offered or wake in self.pending:
            expected = "duplicate"
        elif len(self.pending) - (0 if self.offered is not None else 1) >= self.limit:
            # ``limit`` wait behind the offered wake; with none offered, the head of
            # pending is the next offered one and does not count as waiting.
            expected = "overflow"
        else:
            expected = "queued"
            self.pending.append(wake)
        assert self.queue.admit(wake) == expected

    @rule()
    def offer(self) -> None:
        expected: Wake | None = None
        if self.offered is None and self.pending:
            expected = self.offered = self.pending.pop(0)
        assert self.queue.offer() == expected

    @precondition(lambda self: self.offered is not None)
    @rule()
    def grant(self) -> None:
        assert self.offered is not None
        self.authority = self.offered.task_id
        assert self.queue.grant() == self.offered.task_id

    @precondition(lambda self: self.offered is not None)
    @rule()
    def reoffer(self) -> None:
        assert self.offered is not None
        self.pending.insert(0, self.offered)
        self.offered = None
        self.authority = None
        self.queue.reoffer()
        # Authority is cleared before the wake goes back: nothing may act for it now.
        assert self.queue.authority is None
        assert self.queue.pending[0] == self.pending[0]

    @rule()
    def retire(self) -> None:
        self.offered = None
        self.authority = None
        self.queue.retire()
        assert self.queue.authority is None

    @invariant()
    def matches_the_model(self) -> None:
        assert list(self.queue.pending) == self.pending
        assert self.queue.offered == self.offered
        assert self.queue.authority == self.authority

    @invariant()
    def authority_only_while_offered(self) -> None:
        if self.queue.authority is not None:
            assert self.queue.offered is not None
            assert self.queue.authority == self.queue.offered.task_id

    @invariant()
    def pending_is_bounded(self) -> None:
        # ``limit`` waiting plus the one to be offered next (a re-offered wake included).
        assert len(self.queue.pending) <= self.queue.limit + 1

    @invariant()
    def no_wake_is_held_twice(self) -> None:
        held = list(self.queue.pending)
        if self.queue.offered is not None:
            held.append(self.queue.offered)
        assert len(held) == len(set(held))


WakeQueueModel.TestCase.settings = settings(max_examples=300, stateful_step_count=60)
TestWakeQueueModel = WakeQueueModel.TestCase


def test_the_default_bound_is_128_waiting_behind_the_offered_wake() -> None:
    queue = WakeQueue()
    assert queue.limit == WAKE_QUEUE_SIZE == 128
    wakes = [Wake(f"activation-{n}", f"task-{n}") for n in range(130)]
    assert queue.admit(wakes[0]) == "queued"
    assert queue.offer() == wakes[0]
    assert [queue.admit(w) for w in wakes[1:129]] == ["queued"] * 128
    assert queue.admit(wakes[129]) == "overflow"
    # Once the offered wake is retired and the head offered, one slot frees up.
    queue.retire()
    assert queue.offer() == wakes[1]
    assert queue.admit(wakes[129]) == "queued"
    assert len(queue.pending) == 128


def test_grant_needs_an_offered_wake_and_retire_is_idempotent() -> None:
    queue = WakeQueue()
    queue.retire()
    assert queue.offered is None and queue.authority is None
    with pytest.raises(AssertionError):
        queue.grant()
