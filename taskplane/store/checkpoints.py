"""Per-source checkpoints: one JSON value per (principal, source) (design document,
"A source may advance its checkpoint or acknowledge the provider only after
acceptance").

Blocking functions of a ``sqlite3.Connection``, called only inside store ops.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any


def load(conn: sqlite3.Connection, principal: str, source: str) -> Any:
    """The checkpoint of ``source`` for ``principal`` (decoded JSON), or ``None``."""
    row = conn.execute(
        "SELECT value_json FROM source_checkpoints WHERE principal = ? AND source = ?",
        (principal, source),
    ).fetchone()
    return json.loads(row[0]) if row else None


def save(conn: sqlite3.Connection, principal: str, source: str, value: Any) -> None:
    """Replace the checkpoint of ``source`` for ``principal`` with ``value`` (JSON)."""
    conn.execute(
        "INSERT INTO source_checkpoints (principal, source, value_json) VALUES (?, ?, ?)"
        " ON CONFLICT (principal, source) DO UPDATE SET value_json = excluded.value_json",
        (principal, source, json.dumps(value, sort_keys=True)),
    )
