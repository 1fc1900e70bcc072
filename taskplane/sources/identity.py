"""Identifiers a source derives from provider values (conformance matrix, "Code-level
identity derivations").

``source_identifier(prefix, *raw)`` is ``<prefix>:`` + the first 40 hex digits of
SHA-256 over the raw values joined with NUL. Every source hashes its event identity as
``event:…`` and its conversation fields as ``conversation:…``; the unhashed values
stay in the native locator. Every derived identifier matches :data:`IDENTIFIER`.
"""

from __future__ import annotations

import hashlib
import re

IDENTIFIER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
"""Principals, sources, event IDs, dedupe keys, conversation keys and Task IDs."""

MAX_NATIVE_VALUE = 4096
"""Longest provider value kept verbatim in a native locator (characters)."""


def source_identifier(prefix: str, *raw: str) -> str:
    """``<prefix>:`` + h(raw values joined with NUL).

    Raises:
        ValueError: no raw value, an empty one, or a prefix that is not an identifier.
    """
    if not raw or any(not value for value in raw):
        raise ValueError("a source identifier needs non-empty raw values")
    digest = hashlib.sha256("\0".join(raw).encode()).hexdigest()[:40]
    ident = f"{prefix}:{digest}"
    if not IDENTIFIER.match(ident):
        raise ValueError(f"{prefix!r} is not a valid identifier prefix")
    return ident


def native_value(value: object, name: str) -> str:
    """``value`` as an opaque native-locator string (non-empty, at most 4096 chars).

    Raises:
        ValueError: not a string, empty or too long (the message names ``name``).
    """
    if not isinstance(value, str) or not value or len(value) > MAX_NATIVE_VALUE:
        raise ValueError(f"{name} must be a non-empty string of at most {MAX_NATIVE_VALUE} chars")
    return value
