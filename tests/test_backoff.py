"""taskplane/backoff.py: one capped exponential backoff for every retry loop.

The sequences below are the delays each retry loop waited before the loops shared
this module (the wake pump, failed turns, recovery pauses, Slack reconnects, result
deliveries, the agent program's restarts, supervisor restarts); they must not move.
"""

from __future__ import annotations

import math
from itertools import islice

import pytest
import trio
import trio.testing

from taskplane.backoff import MAX_DOUBLINGS, backoff, backoff_delay_s


def _first(n: int, first_s: float, cap_s: float = math.inf) -> list[float]:
    return list(islice(backoff(first_s, cap_s), n))


def test_delays_double_from_the_first_up_to_the_cap_then_stay() -> None:
    assert _first(8, 1.0, 30.0) == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]


def test_an_uncapped_backoff_keeps_doubling() -> None:
    assert _first(4, 0.01) == [0.01, 0.02, 0.04, 0.08]


@pytest.mark.parametrize(
    ("first_ms", "cap_ms"),
    [(10, 1_000), (1_000, 60_000)],  # the wake pump; recovery pauses
)
def test_delays_equal_the_millisecond_formula_exactly(first_ms: int, cap_ms: int) -> None:
    expected = [min(first_ms * 2 ** (k - 1), cap_ms) / 1000 for k in range(1, 20)]
    assert _first(19, first_ms / 1000, cap_ms / 1000) == expected  # ==, not approx


def test_delays_equal_repeated_doubling_exactly() -> None:
    # Slack reconnects, result deliveries, agent restarts: ``min(delay * 2, cap)``.
    for first_s, cap_s in [(1.0, 30.0), (1.0, 300.0), (0.1, 5.0)]:
        delay, expected = first_s, []
        for _ in range(20):
            expected.append(delay)
            delay = min(delay * 2, cap_s)
        assert _first(20, first_s, cap_s) == expected


def test_the_nth_delay_is_the_nth_item() -> None:
    delays = _first(12, 0.5, 30.0)
    assert [backoff_delay_s(0.5, 30.0, n) for n in range(1, 13)] == delays


def test_no_delay_before_the_first_and_none_for_a_zero_base() -> None:
    assert backoff_delay_s(1.0, 30.0, 0) == 0.0
    assert backoff_delay_s(1.0, 30.0, -3) == 0.0
    assert _first(3, 0.0, 30.0) == [0.0, 0.0, 0.0]


def test_a_huge_n_neither_overflows_nor_exceeds_the_cap() -> None:
    assert backoff_delay_s(1.0, 30.0, 10**9) == 30.0
    assert backoff_delay_s(1.0, math.inf, 10**9) == 2.0**MAX_DOUBLINGS


def test_each_iterator_starts_over() -> None:
    one = backoff(1.0, 8.0)
    assert [next(one), next(one)] == [1.0, 2.0]
    assert next(backoff(1.0, 8.0)) == 1.0  # a fresh one, as after a success
    assert next(one) == 4.0


async def test_delays_run_on_the_trio_clock(autojump_clock: trio.testing.MockClock) -> None:
    start = trio.current_time()
    for delay in islice(backoff(1.0, 4.0), 4):
        await trio.sleep(delay)
    assert trio.current_time() - start == pytest.approx(1.0 + 2.0 + 4.0 + 4.0)
