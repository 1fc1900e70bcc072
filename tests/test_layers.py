"""Import layering (design rule "Import layers"): each part imports only the parts below it.

``ALLOWED`` is the table in docs/architecture.md, "Import layers", row for row (a test
below keeps the two equal). Top down: ``__main__`` starts ``cli``; the command line
(``cli``) runs ``server``, which puts the HTTP listener around the plane that ``app``
composes; ``shutdown`` and ``observability`` serve those two; ``http`` and ``sources``
reach the plane only through the actors' facades; the ``actors`` call ``bridge`` (the
agent-side protocols and runtimes) and ``store``; everything rests on ``model``, and
``supervision`` (which takes its delays from ``backoff``) and the leaves (``errors``,
``scope``, ``extensions``, ``settings``, ``logging_setup``, ``backoff``,
``durable_file``) import nothing else from the package; ``mailbox`` (request/reply)
only ``errors``; ``config`` re-exports ``settings``. Every edge not listed is
forbidden. Only ``store/`` imports ``sqlite3``, and outside the SQLite backend only
``app`` names it (everything else uses the store contract); the same for the
PostgreSQL backend, and only it imports ``psycopg``.

Module size: one concept per module, however long; split when a second concept
appears. ``MAX_LINES`` is a generous ceiling kept as an alarm, not a budget.
"""

from __future__ import annotations

import ast
import inspect
import re
import typing
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "taskplane"
ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"

ALLOWED: dict[str, set[str]] = {
    "__main__": {"cli"},
    "cli": {
        "settings",
        "app",
        "bridge",
        "config",
        "durable_file",
        "errors",
        "http",
        "logging_setup",
        "model",
        "server",
        "sources",
        "store",
    },
    "server": {
        "settings",
        "actors",
        "cluster",
        "app",
        "bridge",
        "config",
        "extensions",
        "http",
        "observability",
        "shutdown",
        "sources",
    },
    # app composes the plane; only server puts the HTTP listener around it.
    "app": {
        "actors",
        "bridge",
        "cluster",
        "mailbox",
        "config",
        "extensions",
        "sources",
        "store",
        "supervision",
        "scope",
        "errors",
        "observability",
        "shutdown",
    },
    "shutdown": {"observability"},
    "observability": {"actors", "bridge", "cluster", "http", "model", "store", "supervision"},
    # Several nodes on one shared store: the cluster's own actors beside the plane's.
    "cluster": {
        "actors",
        "bridge",
        "store",
        "model",
        "supervision",
        "mailbox",
        "settings",
        "errors",
        "extensions",
        "scope",
        "backoff",
    },
    "http": {"actors", "model", "errors", "scope", "extensions", "settings", "durable_file"},
    # Sources call intake and outbound (the actors), never the store.
    "sources": {
        "actors",
        "model",
        "errors",
        "scope",
        "supervision",
        "config",
        "settings",
        "backoff",
        "durable_file",
    },
    "actors": {
        "store",
        "model",
        "errors",
        "scope",
        "supervision",
        "bridge",
        "extensions",
        "settings",
        "backoff",
        "mailbox",
    },
    # The bridge defines the protocols the actors call (AgentRuntime, TaskTools); the
    # concrete toolbox lives in actors/, so the bridge never imports the actors.
    "bridge": {"model", "errors", "scope", "extensions", "settings", "backoff", "durable_file"},
    "store": {"model", "errors", "scope", "mailbox"},
    "model": {"errors"},
    "supervision": {"backoff"},
    # Request/reply between actors, shared by the store actor and the actors.
    "mailbox": {"errors"},
    "errors": set(),
    "scope": set(),
    "extensions": set(),
    # config is the server settings' older name, re-exported from the settings loader.
    "config": {"settings"},
    "settings": set(),
    "logging_setup": set(),
    # Written once for every part: retry delays, atomic durable file writes.
    "backoff": set(),
    "durable_file": set(),
    "__init__": set(),
}
"""Part -> the other parts it may import (a part may always import itself)."""

MAX_LINES = 600
"""The alarm ceiling for one module (lines); the rule is one concept per module."""


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py"))


def _layer(path: Path) -> str:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return parts[0]


