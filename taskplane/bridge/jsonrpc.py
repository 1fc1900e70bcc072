"""JSON-RPC 2.0 over newline-delimited JSON: one UTF-8 JSON object per line.

The framing of the agent protocol (``docs/agent-protocol.md``). A line holds exactly
one object, without raw newlines (JSON escapes them); lines are at most
:data:`MAX_LINE_BYTES`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
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
    """Splits a byte stream into lines, dropping any longer than ``limit`` bytes."""

    def __init__(self, limit: int = MAX_LINE_BYTES) -> None:
        self._limit = limit
        self._buffer = bytearray()
        self._skipping = False

    def feed(self, data: bytes | bytearray) -> Iterator[bytes]:
        """The complete lines ``data`` finishes (without their ``\\n``)."""
        start = 0
        while True:
            end = data.find(b"\n", start)
            if end < 0:
                break
            if not self._skipping:
                self._buffer += data[start:end]
                yield bytes(self._buffer)
            self._buffer.clear()
            self._skipping = False
            start = end + 1
        if not self._skipping:
            self._buffer += data[start:]
            if len(self._buffer) > self._limit:
                self._buffer.clear()
                self._skipping = True


def parse_line(line: bytes) -> dict[str, Any]:
    """One line as a JSON-RPC 2.0 message object.

    Raises:
        ValueError: not UTF-8 JSON, not an object, or ``jsonrpc`` is not ``"2.0"``.
    """
    message = json.loads(line.decode("utf-8"))
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        raise ValueError("not a JSON-RPC 2.0 object")
    return message
