"""Size limits that hold for every way a Message enters the plane (pure, no I/O).

The same bound applies to an A2A send and to a native source's event (rule: "Bad
input is bounded the same way on every intake path").
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Final

from taskplane.errors import PayloadTooLarge
from taskplane.model.codec import encode
from taskplane.model.types import Part

MAX_MESSAGE_BYTES: Final = 256 << 10
"""Largest accepted Message: 256 KiB (262,144 bytes) of compact UTF-8 JSON, the
``message`` object of a send as it would be stored."""


def message_size(message: Any) -> int:
    """Bytes of ``message`` (a JSON value) as compact UTF-8 JSON (no spaces)."""
    return len(json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode())


def check_parts_size(parts: Sequence[Part], *, limit_bytes: int = MAX_MESSAGE_BYTES) -> None:
    """Enforce :data:`MAX_MESSAGE_BYTES` on a Message made of ``parts``.

    Counts the ``parts`` array as it would be stored (compact UTF-8 JSON), so the
    bound is the one an A2A send's ``message`` gets, minus its few envelope fields.

    Raises:
        PayloadTooLarge: (413) over ``limit_bytes``; ``metadata["limitBytes"]`` gives it.
    """
    size = message_size({"parts": [encode(p) for p in parts]})
    if size > limit_bytes:
        raise PayloadTooLarge(
            f"message of {size} bytes exceeds the limit of {limit_bytes} bytes per message",
            metadata={"limitBytes": str(limit_bytes)},
        )
