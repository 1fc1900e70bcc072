"""http/negotiation.py: A2A-Version, A2A-Extensions and media types (digest D7.1, D9)."""

from __future__ import annotations

import pytest

from taskplane.errors import UnsupportedMediaType, VersionNotSupported
from taskplane.extensions import ELICITATION_URI, OUTFITTER_TASK_URI
from taskplane.http.errors import wire_identity
from taskplane.http.negotiation import (
    activate_extensions,
    check_request_content_type,
    check_version,
    response_media_type,
)

# --- A2A-Version -------------------------------------------------------------------


@pytest.mark.parametrize("value", [None, "", "  ", "1.0", "1.0.0", "1.0.3", "1.0.12", " 1.0 "])
def test_served_versions(value: str | None) -> None:
    check_version(value, None)
    check_version(None, value)


@pytest.mark.parametrize(
    "value",
    ["0.3", "1", "1.1", "2.0", "99.0", "1.0.", "1.0.x", "1.00", "v1.0", "1.0-rc1", "1.0.1.2"],
)
def test_unsupported_versions_fail_explicitly(value: str) -> None:
    with pytest.raises(VersionNotSupported) as info:
        check_version(value, None)
    assert repr(value) in info.value.message
    assert "1.0" in info.value.message
    assert wire_identity(info.value).http_status == 400
    assert wire_identity(info.value).reason == "VERSION_NOT_SUPPORTED"


def test_query_value_is_checked_too() -> None:
    with pytest.raises(VersionNotSupported, match=r"'2\.0'"):
        check_version("1.0", "2.0")
    with pytest.raises(VersionNotSupported, match=r"'2\.0'"):
        check_version("2.0", "1.0")


def test_long_version_value_is_cut_in_the_message() -> None:
    with pytest.raises(VersionNotSupported) as info:
        check_version("9" * 5000, None)
    assert len(info.value.message) < 200


# --- A2A-Extensions ----------------------------------------------------------------

SUPPORTED = (ELICITATION_URI, OUTFITTER_TASK_URI)


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (None, ()),
        ("", ()),
        (" , ,", ()),
        (OUTFITTER_TASK_URI, (OUTFITTER_TASK_URI,)),
        (f"{OUTFITTER_TASK_URI},{ELICITATION_URI}", SUPPORTED),  # server order wins
        (f" {OUTFITTER_TASK_URI} ,\t{ELICITATION_URI}\t", SUPPORTED),
        (f"urn:unknown, {ELICITATION_URI}, urn:other", (ELICITATION_URI,)),
        (f"{ELICITATION_URI},{ELICITATION_URI}", (ELICITATION_URI,)),
        (ELICITATION_URI.upper(), ()),  # URIs compare exactly
        (ELICITATION_URI.replace("/v1", "/v2"), ()),  # no fallback to another version
    ],
)
def test_activate_extensions(header: str | None, expected: tuple[str, ...]) -> None:
    assert activate_extensions(header, SUPPORTED) == expected


def test_activate_extensions_with_nothing_supported() -> None:
    assert activate_extensions(ELICITATION_URI, ()) == ()


# --- request Content-Type -----------------------------------------------------------


@pytest.mark.parametrize(
    "content_type",
    [
        "application/json",
        "application/a2a+json",
        "Application/JSON",
        "application/json; charset=utf-8",
        "application/json;charset=UTF-8",
        'application/json; charset="utf-8"',
        "application/a2a+json; charset=utf-8; foo=bar",
        "application/vnd.example+json",
        "application/problem+json",
    ],
)
def test_json_content_types_are_accepted(content_type: str) -> None:
    check_request_content_type(content_type, has_body=True)
    check_request_content_type(content_type, has_body=False)


@pytest.mark.parametrize(
    "content_type",
    [
        "text/plain",
        "text/json",
        "application/xml",
        "application/jsonx",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/+json",
        "application/json; charset=latin-1",
        "application",
        "json",
        "*/*",
    ],
)
def test_other_content_types_are_415(content_type: str) -> None:
    for has_body in (True, False):
        with pytest.raises(UnsupportedMediaType) as info:
            check_request_content_type(content_type, has_body=has_body)
        assert wire_identity(info.value).http_status == 415


def test_415_message_names_the_type() -> None:
    with pytest.raises(UnsupportedMediaType, match="'text/plain'"):
        check_request_content_type("text/plain", has_body=True)


@pytest.mark.parametrize("content_type", [None, "", "  "])
def test_missing_content_type_only_for_an_empty_body(content_type: str | None) -> None:
    check_request_content_type(content_type, has_body=False)
    with pytest.raises(UnsupportedMediaType):
        check_request_content_type(content_type, has_body=True)


# --- response media type ------------------------------------------------------------


@pytest.mark.parametrize(
    ("accept", "expected"),
    [
        (None, "application/json"),
        ("", "application/json"),
        ("*/*", "application/json"),
        ("application/*", "application/json"),
        ("application/json", "application/json"),
        ("text/event-stream", "application/json"),
        ("application/a2a+json", "application/a2a+json"),
        ("Application/A2A+JSON", "application/a2a+json"),
        ("application/json, application/a2a+json", "application/a2a+json"),
        ("application/a2a+json;q=0.5, application/json", "application/json"),
        ("application/a2a+json;q=0.9, application/json;q=0.9", "application/a2a+json"),
        ("application/a2a+json; q=0", "application/json"),
        ("application/a2a+json;q=bogus", "application/json"),
        ("text/html, application/a2a+json;q=0.1", "application/a2a+json"),
        (",,;;garbage", "application/json"),
    ],
)
def test_response_media_type(accept: str | None, expected: str) -> None:
    assert response_media_type(accept) == expected


@pytest.mark.parametrize("value", ["1.0, 1.0", "1.0,1.0.2", " 1.0 ,", ",1.0"])
def test_a_comma_joined_version_list_is_served_when_every_member_is(value: str) -> None:
    check_version(value, None)


@pytest.mark.parametrize("value", ["1.0, 2.0", "2.0,1.0", "1.0,,0.3"])
def test_a_comma_joined_version_list_with_an_unsupported_member_is_refused(value: str) -> None:
    with pytest.raises(VersionNotSupported):
        check_version(value, None)
