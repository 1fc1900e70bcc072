"""The pure wake queue against a model (STYLE T-7).

``taskplane.actors.wake_queue.WakeQueue`` is the in-memory half of the wake actor: a
bounded FIFO of pending wakes, up to N offered wakes (``A2A_AGENT_CONCURRENCY``)
and their turn authorities (design document, "Wake authority begins at delivery",
"Wake admission is bounded"; CONTRACTS.md §e). A hypothesis state machine drives it
with random admits, offers, grants, re-offers and retirements, at concurrency 1 to 3,
and compares it after every step with a plain list-based model. Turns of one
context stay in order: a wake is offered only when no offered wake and no earlier
waiting wake shares its Task or its context.
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

from taskplane.actors.admission_limits import WAKE_QUEUE_SIZE
from taskplane.actors.wake_queue import Wake, WakeQueue
from tests.support.wakes import WAKES, shares_a_lane


class WakeQueueModel(RuleBasedStateMachine):
    """Model: ``pending`` (list, head first), ``offered`` (list, offer order) and
    ``authorities`` (set of Task IDs)."""

    def __init__(self) -> None:
        super().__init__()
        self.queue = WakeQueue()
        self.limit = WAKE_QUEUE_SIZE
        self.concurrency = 1
        self.pending: list[Wake] = []
        self.offered: list[Wake] = []
        self.authorities: set[str] = set()

    @initialize(
        limit=st.integers(min_value=1, max_value=4),
        concurrency=st.integers(min_value=1, max_value=3),
    )
    def start(self, limit: int, concurrency: int) -> None:
        # A small bound, so random runs reach "full" and "overflow" often.
        self.queue = WakeQueue(limit, concurrency)
        self.limit = limit
        self.concurrency = concurrency

    @rule(wake=st.sampled_from(WAKES))
    def admit(self, wake: Wake) -> None:
        free = self.concurrency - len(self.offered)
        if wake in self.offered or wake in self.pending:
            expected = "duplicate"
        elif max(len(self.pending) - free, 0) >= self.limit:
            # ``limit`` wait behind the offered wakes; the heads of pending that fill
            # the free offer slots are the next offered and do not count as waiting.
            expected = "overflow"
        else:
            expected = "queued"
            self.pending.append(wake)
        assert self.queue.admit(wake) == expected

    @rule()
    def offer(self) -> None:
        expected: Wake | None = None
        if len(self.offered) < self.concurrency:
            eligible = [
                (n, w)
                for n, w in enumerate(self.pending)
                if not any(shares_a_lane(w, o) for o in self.offered)
                and not any(shares_a_lane(w, earlier) for earlier in self.pending[:n])
            ]
            if eligible:
                n, expected = eligible[0]
                del self.pending[n]
                self.offered.append(expected)
        assert self.queue.offer() == expected

    @precondition(lambda self: bool(self.offered))
    @rule(data=st.data())
    def grant(self, data: st.DataObject) -> None:
        wake = data.draw(st.sampled_from(self.offered))
        self.authorities.add(wake.task_id)
        assert self.queue.grant(wake) == wake.task_id
        assert self.queue.holds(wake.task_id)

    @rule(wake=st.sampled_from(WAKES))
    def revoke(self, wake: Wake) -> None:
        # The turn is over: the authority ends, the wake stays offered.
        self.authorities.discard(wake.task_id)
        self.queue.revoke(wake.task_id)
        assert not self.queue.holds(wake.task_id)

    @precondition(lambda self: bool(self.offered))
    @rule(data=st.data())
    def reoffer(self, data: st.DataObject) -> None:
        wake = data.draw(st.sampled_from(self.offered))
        self.offered.remove(wake)
        self.pending.insert(0, wake)
        self.authorities.discard(wake.task_id)
        self.queue.reoffer(wake)
        # Authority is cleared before the wake goes back: nothing may act for it now.
        assert not self.queue.holds(wake.task_id)
        assert self.queue.pending[0] == wake

    @rule()
    def reoffer_all(self) -> None:
        # A crashed wake actor puts back every offered wake, oldest offer first.
        self.pending[:0] = self.offered
        self.offered = []
        self.authorities = set()
        self.queue.reoffer_all()
        assert not self.queue.authorities

    @rule(wake=st.sampled_from(WAKES))
    def retire(self, wake: Wake) -> None:
        # Retiring a wake that is not offered changes nothing.
        if wake in self.offered:
            self.offered.remove(wake)
            self.authorities.discard(wake.task_id)
        self.queue.retire(wake)
        assert wake not in self.queue.offered.values()

    @invariant()
    def matches_the_model(self) -> None:
        assert list(self.queue.pending) == self.pending
        assert list(self.queue.offered.values()) == self.offered
        assert self.queue.authorities == self.authorities
        expected = next(iter(self.authorities)) if len(self.authorities) == 1 else None
        assert self.queue.authority == expected

    @invariant()
    def authority_only_while_offered(self) -> None:
        offered_tasks = {w.task_id for w in self.queue.offered.values()}
        assert self.queue.authorities <= offered_tasks

    @invariant()
    def at_most_concurrency_offered_and_no_two_share_a_lane(self) -> None:
        offered = list(self.queue.offered.values())
        assert len(offered) <= self.queue.concurrency
        for n, a in enumerate(offered):
            for b in offered[n + 1 :]:
                assert not shares_a_lane(a, b)

    @invariant()
    def pending_is_bounded(self) -> None:
        # ``limit`` waiting plus the ones to be offered next (re-offered wakes included).
        assert len(self.queue.pending) <= self.queue.limit + self.queue.concurrency

    @invariant()
    def no_wake_is_held_twice(self) -> None:
        held = [*self.queue.pending, *self.queue.offered.values()]
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
    queue.retire(wakes[0])
    assert queue.offer() == wakes[1]
    assert queue.admit(wakes[129]) == "queued"
    assert len(queue.pending) == 128


def test_at_concurrency_16_the_bound_is_still_128_waiting_behind_the_offered_wakes() -> None:
    queue = WakeQueue(concurrency=16)
    wakes = [Wake(f"activation-{n}", f"task-{n}", f"ctx-{n}") for n in range(146)]
    # The first 16 are the next offered: they never count as waiting.
    assert [queue.admit(w) for w in wakes[:16]] == ["queued"] * 16
    assert queue.waiting == 0
    assert [queue.offer() for _ in range(17)] == [*wakes[:16], None]  # 16 slots
    assert [queue.admit(w) for w in wakes[16:144]] == ["queued"] * 128
    assert queue.waiting == 128
    assert queue.admit(wakes[144]) == "overflow"  # the 129th wait is refused
    assert not queue.reserve()
    queue.retire(wakes[3])
    assert queue.admit(wakes[144]) == "queued"
    assert queue.admit(wakes[145]) == "overflow"


def test_a_continuation_never_overtakes_its_predecessor_and_others_pass_it() -> None:
    queue = WakeQueue(concurrency=3)
    first = Wake("a-1", "task-1", "ctx-x")
    sibling = Wake("a-2", "task-2", "ctx-x")  # same context, another Task
    later = Wake("a-3", "task-1", "ctx-x")  # the same Task again
    other = Wake("a-4", "task-4", "ctx-y")
    for wake in (first, sibling, later, other):
        assert queue.admit(wake) == "queued"
    assert queue.offer() == first
    assert queue.offer() == other  # ctx-x is busy: the wakes behind it keep their places
    assert queue.offer() is None
    assert list(queue.pending) == [sibling, later]
    queue.retire(first)
    assert queue.offer() == sibling
    assert queue.offer() is None  # ``later`` waits behind ``sibling`` (same context)
    queue.retire(sibling)
    assert queue.offer() == later


def test_grant_needs_an_offered_wake_and_retire_is_idempotent() -> None:
    queue = WakeQueue()
    wake = Wake("activation-0", "task-a")
    queue.retire(wake)
    assert not queue.offered and queue.authority is None
    with pytest.raises(AssertionError):
        queue.grant(wake)
    with pytest.raises(ValueError):
        WakeQueue(concurrency=0)
