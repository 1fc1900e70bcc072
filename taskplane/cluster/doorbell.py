"""What a doorbell says to a node: the rings of one or more NOTIFY payloads.

Design rule "Streaming shows what happens after you connect", on several nodes. The
store rings after each batch's COMMIT (never inside the transaction); a ring is only a
hint, since the record of a change is its row, committed first. Tokens:
``t:<task id>:<version>`` (that version of the Task is committed), ``c`` (claims were
recorded), ``w`` (a wake may be waiting), and ``n:<node id>`` opening the payload of
a node. A node that misses a ring finds the change on its next poll
(:mod:`taskplane.cluster.events`). Its own ``c`` and ``w`` rings tell a node nothing
it has not done itself (its claims are in its index, its wakes were offered here), so
:func:`parse` drops them; its own versions are still announced (harmless: its owners
already hold them).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import attrs


class DoorbellSession(Protocol):
    """One LISTEN session (the backend's): read from the trio thread only after its
    socket is readable."""

    def fileno(self) -> int:
        """The session's socket."""
        ...

    def drain(self) -> list[str]:
        """The payloads arrived so far (never blocks). Raises StoreUnavailable when the
        session broke."""
        ...

    def close(self) -> None:
        """Close the session (idempotent)."""
        ...


@attrs.frozen
class Heard:
    """What one or more payloads said: Task versions, claims, wakes.

    Attributes:
        versions: task id -> the newest version rung.
        claims: claims were recorded.
        wake: a wake may be waiting.
    """

    versions: dict[str, int]
    claims: bool
    wake: bool


def parse(payloads: Sequence[str], own: str | None = None) -> Heard:
    """What ``payloads`` say to node ``own`` (its claims and wakes rung by ``own``
    dropped); tokens it does not know are ignored (a newer node's)."""
    versions: dict[str, int] = {}
    claims = wake = False
    for payload in payloads:
        tokens = payload.split()
        mine = own is not None and bool(tokens) and tokens[0] == f"n:{own}"
        for token in tokens:
            if token == "c":
                claims = claims or not mine
            elif token == "w":
                wake = wake or not mine
            elif token.startswith("t:"):
                task_id, _, version = token[2:].rpartition(":")
                if task_id and version.isdigit():
                    versions[task_id] = max(versions.get(task_id, 0), int(version))
    return Heard(versions, claims, wake)
