"""Import layering (STYLE L-1, L-2): each package imports only the layers below it.

Direction: ``http -> actors -> {bridge, store} -> model -> errors``. ``errors``,
``scope`` and ``extensions`` import nothing from the package; ``model`` only errors;
``supervision`` only itself (it stays generic); ``store`` the model and errors;
``bridge`` (the agent-side protocols) never the actors, the store or HTTP; ``actors``
never HTTP; ``http`` never the store; ``sources`` (beside ``http``) the actors but
never the store; only ``app`` composes the plane and ``server`` the HTTP listener
around it; only the command line (``cli``) imports them, and ``__main__`` only starts
``cli``. Every edge not listed is forbidden. Only ``store/`` imports ``sqlite3``, and
outside the SQLite backend only ``app`` names it (everything else uses the store
contract). Modules stay small (~300 lines; a few codec/type modules are allowed up to
500).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "taskplane"

ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "scope": set(),
    "extensions": set(),
    "model": {"model", "errors"},
    "supervision": {"supervision"},
    "store": {"store", "model", "errors", "scope"},
    "actors": {
        "actors",
        "store",
        "model",
        "errors",
        "scope",
        "supervision",
        "bridge",
        "extensions",
    },
    # The bridge defines the protocols the actors call (AgentRuntime, TaskTools); the
    # concrete toolbox lives in actors/, so the bridge never imports the actors.
    "bridge": {"bridge", "model", "errors", "scope", "extensions"},
    "http": {"http", "actors", "model", "errors", "scope", "extensions"},
    # Sources call intake and outbound (the actors), never the store.
    "sources": {"sources", "actors", "model", "errors", "scope", "supervision", "config"},
    "config": set(),
    "logging_setup": set(),
    "observability": {"actors", "bridge", "http", "model", "store", "supervision"},
    "shutdown": {"observability"},
    "app": {
        "actors",
        "bridge",
        "config",
        "extensions",
        "http",
        "sources",
        "store",
        "supervision",
        "scope",
        "errors",
        "observability",
        "shutdown",
    },
    "server": {
        "actors",
        "app",
        "bridge",
        "config",
        "extensions",
        "http",
        "observability",
        "shutdown",
        "sources",
    },
    "cli": {
        "app",
        "bridge",
        "config",
        "errors",
        "http",
        "logging_setup",
        "model",
        "server",
        "sources",
        "store",
    },
    "__main__": {"cli"},
    "__init__": set(),
}
MAX_LINES = 500


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
    assert lines <= MAX_LINES, f"{path.name} has {lines} lines; split it by responsibility"


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
def test_only_the_composition_root_picks_the_store_backend(path: Path) -> None:
    """Outside the backend itself, only ``app`` names it; the rest use the contract."""
    relative = path.relative_to(PACKAGE)
    if relative == Path("app.py") or relative.parts[:2] == ("store", "sqlite"):
        return
    backend = {n for n in _imported_modules(path) if n.startswith("taskplane.store.sqlite")}
    assert not backend, f"{path.name} imports {sorted(backend)}; use taskplane.store.contract"
