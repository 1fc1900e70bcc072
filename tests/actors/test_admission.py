"""The admission object alone: the bound, its waiters, its states, the verdict on a
send and the edge's pacing ("Wake admission is bounded").

A real :class:`WakeQueue`, a counting agent and a recording owners stand-in; no
store, no actors. Virtual time throughout.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import ExitStack

import pytest
import trio
import trio.testing

from taskplane.actors.admission import Admission
from taskplane.actors.admission_contract import AdmissionGate, IntakeGate
from taskplane.actors.admission_limits import (
    ADMISSION_WAIT_S,
    CROWDED_WAITERS,
    MAX_ADMISSION_WAITERS,
    MAX_CARRIED_VERDICTS,
    MAX_OVERFLOW_BACKLOG,
    MAX_PARKED_BYTES,
    REFUSALS_PER_S,
    WAKE_QUEUE_SIZE,
)
from taskplane.actors.claim_filter import ClaimFilter
from taskplane.actors.wake_queue import Reservation, Wake, WakeQueue
from taskplane.errors import Overloaded
from taskplane.model.enums import Role
from taskplane.model.types import Message, Part
from taskplane.scope import Scope
from taskplane.store.records import A2A_SOURCE, provider_key

ALICE = Scope("", "alice")


class Triage:
    """An agent that answers ``ping`` directly and records every ``triage`` call."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def triage(self, message: Message) -> Sequence[Part] | None:
        self.calls.append(message.message_id)
        text = "".join(p.text or "" for p in message.parts)
        return (Part.from_text("pong"),) if text == "ping" else None


class Owners:
    """Records the overflowed wakes it is asked to fail."""

    def __init__(self) -> None:
        self.failed: list[Wake] = []

    async def fail_overflowed(self, wake: Wake) -> None:
        self.failed.append(wake)


def admission(limit: int = WAKE_QUEUE_SIZE) -> tuple[Admission, Triage, Owners]:
    agent, owners = Triage(), Owners()
    return Admission(WakeQueue(limit), owners, agent), agent, owners  # type: ignore[arg-type]


def message(text: str, message_id: str, task_id: str | None = None) -> Message:
    return Message(
        message_id=message_id, role=Role.ROLE_USER, parts=(Part.from_text(text),), task_id=task_id
    )


def fill(gate: Admission) -> list[Reservation]:
    """Take every waiting slot."""
    held = [gate.reserve_now() for _ in range(gate.queue.limit)]
    assert all(r is not None for r in held) and gate.reserve_now() is None
    return [r for r in held if r is not None]


async def park_waiters(gate: Admission, nursery: trio.Nursery, count: int) -> list[object]:
    """``count`` senders waiting in :meth:`Admission.reserve`; their results."""
    results: list[object] = []

    async def waiter() -> None:
        results.append(await gate.reserve())

    for _ in range(count):
        nursery.start_soon(waiter)
    await trio.testing.wait_all_tasks_blocked()
    return results


def test_it_is_both_gates() -> None:
    gate, _, _ = admission()
    edge: AdmissionGate = gate
    intake: IntakeGate = gate
    assert edge is intake


def test_the_bound_is_the_queues_and_a_released_slot_is_free_again() -> None:
    gate, _, _ = admission()
    held = fill(gate)
    reading = gate.statistics()
    assert (reading.limit, reading.waiting, reading.reserved) == (128, 128, 128)
    assert reading.queue_full and not reading.crowded and not reading.closed
    gate.release(held[0])
    gate.release(held[0])  # idempotent
    assert not gate.queue_full and gate.statistics().waiting == 127
    assert gate.reserve_now() is not None and gate.queue_full


async def test_a_sender_waits_at_most_the_admission_wait(
    autojump_clock: trio.testing.MockClock,
) -> None:
    gate, _, _ = admission()
    fill(gate)
    started = trio.current_time()
    assert await gate.reserve() is None
    assert trio.current_time() - started == pytest.approx(ADMISSION_WAIT_S)
    assert gate.statistics().waiters == 0


