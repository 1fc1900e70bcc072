"""Decoding one page of ``GET /v1/messages`` (``docs/sources/relay.md``, "Relay server
protocol", "Pages a client cannot decode whole") so that one item a JSON parser cannot
read costs that item, not the page.

A page is ``{"messages": [{"cursor", "message"}, ...]}`` (other envelope fields are
ignored). The bytes are read as UTF-8 with every invalid byte kept as a lone surrogate
(``surrogateescape``), then decoded whole. When that fails (an item nested deeper than
the parser's recursion limit, a broken item), the page is split without recursion into
its items, and each is decoded alone: an item whose ``cursor`` can still be read but
whose ``message`` cannot becomes a :class:`PageItem` with an ``error``, which the source
classifies ``malformed`` and acknowledges like any other. A message holding a lone
surrogate (an invalid byte, or an escaped ``\\ud800``) is not text and has the same
fate. Rule "Bad input is bounded the same way on every intake path": a message nested
deeper than :data:`MAX_DEPTH` is malformed whichever way it was decoded.
"""

from __future__ import annotations

import json

import attrs

from taskplane.sources.identity import native_value

MAX_DEPTH = 64
"""The deepest nesting of arrays and objects a message may have (the message object
itself is depth 1). The protocol asks a server to refuse deeper messages at intake."""


class PageUndecodable(ValueError):
    """The page as a whole is not the documented JSON, or an item's cursor cannot be
    read: no item of it can be identified."""


@attrs.frozen
class PageItem:
    """One item of a page: its ``cursor``, its decoded ``message`` (``None`` when it
    could not be decoded) and the ``error`` saying why (``""`` when it was)."""

    cursor: str
    message: object
    error: str = ""


def decode_page(data: bytes) -> list[PageItem]:
    """The items of one page's answer body ``data``, in order.

    Raises:
        PageUndecodable: the envelope is not ``{"messages": [objects]}``, or an item
            has no readable ``cursor`` (the source asks again with a smaller
            ``limit``).
    """
    text = data.decode("utf-8", errors="surrogateescape")
    try:
        body = json.loads(text)
    except (ValueError, RecursionError):
        return _split_page(text)
    page = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(page, list):
        raise PageUndecodable("the answer has no messages array")
    return [_item(raw) for raw in page]


def _item(raw: object) -> PageItem:
    if not isinstance(raw, dict):
        raise PageUndecodable("an item is not an object")
    cursor = _cursor(raw.get("cursor"))
    message = raw.get("message")
    problem = message_problem(message)
    return PageItem(cursor, None if problem else message, problem)


def _cursor(value: object) -> str:
    try:
        cursor = native_value(value, "cursor")
        cursor.encode()
    except (ValueError, UnicodeEncodeError) as exc:
        raise PageUndecodable(f"an item without a readable cursor ({exc})") from None
    return cursor


