"""Outbound delivery serialized per delivery ID (CONTRACTS.md §f gates)."""

from __future__ import annotations

import pytest
import trio

from taskplane.actors.outbound import (
    DeliveryAmbiguous,
    DeliveryConflict,
    DeliveryFailed,
    ProviderRejected,
)
from taskplane.actors.plane import TaskPlane
from taskplane.store.records import Delivery


def reply(recovery: str = "idempotent", digest: str = "sha256:aa", **kw: str) -> Delivery:
    return Delivery("task-1", "slack", "reply:m-1", digest, recovery, **kw)  # type: ignore[arg-type]


async def state_of(plane: TaskPlane, delivery: Delivery) -> str | None:
    record = await plane.store.load_delivery(delivery.delivery_id)
    return None if record is None else record.state


async def test_concurrent_identical_responses_share_one_provider_mutation(
    plane: TaskPlane,
) -> None:
    calls = 0
    release = trio.Event()

    async def send() -> str:
        nonlocal calls
        calls += 1
        await release.wait()
        return "provider-msg-1"

    results: list[str] = []

    async def one() -> None:
        results.append(await plane.outbound.deliver(reply(), send))

    async with trio.open_nursery() as nursery:
        for _ in range(10):
            nursery.start_soon(one)
        await trio.testing.wait_all_tasks_blocked()
        release.set()
    assert calls == 1
    assert results == ["provider-msg-1"] * 10
    assert await state_of(plane, reply()) == "delivered"
    assert len(plane.outbound) == 0


async def test_a_determinate_rejection_is_failed_and_retryable(plane: TaskPlane) -> None:
    async def refuse() -> str:
        raise ProviderRejected("HTTP 400")

    with pytest.raises(DeliveryFailed):
        await plane.outbound.deliver(reply(), refuse)
    assert await state_of(plane, reply()) == "failed"

    async def accept() -> str:
        return "ok-1"

    assert await plane.outbound.deliver(reply(), accept) == "ok-1"


async def test_an_indeterminate_ambiguous_failure_fails_closed_and_is_never_resent(
    plane: TaskPlane,
) -> None:
    async def timeout() -> str:
        raise TimeoutError("no answer")

    with pytest.raises(DeliveryAmbiguous):
        await plane.outbound.deliver(reply("ambiguous"), timeout)
    sent = 0

    async def send() -> str:
        nonlocal sent
        sent += 1
        return "x"

    with pytest.raises(DeliveryAmbiguous):
        await plane.outbound.deliver(reply("ambiguous"), send)
    assert sent == 0
    evidence = await plane.store.evidence()
    assert "activation.unhealthy" in [e.record_type for e in evidence]


async def _crashed_while_sending(plane: TaskPlane, delivery: Delivery) -> None:
    await plane.store.save_delivery(delivery, "sending", 1)


async def test_a_persisted_lookup_delivery_without_its_reconciler_fails_closed(
    plane: TaskPlane,
) -> None:
    delivery = reply("lookup")
    await _crashed_while_sending(plane, delivery)

    async def send() -> str:
        raise AssertionError("must not send blindly")

    with pytest.raises(DeliveryAmbiguous):
        await plane.outbound.deliver(delivery, send)
    assert await state_of(plane, delivery) == "ambiguous"


async def test_crash_reconciliation_finds_the_sent_message_or_sends_once(
    plane: TaskPlane,
) -> None:
    found = reply("lookup", digest="sha256:01")
    await _crashed_while_sending(plane, found)

    async def never() -> str:
        raise AssertionError("already sent")

    async def lookup_found() -> str | None:
        return "provider-msg-9"

    assert await plane.outbound.deliver(found, never, lookup_found) == "provider-msg-9"

    missing = reply("lookup", digest="sha256:02")
    await _crashed_while_sending(plane, missing)

    async def lookup_missing() -> str | None:
        return None

    async def send() -> str:
        return "provider-msg-10"

    assert await plane.outbound.deliver(missing, send, lookup_missing) == "provider-msg-10"
    idempotent = reply("idempotent", digest="sha256:03")
    await _crashed_while_sending(plane, idempotent)
    assert await plane.outbound.deliver(idempotent, send) == "provider-msg-10"


async def test_a_fixed_operation_reused_with_other_content_is_refused(plane: TaskPlane) -> None:
    async def send() -> str:
        return "pub-1"

    await plane.outbound.deliver(reply(digest="sha256:a", payload_policy="fixed"), send)
    with pytest.raises(DeliveryConflict):
        await plane.outbound.deliver(reply(digest="sha256:b", payload_policy="fixed"), send)
