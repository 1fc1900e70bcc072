"""Reading a provider's answer body with a size limit (rule "Bad input is bounded the
same way on every intake path": no answer of a provider is read past its limit)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator
from typing import cast

import httpx

MAX_ANSWER_BYTES = 16 << 20
"""The default limit of one provider answer: 16 MiB."""


async def read_bounded(response: httpx.Response, limit: int = MAX_ANSWER_BYTES) -> bytes | None:
    """The body of the streamed ``response``, or ``None`` once it passes ``limit``
    bytes (the rest is not read: the stream is closed at once)."""
    chunks: list[bytes] = []
    size = 0
    # An async generator: closed at once when the read stops early, not when collected.
    stream = cast(AsyncGenerator[bytes, None], response.aiter_bytes())
    async with contextlib.aclosing(stream) as body:
        async for chunk in body:
            size += len(chunk)
            if size > limit:
                return None
            chunks.append(chunk)
    return b"".join(chunks)
