"""The Slack source's decisions in process: the one retry decision (an unacknowledged
envelope is delivered again by Slack) and the handled-reaction setting."""

from __future__ import annotations

import pytest

from taskplane.actors.outbound import DeliveryFailed
from taskplane.errors import DuplicateMessageId, Overloaded, PayloadTooLarge, StoreUnavailable
from taskplane.settings import load_sources
from taskplane.sources.slack import SlackSource, retry_later
from taskplane.sources.slack_api import SlackRateLimited, SlackRejected, SlackUnavailable


def _failed(cause: Exception) -> DeliveryFailed:
    try:
        raise DeliveryFailed("not delivered") from cause
    except DeliveryFailed as exc:
        return exc


@pytest.mark.parametrize(
    ("error", "later"),
    [
        (Overloaded("full"), True),
        (StoreUnavailable("down"), True),
        (SlackUnavailable("HTTP 500"), True),
        (SlackRateLimited(3), True),
        (_failed(SlackUnavailable("HTTP 500")), True),
        (_failed(SlackRejected("reactions.add: missing_scope", "missing_scope")), False),
        (PayloadTooLarge("big"), False),
        (DuplicateMessageId("other payload"), False),
        (RuntimeError("a bug"), False),
    ],
)
def test_the_retry_decision_is_one_function(error: Exception, later: bool) -> None:
    assert retry_later(error) is later


def test_the_handled_reaction_is_off_unless_named() -> None:
    base = {"SLACK_APP_TOKEN": "xapp", "SLACK_BOT_TOKEN": "xoxb"}
    plain = load_sources(base).slack
    assert plain is not None and SlackSource.from_settings(plain).handled_reaction is None
    named = load_sources({**base, "SLACK_HANDLED_REACTION": "white_check_mark"}).slack
    assert named is not None
    assert SlackSource.from_settings(named).handled_reaction == "white_check_mark"


def test_a_platform_error_keeps_its_code() -> None:
    assert SlackRejected("reactions.add: already_reacted", "already_reacted").error == (
        "already_reacted"
    )
