"""Test modules are not libraries (testing rulebook, rule 1: helpers live in support
modules).

No module under ``tests/`` imports a ``test_*`` module or a ``conftest``: what tests
share lives in ``tests/support/`` or a folder's support module, and fixtures reach tests
through pytest, never through an import.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
MODULES = sorted(TESTS.rglob("*.py"))


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """``(line, dotted name)`` of every import in ``path``, ``from`` imports resolved
    (``from tests.x import test_y`` names ``tests.x.test_y``)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = path.parent.relative_to(TESTS.parent).parts
                base = ".".join([*package[: len(package) - node.level + 1], base]).strip(".")
            found.append((node.lineno, base))
            found.extend((node.lineno, f"{base}.{alias.name}") for alias in node.names)
    return found


def is_test_or_conftest(dotted: str) -> bool:
    parts = dotted.split(".")
    if parts[0] != "tests":
        return False
    return any(p.startswith("test_") or p == "conftest" for p in parts[1:])


def test_the_walk_sees_every_module() -> None:
    names = {p.name for p in MODULES}
    assert {"conftest.py", "test_wake_gates.py", "plane.py"} <= names
    assert is_test_or_conftest("tests.actors.test_wake_gates")
    assert is_test_or_conftest("tests.conftest")
    assert is_test_or_conftest("tests.drills.test_restart_drills.CrashButton")
    assert not is_test_or_conftest("tests.support.agent")
    assert not is_test_or_conftest("tests.e2e.taskplane_proc")
    assert not is_test_or_conftest("taskplane.actors.test_hooks")


def test_no_module_imports_a_test_module_or_a_conftest() -> None:
    offending = [
        f"{path.relative_to(TESTS)}:{line}: {name}"
        for path in MODULES
        for line, name in imported_modules(path)
        if is_test_or_conftest(name)
    ]
    assert offending == [], "move what is shared into tests/support/ (rule 1)"
