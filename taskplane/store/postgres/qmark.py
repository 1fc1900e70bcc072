"""Portable statements on psycopg: the shared store modules write their SQL with
``?`` parameters (the DB-API "qmark" style SQLite takes); psycopg takes ``%s``.

A statement given here must have no ``?`` or ``%`` of its own (no literal holding
one, no jsonb ``?`` operator): every ``?`` becomes a parameter and every ``%`` is
escaped.
"""

from __future__ import annotations


def to_format(sql: str) -> str:
    """``sql`` with each ``?`` parameter as ``%s`` (and ``%`` escaped as ``%%``)."""
    return sql.replace("%", "%%").replace("?", "%s")
