"""The claim index: a Bloom filter over claimed dedupe identities (no false negatives)."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from taskplane.actors.claim_filter import MIN_CAPACITY, ClaimFilter, ClaimIndex, build_filter


def key(n: int | str) -> str:
    """A provider key: 40 hex characters of SHA-256, as the journal makes them."""
    return hashlib.sha256(str(n).encode()).hexdigest()[:40]


@settings(max_examples=50)
@given(st.lists(st.text(min_size=1, max_size=20), max_size=300))
def test_every_added_key_may_be_contained(identities: list[str]) -> None:
    claims = ClaimFilter(capacity=16)  # tiny: growth is exercised too
    for identity in identities:
        claims.add(key(identity))
    assert all(claims.may_contain(key(identity)) for identity in identities)


def test_no_false_negatives_across_growth_and_few_false_positives() -> None:
    added = [key(n) for n in range(3 * MIN_CAPACITY)]  # two growths beyond the first segment
    claims = ClaimFilter()
    for k in added:
        claims.add(k)
    assert all(claims.may_contain(k) for k in added)
    others = [key(f"other-{n}") for n in range(20_000)]
    false_positives = sum(claims.may_contain(k) for k in others)
    assert false_positives < 0.03 * len(others)  # ~1 % per segment, three segments


def test_build_filter_holds_the_loaded_keys() -> None:
    keys = [key(n) for n in range(1000)]
    claims = build_filter(len(keys), iter(keys))
    assert all(claims.may_contain(k) for k in keys)
    assert not claims.may_contain(key("never"))  # about 1 % chance of a false positive


def test_index_says_maybe_until_a_load_is_installed() -> None:
    index = ClaimIndex()
    assert not index.loaded
    assert index.may_be_claimed(key("anything"))  # unknown: the store must decide
    index.note(key("a"))  # nothing to add to yet
    index.install(build_filter(0, iter(())))
    assert index.loaded
    assert not index.may_be_claimed(key("anything"))


def test_keys_noted_during_a_load_survive_its_installation() -> None:
    """An acceptance that commits while the load reads the store is never missed."""
    index = ClaimIndex()
    index.begin_load()
    index.note(key("committed during the load"))
    index.install(build_filter(1, iter([key("stored before")])))
    assert index.may_be_claimed(key("committed during the load"))
    assert index.may_be_claimed(key("stored before"))
    index.note(key("after"))
    assert index.may_be_claimed(key("after"))


def test_a_reload_keeps_the_current_filter_and_an_abandoned_one_changes_nothing() -> None:
    index = ClaimIndex()
    index.install(build_filter(1, iter([key("old")])))
    index.begin_load()
    index.note(key("new"))
    assert index.may_be_claimed(key("old")) and index.may_be_claimed(key("new"))
    index.abandon_load()
    index.note(key("later"))
    assert index.may_be_claimed(key("later"))
    assert index.may_be_claimed(key("old"))


@pytest.mark.parametrize("key", ["", "not-hex-at-all", "zz" * 20, "é" * 40])
def test_a_key_that_is_not_a_provider_key_is_hashed_not_refused(key: str) -> None:
    claims = ClaimFilter()
    claims.add(key)
    assert claims.may_contain(key)
