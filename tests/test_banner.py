"""The startup banner names the store: the SQLite store root, or on PostgreSQL the
database (never its password) and this node's id."""

from __future__ import annotations

from pathlib import Path

from taskplane.cli.banner import Banner, postgres_store


def banner(**kw: object) -> str:
    return Banner(
        url="http://127.0.0.1:8788",
        try_url="http://127.0.0.1:8788",
        store_root=Path("/srv/taskplane"),
        credentials=Path("/etc/taskplane/credentials.json"),
        principals=frozenset({"local"}),
        **kw,  # type: ignore[arg-type]
    ).render()


def test_the_sqlite_banner_names_the_store_root() -> None:
    text = banner()
    assert "  store        : /srv/taskplane\n" in text and "store root" not in text


def test_the_postgresql_banner_names_the_database_without_its_password_and_the_node() -> None:
    store = postgres_store("postgresql://tp:s3cret@db.internal:5433/taskplane", "web-1")
    text = banner(store=store)
    assert "  store        : PostgreSQL " in text and "dbname=taskplane" in text
    assert "host=db.internal" in text and ", node web-1\n" in text
    assert "  store root   : /srv/taskplane\n" in text
    assert "s3cret" not in text