async def test_a_freed_slot_goes_to_the_first_waiting_sender(
    autojump_clock: trio.testing.MockClock,
) -> None:
    gate, _, _ = admission()
    held = fill(gate)
    async with trio.open_nursery() as nursery:
        results = await park_waiters(gate, nursery, 2)
        assert gate.waiters == 2
        started = trio.current_time()
        gate.release(held[0])
        await trio.testing.wait_all_tasks_blocked()
        assert trio.current_time() == started  # at once, not at the deadline
        assert len(results) == 1 and isinstance(results[0], Reservation)
    assert results[1] is None  # the second one's wait ran out


async def test_crowded_then_closed_as_senders_wait(
    autojump_clock: trio.testing.MockClock,
) -> None:
    gate, _, _ = admission()
    fill(gate)
    async with trio.open_nursery() as nursery:
        await park_waiters(gate, nursery, CROWDED_WAITERS - 1)
        assert not gate.crowded
        await park_waiters(gate, nursery, 1)
        assert gate.crowded and not gate.closed
        await park_waiters(gate, nursery, MAX_ADMISSION_WAITERS - CROWDED_WAITERS)
        assert gate.closed and gate.statistics().waiters == MAX_ADMISSION_WAITERS
        started = trio.current_time()
        assert await gate.reserve() is None  # closed: refused at once
        assert trio.current_time() == started
        nursery.cancel_scope.cancel()
    assert not gate.crowded  # nobody waits any more


def test_triage_runs_once_per_check_and_only_for_new_a2a_sends() -> None:
    gate, agent, _ = admission()
    verdict = gate.check(ALICE, message("ping", "m-1"))
    assert verdict.reply == (Part.from_text("pong"),)
    assert verdict.key == provider_key("", "alice", A2A_SOURCE, "m-1")
    assert gate.check(ALICE, message("work", "m-2")).reply is None
    assert agent.calls == ["m-1", "m-2"]
    # A continuation and a native event are never triaged.
    assert gate.check(ALICE, message("ping", "m-3", task_id="t-1")).reply is None
    native = gate.check(ALICE, message("ping", "event-1"), "relay")
    assert native.reply is None and native.key == provider_key("", "alice", "relay", "event-1")
    assert agent.calls == ["m-1", "m-2"]


def test_only_certainly_new_work_is_refused() -> None:
    gate, _, _ = admission()
    new, ping = gate.check(ALICE, message("w", "m-new")), gate.check(ALICE, message("ping", "m-p"))
    assert gate.refusal(new) is None  # room: nothing is refused
    fill(gate)
    gate.claims.install(ClaimFilter())  # the index is loaded: nothing claimed yet
    refusal = gate.refusal(new)
    assert isinstance(refusal, Overloaded) and refusal.retry_after_s == 1
    assert "128 tasks waiting" in str(refusal)
    assert gate.refusal(ping) is None  # a direct reply is answered
    gate.claimed(new.key)
    assert gate.refusal(new) is None  # now a possible duplicate: the store answers it
    assert gate.refusal_at_once(gate.check(ALICE, message("w", "m-other"))) is None  # not closed


def test_before_the_claim_index_is_loaded_every_send_may_be_a_duplicate() -> None:
    gate, _, _ = admission()
    fill(gate)
    verdict = gate.check(ALICE, message("w", "m-new"))
    assert gate.may_be_claimed(verdict.key) and gate.refusal(verdict) is None
    assert not gate.statistics().claims_loaded


async def test_refused_at_once_only_while_admission_is_closed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    gate, _, _ = admission()
    gate.claims.install(ClaimFilter())
    fill(gate)
    verdict = gate.check(ALICE, message("w", "m-new"))
    assert gate.refusal_at_once(verdict) is None  # full, but it may still wait
    async with trio.open_nursery() as nursery:
        await park_waiters(gate, nursery, MAX_ADMISSION_WAITERS)
        assert isinstance(gate.refusal_at_once(verdict), Overloaded)
        nursery.cancel_scope.cancel()


