"""JSON-RPC 2.0 over newline-delimited JSON: one UTF-8 JSON object per line.

The framing of the agent protocol (``docs/agent-protocol.md``). A line holds exactly
one object, without raw newlines (JSON escapes them); lines are at most
:data:`MAX_LINE_BYTES`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

MAX_LINE_BYTES = 16 * 1024 * 1024
"""Longest accepted line (16 MiB); a longer one is dropped whole."""

INVALID_PARAMS = -32602
METHOD_NOT_FOUND = -32601
TOOL_ERROR = 1
"""Error code of a refused tool call (its message says why)."""


def encode_line(message: dict[str, Any]) -> bytes:
    """``message`` as one compact JSON line, ``\\n``-terminated."""
    text = json.dumps(message, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.encode("utf-8") + b"\n"


def request(request_id: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


def notification(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": method, "params": params}


def result(request_id: Any, value: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": value}


def error(request_id: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


class LineSplitter:
    """Splits a byte stream into lines, dropping any longer than ``limit`` bytes.

    Args:
        limit: the longest line kept, in bytes (without its ``\\n``).
        on_drop: called with a dropped line's length in bytes, once it has ended.
    Attributes:
        dropped: lines dropped so far.
    """

    def __init__(
        self, limit: int = MAX_LINE_BYTES, on_drop: Callable[[int], None] | None = None
    ) -> None:
        self._limit = limit
        self._on_drop = on_drop
        self._buffer = bytearray()
        self._skipping = False
        self._skipped = 0
        self.dropped = 0

    def feed(self, data: bytes | bytearray) -> Iterator[bytes]:
        """The complete lines ``data`` finishes (without their ``\\n``)."""
        start = 0
        while True:
            end = data.find(b"\n", start)
            if end < 0:
                break
            self._take(data[start:end])
            if self._skipping:
                self.dropped += 1
                if self._on_drop is not None:
                    self._on_drop(self._skipped)
            else:
                yield bytes(self._buffer)
            self._buffer.clear()
            self._skipping, self._skipped = False, 0
            start = end + 1
        self._take(data[start:])

    def _take(self, piece: bytes | bytearray) -> None:
        if self._skipping:
            self._skipped += len(piece)
        elif len(self._buffer) + len(piece) > self._limit:
            self._skipped = len(self._buffer) + len(piece)
            self._buffer.clear()
            self._skipping = True
        else:
            self._buffer += piece


def parse_line(line: bytes) -> dict[str, Any]:
    """One line as a JSON-RPC 2.0 message object.

    Raises:
        ValueError: not UTF-8 JSON, not an object, or ``jsonrpc`` is not ``"2.0"``.
    """
    message = json.loads(line.decode("utf-8"))
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        raise ValueError("not a JSON-RPC 2.0 object")
    return message
