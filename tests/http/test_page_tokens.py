"""Page tokens are HMAC-sealed: bound to their query and to the issuing process."""

from __future__ import annotations

import pytest

from taskplane.errors import InvalidRequest
from taskplane.http.page_tokens import PageTokens

QUERY = ("", "alpha", None, None, None)


def test_a_sealed_cursor_opens_for_the_same_query() -> None:
    tokens = PageTokens()
    assert tokens.open(tokens.seal("cursor-1", QUERY), QUERY) == "cursor-1"


def test_the_last_page_token_stays_empty() -> None:
    assert PageTokens().seal("", QUERY) == ""


@pytest.mark.parametrize(
    "other",
    [
        ("", "beta", None, None, None),
        ("t", "alpha", None, None, None),
        ("", "alpha", "ctx", None, None),
        ("", "alpha", None, "TASK_STATE_WORKING", None),
    ],
)
def test_a_token_does_not_open_for_another_query(other: tuple[object, ...]) -> None:
    tokens = PageTokens()
    with pytest.raises(InvalidRequest):
        tokens.open(tokens.seal("cursor-1", QUERY), other)


def test_a_token_from_another_process_key_is_refused() -> None:
    with pytest.raises(InvalidRequest):
        PageTokens().open(PageTokens().seal("cursor-1", QUERY), QUERY)


@pytest.mark.parametrize("token", ["", "abc", "abc.", ".abc", "!!.!!", "YQ.YQ"])
def test_malformed_tokens_are_refused(token: str) -> None:
    with pytest.raises(InvalidRequest):
        PageTokens().open(token, QUERY)


def test_the_refusal_says_whether_tokens_outlive_a_restart() -> None:
    with pytest.raises(InvalidRequest, match="expire when the server restarts") as local:
        PageTokens().open("abc", QUERY)
    assert "may expire" not in str(local.value)
    shared = PageTokens(b"k" * 32)  # a shared store's key: tokens outlive restarts
    with pytest.raises(InvalidRequest) as refused:
        shared.open("abc", QUERY)
    assert "(tokens are bound to the filters and caller); omit it" in str(refused.value)
    assert "restart" not in str(refused.value)