def test_a_carried_verdict_spares_the_second_triage_of_the_same_send() -> None:
    gate, agent, _ = admission()
    edge = gate.check(ALICE, message("ping", "m-1"))
    with gate.carrying(edge):
        assert gate.check(ALICE, message("ping", "m-1")) is edge
        assert agent.calls == ["m-1"]
        assert gate.check(ALICE, message("ping", "m-1")) is not edge  # taken once
    with gate.carrying(edge):  # another principal's or another payload's: judged afresh
        assert gate.check(Scope("", "beta"), message("ping", "m-1")) is not edge
        assert gate.check(ALICE, message("pong", "m-1")).reply is None
    assert agent.calls == ["m-1", "m-1", "m-1", "m-1"]


def test_a_carried_verdict_lives_no_longer_than_its_hand_on() -> None:
    gate, agent, _ = admission()
    with gate.carrying(gate.check(ALICE, message("w", "m-1"))):
        pass  # the app refused the request before it reached the plane
    with gate.carrying(None):
        pass
    gate.check(ALICE, message("w", "m-1"))
    assert agent.calls == ["m-1", "m-1"]


def test_carried_verdicts_are_bounded_oldest_first() -> None:
    gate, agent, _ = admission()
    with ExitStack() as stack:
        for n in range(MAX_CARRIED_VERDICTS + 1):
            stack.enter_context(gate.carrying(gate.check(ALICE, message("w", f"m-{n}"))))
        agent.calls.clear()
        gate.check(ALICE, message("w", "m-0"))  # dropped: triaged again
        gate.check(ALICE, message("w", "m-1"))  # kept
        assert agent.calls == ["m-0"]


def test_parked_bodies_are_bounded() -> None:
    gate, _, _ = admission()
    assert gate.park(MAX_PARKED_BYTES - 10)
    assert not gate.park(11)  # would pass the bound: nothing held
    assert gate.statistics().parked_bytes == MAX_PARKED_BYTES - 10
    assert gate.park(10)
    gate.unpark(MAX_PARKED_BYTES)
    assert gate.statistics().parked_bytes == 0


async def test_refusals_are_paced_and_each_waits_for_room_first(
    autojump_clock: trio.testing.MockClock,
) -> None:
    gate, _, _ = admission()
    gate.claims.install(ClaimFilter())
    fill(gate)
    verdict = gate.check(ALICE, message("w", "m-new"))
    started = trio.current_time()
    assert isinstance(await gate.paced_refusal(verdict), Overloaded)
    first = trio.current_time() - started
    assert isinstance(await gate.paced_refusal(verdict), Overloaded)
    second = trio.current_time() - started
    assert first == pytest.approx(ADMISSION_WAIT_S)
    assert second == pytest.approx(2 * ADMISSION_WAIT_S + 1 / REFUSALS_PER_S)


async def test_a_paced_send_goes_on_when_a_slot_frees_or_it_is_no_longer_new(
    autojump_clock: trio.testing.MockClock,
) -> None:
    gate, _, _ = admission()
    gate.claims.install(ClaimFilter())
    held = fill(gate)
    verdict = gate.check(ALICE, message("w", "m-new"))
    async with trio.open_nursery() as nursery:
        outcome: list[object] = []

        async def paced() -> None:
            outcome.append(await gate.paced_refusal(verdict))

        nursery.start_soon(paced)
        await trio.testing.wait_all_tasks_blocked()
        gate.release(held[0])
    assert outcome == [None]
    assert not gate.queue_full  # it reserved nothing: the send reserves in intake
    gate.reserve_now()
    gate.claimed(verdict.key)  # a duplicate was accepted meanwhile
    assert await gate.paced_refusal(verdict) is None


async def test_overflows_are_recorded_in_the_background_and_bounded(
    autojump_clock: trio.testing.MockClock,
) -> None:
    gate, _, owners = admission()
    wakes = [Wake(f"activation-{n}", f"t-{n}") for n in range(MAX_OVERFLOW_BACKLOG + 1)]
    for wake in wakes:
        gate.overflowed(wake)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(gate.record_overflows)
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    assert owners.failed == wakes[:MAX_OVERFLOW_BACKLOG]  # the last is left for replay
    assert gate.statistics().overflows == MAX_OVERFLOW_BACKLOG
