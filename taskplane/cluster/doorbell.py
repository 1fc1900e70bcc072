"""What a doorbell says to a node: the rings of one or more NOTIFY payloads.

Design rule "Streaming shows what happens after you connect", on several nodes. The
store rings after each batch's COMMIT (never inside the transaction); a ring is only a
hint, since the record of a change is its row, committed first. Tokens:
``t:<task id>:<version>`` (that version of the Task is committed), ``c`` (claims were
recorded), ``w`` (a wake may be waiting). A node that misses a ring finds the change
on its next poll (:mod:`taskplane.cluster.events`).
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


def parse(payloads: Sequence[str]) -> Heard:
    """What ``payloads`` say; tokens it does not know are ignored (a newer node's)."""
    versions: dict[str, int] = {}
    claims = wake = False
    for payload in payloads:
        for token in payload.split():
            if token == "c":
                claims = True
            elif token == "w":
                wake = True
            elif token.startswith("t:"):
                task_id, _, version = token[2:].rpartition(":")
                if task_id and version.isdigit():
                    versions[task_id] = max(versions.get(task_id, 0), int(version))
    return Heard(versions, claims, wake)
