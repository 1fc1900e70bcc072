"""Page tokens the server can verify: an HMAC over the store's cursor and the query.

``GET /tasks`` hands out ``nextPageToken``; a client sends it back as ``pageToken``.
The store's cursor (an opaque string) is wrapped with an HMAC-SHA256 tag computed with
a key that lives only in this process, over the cursor *and* the query it belongs to
(tenant, principal, ``contextId``, ``status``, ``statusTimestampAfter``). So a token
that was not issued here, was altered, or is replayed with other filters or by another
principal is refused with 400 instead of silently paging something else (rule: "Bad
input gets a clear error and changes nothing").

The key: on a store shared by several nodes (PostgreSQL), the database's, created once
by the first node and read by every other (``TaskPlane.page_key``), so page 2 may be
asked of any node and tokens survive restarts. On a SQLite store, a fresh key each
time the server starts: tokens do not survive a restart (a client starts again from
the first page).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
from collections.abc import Sequence

from taskplane.errors import InvalidRequest

KEY_BYTES = 32
TAG_BYTES = 16
"""Bytes of the HMAC-SHA256 tag kept in a token (128 bits)."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class PageTokens:
    """Seals and opens page tokens with one key.

    Args:
        key: the HMAC key (a shared store's: tokens outlive restarts and open on any
            node); a fresh random one when ``None`` (tokens expire when the server
            restarts). The refusal says which.
    """

    def __init__(self, key: bytes | None = None) -> None:
        self._key = key if key is not None else secrets.token_bytes(KEY_BYTES)
        self._lifetime = (
            "bound to the filters and caller"
            if key is not None
            else "bound to the filters and caller, and expire when the server restarts"
        )

    def _tag(self, cursor: str, query: Sequence[object]) -> bytes:
        bound = json.dumps([cursor, *query], separators=(",", ":"), default=str).encode()
        return hmac.new(self._key, bound, hashlib.sha256).digest()[:TAG_BYTES]

    def seal(self, cursor: str, query: Sequence[object]) -> str:
        """The token for ``cursor`` issued to ``query``; ``""`` stays ``""`` (last page)."""
        if not cursor:
            return ""
        return f"{_b64(cursor.encode())}.{_b64(self._tag(cursor, query))}"

    def open(self, token: str, query: Sequence[object]) -> str:
        """The cursor inside ``token``, if this process issued it for ``query``.

        Raises:
            InvalidRequest: (400) malformed, altered, foreign, or for another query.
        """
        body, dot, tag = token.partition(".")
        try:
            cursor = _unb64(body).decode() if dot else ""
            valid = bool(cursor) and hmac.compare_digest(_unb64(tag), self._tag(cursor, query))
        except (binascii.Error, ValueError):
            valid = False
        if not valid:
            raise InvalidRequest(
                "pageToken is not a token this server issued for this query (tokens are "
                f"{self._lifetime}); omit it to start from the first page",
                field_violations=[("pageToken", "unknown page token")],
            )
        return cursor
