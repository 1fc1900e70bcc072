"""Request bodies: the size limit and strict parsing into one JSON object.

Every A2A HTTP+JSON request body is one ProtoJSON message, i.e. one JSON object.
This module turns the raw bytes into a ``dict`` or fails with a
400/413 whose message says what was wrong; turning the dict into model records is the
codec's job (``model/codec.py``). Pure: no I/O, no trio.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Final, NoReturn

from taskplane.errors import InvalidRequest, PayloadTooLarge
from taskplane.model.limits import MAX_MESSAGE_BYTES as MAX_MESSAGE_BYTES
from taskplane.model.limits import message_size

MAX_BODY_BYTES: Final = 1 << 20
"""Largest accepted request body: 1 MiB (1,048,576 bytes)."""

_DIGITS = re.compile(r"[0-9]+")
_LONE_SURROGATE = re.compile(r"[\ud800-\udfff]")
_JSON_KINDS: Final = {
    list: "an array",
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "a boolean",
    type(None): "null",
}


def check_body_size(
    content_length: str | None,
    actual_length: int | None = None,
    *,
    limit_bytes: int = MAX_BODY_BYTES,
) -> None:
    """Enforce the request-body byte limit.

    Call it once with the header alone before reading (to refuse early without
    buffering), and again with the number of bytes actually received (a chunked
    body has no ``Content-Length``).

    Args:
        content_length: the raw ``Content-Length`` header, or ``None`` when absent.
        actual_length: bytes received so far, or ``None`` when not read yet.
        limit_bytes: the limit in bytes; defaults to :data:`MAX_BODY_BYTES`.

    Raises:
        InvalidRequest: ``Content-Length`` is not a decimal integer (RFC 9110 §8.6).
        PayloadTooLarge: (413) either length exceeds ``limit_bytes``; the message and
            the ErrorInfo metadata ``limitBytes`` give the limit.
    """
    declared: int | None = None
    if content_length is not None:
        text = content_length.strip()
        if not _DIGITS.fullmatch(text):
            raise InvalidRequest(f"Content-Length must be a decimal byte count, got {text[:32]!r}")
        declared = int(text)
    for length in (declared, actual_length):
        if length is not None and length > limit_bytes:
            raise PayloadTooLarge(
                f"request body of {length} bytes exceeds the limit of {limit_bytes} bytes",
                metadata={"limitBytes": str(limit_bytes)},
            )


def check_message_size(message: Any, *, limit_bytes: int = MAX_MESSAGE_BYTES) -> None:
    """Enforce :data:`MAX_MESSAGE_BYTES` on a send's ``message`` object.

    The size is that of the object re-encoded as compact JSON (UTF-8, no spaces), so
    whitespace in the request does not count and escapes count as sent characters.

    Raises:
        PayloadTooLarge: (413) over ``limit_bytes``; ``metadata["limitBytes"]`` gives it.
    """
    size = message_size(message)
    if size > limit_bytes:
        raise PayloadTooLarge(
            f"message of {size} bytes exceeds the limit of {limit_bytes} bytes per message",
            metadata={"limitBytes": str(limit_bytes)},
        )


class NestedTooDeeply(InvalidRequest):
    """(400) A request body nested deeper than the parser's recursion allows."""


def load_json(text: str | bytes, **hooks: Any) -> Any:
    """``json.loads(text, **hooks)`` with the nesting bound of every request body.

    The one place that decides how deep a request body may nest, for both bindings:
    the parser's recursion limit is the bound, and reaching it is the client's error,
    never an internal one.

    Raises:
        NestedTooDeeply: (400) the document nests too deeply to parse.
        ValueError: malformed JSON (``json.JSONDecodeError``), bytes that are not UTF-8
            (``UnicodeDecodeError``), or what a hook raises.
    """
    try:
        return json.loads(text, **hooks)
    except RecursionError as exc:
        raise NestedTooDeeply("request body is nested too deeply") from exc


def parse_json_object(raw: bytes, *, allow_empty: bool) -> dict[str, Any]:
    """Parse a request body that must hold exactly one JSON object.

    Args:
        raw: the body bytes (already within the size limit).
        allow_empty: whether an empty or whitespace-only body is accepted, as ``{}``
            (bodiless ``:cancel``/``:subscribe`` POSTs).

    Returns:
        The parsed object: a fresh ``dict`` with ``str`` keys and plain JSON values
        (``dict``, ``list``, ``str``, ``int``, finite ``float``, ``bool``, ``None``).

    Raises:
        InvalidRequest: (400) with a message saying which rule failed:

        * empty body when ``allow_empty`` is false;
        * not UTF-8 (byte offset given), or a UTF-8 byte order mark;
        * malformed JSON (line and column given), or nesting too deep to parse;
        * ``NaN``, ``Infinity``, ``-Infinity``, or a number too large for a double;
        * a duplicate key in any object (ambiguous: parsers disagree on which wins);
        * a string holding an unpaired UTF-16 surrogate escape (``"\\ud800"``),
          which no response could re-encode;
        * a top level other than an object.
    """
    if not raw.strip():
        if allow_empty:
            return {}
        raise InvalidRequest("request body is empty; expected a JSON object")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidRequest(f"request body is not valid UTF-8 (byte offset {exc.start})") from exc
    if text.startswith("\ufeff"):
        raise InvalidRequest("request body starts with a byte order mark; send plain UTF-8")
    try:
        document = load_json(
            text,
            object_pairs_hook=_object_without_duplicates,
            parse_constant=_reject_constant,
            parse_float=_finite_float,
        )
    except json.JSONDecodeError as exc:
        raise InvalidRequest(
            f"request body is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from exc
    except ValueError as exc:  # e.g. an integer literal beyond Python's digit limit
        raise InvalidRequest(f"request body is not acceptable JSON: {exc}") from exc
    if not isinstance(document, dict):
        kind = _JSON_KINDS.get(type(document), "not an object")
        raise InvalidRequest(f"request body must be a JSON object, got {kind}")
    _reject_lone_surrogates(document)
    return document


def _object_without_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            _fail(f"request body repeats the key {key[:64]!r} in one object")
        result[key] = value
    return result


def _reject_constant(name: str) -> NoReturn:
    _fail(f"request body contains {name}, which JSON does not allow")


def _finite_float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        _fail(f"request body contains a number too large for a double: {literal[:32]}")
    return value


def _fail(message: str) -> NoReturn:
    # json.loads lets hook exceptions propagate unchanged; InvalidRequest is not a
    # ValueError, so it passes straight through the except clauses above.
    raise InvalidRequest(message)


def _reject_lone_surrogates(document: dict[str, Any]) -> None:
    # Iterative walk: the parser already bounded the depth, but recursion here would
    # need a second bound.
    stack: list[Any] = [document]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                if _LONE_SURROGATE.search(key):
                    raise InvalidRequest("request body has a key with an unpaired surrogate")
                stack.append(value)
        elif isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, str) and _LONE_SURROGATE.search(node):
            raise InvalidRequest("request body has a string with an unpaired surrogate")
