"""http/body.py: the body size limit and strict JSON-object parsing."""

from __future__ import annotations

import pytest

from taskplane.errors import InvalidRequest, PayloadTooLarge
from taskplane.http.body import MAX_BODY_BYTES, check_body_size, parse_json_object
from taskplane.http.errors import wire_identity


def test_limit_is_one_mebibyte() -> None:
    assert MAX_BODY_BYTES == 1_048_576


# --- size limit -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content_length", "actual"),
    [(None, None), ("0", 0), ("1048576", None), (None, 1_048_576), (" 12 ", 12)],
)
def test_sizes_within_the_limit(content_length: str | None, actual: int | None) -> None:
    check_body_size(content_length, actual)


@pytest.mark.parametrize(
    ("content_length", "actual"),
    [("1048577", None), (None, 1_048_577), ("10", 1_048_577), ("99999999999999999999", None)],
)
def test_sizes_over_the_limit_are_413(content_length: str | None, actual: int | None) -> None:
    with pytest.raises(PayloadTooLarge) as info:
        check_body_size(content_length, actual)
    assert wire_identity(info.value).http_status == 413
    assert "1048576" in info.value.message
    assert info.value.metadata == {"limitBytes": "1048576"}


def test_custom_limit() -> None:
    check_body_size("10", 10, limit_bytes=10)
    with pytest.raises(PayloadTooLarge, match="limit of 10 bytes"):
        check_body_size("11", None, limit_bytes=10)


@pytest.mark.parametrize("content_length", ["", "-1", "1e3", "0x10", "ten", "1 2", "+5", "١٢"])
def test_malformed_content_length_is_400(content_length: str) -> None:
    with pytest.raises(InvalidRequest, match="Content-Length"):
        check_body_size(content_length, None)


# --- parsing ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"{}", {}),
        (b' {"a": 1} \n', {"a": 1}),
        (
            b'{"a": [1, 2.5, "x", true, null, {"b": {}}]}',
            {"a": [1, 2.5, "x", True, None, {"b": {}}]},
        ),
        ('{"t": "h\u00e9llo \U0001f600"}'.encode(), {"t": "h\u00e9llo \U0001f600"}),
        (b'{"t": "\\ud83d\\ude00"}', {"t": "\U0001f600"}),  # an escaped surrogate pair is fine
        (b'{"big": 1e308}', {"big": 1e308}),
    ],
)
def test_valid_objects(raw: bytes, expected: dict[str, object]) -> None:
    assert parse_json_object(raw, allow_empty=False) == expected


@pytest.mark.parametrize("raw", [b"", b"  \r\n\t"])
def test_empty_body(raw: bytes) -> None:
    assert parse_json_object(raw, allow_empty=True) == {}
    with pytest.raises(InvalidRequest, match="empty"):
        parse_json_object(raw, allow_empty=False)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b'{"a": "\xff"}', r"not valid UTF-8 \(byte offset 7\)"),
        (b"\xef\xbb\xbf{}", "byte order mark"),
        (b'{"a": 1,}', "not valid JSON: .* at line 1 column 9"),
        (b'{"a": 1}\n{"b": 2}', "not valid JSON: Extra data at line 2 column 1"),
        (b"{'a': 1}", "not valid JSON"),
        (b'{"a": NaN}', "contains NaN"),
        (b'{"a": Infinity}', "contains Infinity"),
        (b'{"a": -Infinity}', "contains -Infinity"),
        (b'{"a": 1e400}', "too large for a double"),
        (b'{"a": 1, "a": 2}', "repeats the key 'a'"),
        (b'{"o": {"k": 1, "k": 1}}', "repeats the key 'k'"),
        (b'{"a": "\\ud800"}', "unpaired surrogate"),
        (b'{"\\udfff": 1}', "key with an unpaired surrogate"),
        (b'{"a": ["\\ud800x"]}', "unpaired surrogate"),
        (b"[]", "must be a JSON object, got an array"),
        (b'"s"', "got a string"),
        (b"3", "got a number"),
        (b"true", "got a boolean"),
        (b"null", "got null"),
    ],
)
def test_invalid_bodies_are_400_with_a_clear_message(raw: bytes, expected: str) -> None:
    for allow_empty in (True, False):
        with pytest.raises(InvalidRequest, match=expected) as info:
            parse_json_object(raw, allow_empty=allow_empty)
        assert wire_identity(info.value).http_status == 400


def test_deep_nesting_is_400_not_a_crash() -> None:
    raw = b'{"a": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    with pytest.raises(InvalidRequest, match="nested too deeply"):
        parse_json_object(raw, allow_empty=False)


def test_huge_integer_literal_is_400_not_a_crash() -> None:
    raw = b'{"a": ' + b"9" * 5000 + b"}"
    with pytest.raises(InvalidRequest):
        parse_json_object(raw, allow_empty=False)