def _imported_layers(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    layers: set[str] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        for name in names:
            if name == "taskplane" or name.startswith("taskplane."):
                rest = name.split(".")[1:]
                layers.add(rest[0] if rest else "__init__")
    return layers


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_module_imports_only_lower_layers(path: Path) -> None:
    layer = _layer(path)
    allowed = ALLOWED[layer] | {layer}
    if layer in ("__init__", "__main__") and path.name == "__init__.py":
        allowed = {"__init__"}
    wrong = _imported_layers(path) - allowed - {"__init__"}
    assert not wrong, f"{path.name} ({layer}) imports {sorted(wrong)}"


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_module_is_small(path: Path) -> None:
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, (
        f"{path.name} has {lines} lines: it has likely taken on a second concept; split by concept"
    )


def _documented_layers() -> dict[str, set[str]]:
    """The "Import layers" table of docs/architecture.md: part -> parts it may import."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    section = text.split("### Import layers", 1)[1].split("\n### ", 1)[0]
    documented: dict[str, set[str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or not cells[0].isdigit():
            continue
        _, part, modules, imports = cells
        names = re.findall(r"`([a-z_]+)`", imports)
        parts = re.findall(r"`([a-z_]+)`", modules) if part == "leaves" else [part.strip("`")]
        for name in parts:
            documented[name] = set(names)
    return documented


def test_documented_layering_is_the_enforced_one() -> None:
    documented = _documented_layers()
    enforced = {part: allowed for part, allowed in ALLOWED.items() if part != "__init__"}
    assert documented == enforced, "docs/architecture.md 'Import layers' differs from ALLOWED"


def test_no_asyncio_or_anyio_anywhere_in_the_package() -> None:
    for path in _modules():
        imported = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module.split(".")[0])
        assert not imported & {"asyncio", "anyio"}, path


def _imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
    return names


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_only_the_store_imports_sqlite3(path: Path) -> None:
    """The store contract: no module outside ``store/`` sees the driver."""
    if path.relative_to(PACKAGE).parts[0] == "store":
        return
    drivers = {n for n in _imported_modules(path) if n.split(".")[0] == "sqlite3"}
    assert not drivers, f"{path.name} imports {sorted(drivers)}; use the TaskStore contract"


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_only_the_postgres_backend_imports_psycopg(path: Path) -> None:
    """The PostgreSQL driver stays inside its backend (driver errors translated there)."""
    if path.relative_to(PACKAGE).parts[:2] == ("store", "postgres"):
        return
    drivers = {n for n in _imported_modules(path) if n.split(".")[0] == "psycopg"}
    assert not drivers, f"{path.name} imports {sorted(drivers)}; use the TaskStore contract"


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_only_the_composition_root_picks_the_store_backend(path: Path, backend: str) -> None:
    """Outside the backend itself, only ``app`` names it; the rest use the contract."""
    relative = path.relative_to(PACKAGE)
    if relative == Path("app.py") or relative.parts[:2] == ("store", backend):
        return
    named = {n for n in _imported_modules(path) if n.startswith(f"taskplane.store.{backend}")}
    assert not named, f"{path.name} imports {sorted(named)}; use taskplane.store.contract"


def _named_types(hint: object) -> Iterator[object]:
    """``hint`` and every type it is built from (``X | None``, ``tuple[X, ...]``, ...)."""
    yield hint
    for arg in typing.get_args(hint):
        yield from _named_types(arg)


def _public_return_hints(cls: type) -> dict[str, object]:
    """The return annotation of each public method and property of ``cls``."""
    hints: dict[str, object] = {}
    for name, member in vars(cls).items():
        if name.startswith("_"):
            continue
        function = member.fget if isinstance(member, property) else member
        if inspect.isfunction(function):
            hints[name] = typing.get_type_hints(function).get("return")
    return hints


def test_the_plane_returns_plane_level_results() -> None:
    """``TaskPlane`` answers with Tasks, Messages and its own records (a send's outcome,
    a page of Tasks), never a ``store.records`` type: its callers (``http/``, the
    sources) never hold a store record."""
    from taskplane.actors.plane import TaskPlane

    hints = _public_return_hints(TaskPlane)
    assert {"send", "ingest", "get_task", "list_tasks", "cancel"} <= set(hints)
    leaks = {}
    for name, hint in hints.items():
        named = list(_named_types(hint))
        for record in [t for t in named if attrs.has(t)]:  # the fields of returned records
            named += [t for f in attrs.fields(record) for t in _named_types(f.type)]
        found = {getattr(t, "__name__", str(t)) for t in named if _is_store_record(t)}
        if found:
            leaks[name] = sorted(found)
    assert not leaks, f"TaskPlane methods return store records: {leaks}"


def _is_store_record(hint: object) -> bool:
    return getattr(hint, "__module__", "") == "taskplane.store.records"


@pytest.mark.parametrize(
    "path", sorted((PACKAGE / "http").rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE))
)
def test_http_imports_no_store_record(path: Path) -> None:
    records = {n for n in _imported_modules(path) if n.startswith("taskplane.store")}
    assert not records, f"{path.name} imports {sorted(records)}; take the plane's results"