def message_problem(message: object) -> str:
    """Why the decoded ``message`` cannot be taken (``""``: it can): nested deeper
    than :data:`MAX_DEPTH`, or a string that is not UTF-8 text; found without
    recursion."""
    stack: list[tuple[object, int]] = [(message, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            if _has_surrogate(value):
                return "the message holds invalid UTF-8 or a lone surrogate"
        elif isinstance(value, dict | list):
            if depth > MAX_DEPTH:
                return f"the message is nested deeper than {MAX_DEPTH}"
            children = value.items() if isinstance(value, dict) else enumerate(value)
            for key, child in children:
                if isinstance(key, str) and _has_surrogate(key):
                    return "the message holds invalid UTF-8 or a lone surrogate"
                stack.append((child, depth + 1))
    return ""


def _has_surrogate(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return True
    return False


def _split_page(text: str) -> list[PageItem]:
    members = _members(text, _skip_space(text, 0), whole=True)
    raw = members.get("messages")
    if raw is None or text[raw[0]] != "[":
        raise PageUndecodable("the answer is not JSON with a messages array")
    items: list[PageItem] = []
    for start, end in _pieces(text, raw[0]):
        piece = text[start:end]
        try:
            items.append(_item(json.loads(piece)))
            continue
        except (ValueError, RecursionError) as exc:
            if isinstance(exc, PageUndecodable):
                raise
        if text[start] != "{":
            raise PageUndecodable("an item is not an object")
        fields = _members(text, start)
        span = fields.get("cursor")
        if span is None:
            raise PageUndecodable("an undecodable item without a cursor")
        try:
            cursor = _cursor(json.loads(text[span[0] : span[1]]))
        except ValueError as exc:
            raise PageUndecodable(
                f"an undecodable item without a readable cursor ({exc})"
            ) from None
        items.append(PageItem(cursor, None, "the message is not JSON a parser can read"))
    return items


def _members(text: str, start: int, *, whole: bool = False) -> dict[str, tuple[int, int]]:
    """The spans of the member values of the object at ``text[start]``, by key.

    Raises:
        PageUndecodable: not an object with readable keys (``whole``: or followed by
            anything but white space).
    """
    if start >= len(text) or text[start] != "{":
        raise PageUndecodable("the answer is not a JSON object")
    found: dict[str, tuple[int, int]] = {}
    pieces = _pieces(text, start)
    for a, b in pieces:
        key_end = _string_end(text, a)
        colon = _skip_space(text, key_end)
        if text[a] != '"' or colon >= b or text[colon] != ":":
            raise PageUndecodable("an object member without a key")
        try:
            key = json.loads(text[a:key_end])
        except ValueError:
            raise PageUndecodable("an object key is not a JSON string") from None
        found[key] = (_skip_space(text, colon + 1), b)
    if whole:
        end = _container_end(text, start)
        if _skip_space(text, end) != len(text):
            raise PageUndecodable("the answer has data after its JSON object")
    return found


def _pieces(text: str, start: int) -> list[tuple[int, int]]:
    """The spans (white space trimmed) of the comma-separated pieces of the array or
    object opening at ``text[start]``, found by one scan that tracks strings and
    depth only (no recursion, any depth).

    Raises:
        PageUndecodable: the container is not closed.
    """
    pieces: list[tuple[int, int]] = []
    depth = 0
    i = start
    piece = start + 1
    closing = {"[": "]", "{": "}"}
    stack: list[str] = []
    while i < len(text):
        c = text[i]
        if c == '"':
            i = _string_end(text, i)
            continue
        if c in "[{":
            stack.append(closing[c])
            depth += 1
        elif c in "]}":
            if not stack or stack.pop() != c:
                raise PageUndecodable("unbalanced brackets")
            depth -= 1
            if depth == 0:
                _add(text, pieces, piece, i)
                return pieces
        elif c == "," and depth == 1:
            _add(text, pieces, piece, i)
            piece = i + 1
        i += 1
    raise PageUndecodable("the answer ends inside a value")


def _add(text: str, pieces: list[tuple[int, int]], start: int, end: int) -> None:
    a = _skip_space(text, start)
    b = end
    while b > a and text[b - 1] in " \t\r\n":
        b -= 1
    if a < b:
        pieces.append((a, b))
    elif pieces or text[end] == ",":
        raise PageUndecodable("an empty element")


def _container_end(text: str, start: int) -> int:
    depth = 0
    i = start
    while i < len(text):
        c = text[i]
        if c == '"':
            i = _string_end(text, i)
            continue
        if c in "[{":
            depth += 1
        elif c in "]}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise PageUndecodable("the answer ends inside a value")


def _string_end(text: str, start: int) -> int:
    """The index after the JSON string opening at ``text[start]`` (``start`` itself
    when it opens none)."""
    if start >= len(text) or text[start] != '"':
        return start
    i = start + 1
    while i < len(text):
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == '"':
            return i + 1
        i += 1
    raise PageUndecodable("the answer ends inside a string")


def _skip_space(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t\r\n":
        i += 1
    return i
