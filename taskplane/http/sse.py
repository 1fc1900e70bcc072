"""Server-Sent Events framing for ``message:stream`` and ``tasks/{id}:subscribe``.

A2A §11.7: each event is exactly one ``data:`` line holding one complete
StreamResponse JSON object, then a blank line. No ``event:``, ``id:`` or ``retry:``
fields; the end of the stream is the server closing the response. Comment lines
(``:`` ...) are allowed and serve as keep-alives.

An error after the first event is sent as one more frame,
``sse_frame(error_body(exc))``, then the stream closes.

Pure: builds bytes only; writing them is the route's job.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

EVENT_STREAM_MEDIA_TYPE: Final = "text/event-stream"


def sse_frame(payload: Mapping[str, Any]) -> bytes:
    """Encode one SSE event carrying ``payload`` as its data.

    Args:
        payload: a JSON-ready object, normally a StreamResponse in ProtoJSON form
            (``{"task": ...}``, ``{"statusUpdate": ...}``, ``{"artifactUpdate": ...}``,
            ``{"message": ...}``) or an error body.

    Returns:
        ``b"data: " + <compact JSON> + b"\\n\\n"``. The JSON is one line of pure
        ASCII: no spaces after separators, and every control or non-ASCII character
        inside a string is a ``\\uXXXX`` escape. ASCII matters, not only CR/LF:
        clients that split lines like ``str.splitlines`` (httpx ``iter_lines``, for
        one) also break at U+0085, U+2028, U+2029 and a few ASCII controls, and would
        cut a UTF-8 frame holding one of those in two.

    Raises:
        ValueError: ``payload`` holds NaN or an infinity (not JSON).
        TypeError: ``payload`` holds a value JSON cannot represent.
    """
    text = json.dumps(payload, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return b"data: " + text.encode("ascii") + b"\n\n"


def sse_error_frame(error: Mapping[str, Any]) -> bytes:
    """An error after the stream started: ``event: error`` plus the §11.6 body as data.

    The ``event: error`` line lets event-typed clients (the a2a-sdk, a browser's
    ``EventSource`` listeners) tell it from a StreamResponse; clients that read only
    ``data:`` lines still see the ``{"error": ...}`` object.
    """
    return b"event: error\n" + sse_frame(error)


def sse_comment(text: str = "") -> bytes:
    """Encode an SSE comment, e.g. a keep-alive (ignored by every SSE client).

    Args:
        text: the comment text: printable ASCII (so no character any client could
            read as a line break, which would end the comment early); may be empty.

    Returns:
        ``b": <text>\\n\\n"``, or ``b":\\n\\n"`` for empty text.

    Raises:
        ValueError: ``text`` holds a non-ASCII or non-printable character.
    """
    if not (text.isascii() and text.isprintable()):
        raise ValueError("an SSE comment must be printable ASCII on one line")
    line = f": {text}" if text else ":"
    return line.encode("ascii") + b"\n\n"


def sse_headers() -> dict[str, str]:
    """Response headers for an SSE stream (a fresh dict per call).

    Returns:
        ``Content-Type: text/event-stream`` (§11.7; UTF-8 is implied by the media
        type, so no charset), ``Cache-Control: no-cache`` (intermediaries must not
        store a live stream) and ``X-Accel-Buffering: no`` (tells nginx-style
        reverse proxies to forward each frame at once).
    """
    return {
        "Content-Type": EVENT_STREAM_MEDIA_TYPE,
        "Cache-Control": "no-cache",
        "X-Accel-Buffering": "no",
    }
