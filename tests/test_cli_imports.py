"""Each ``taskplane`` command imports only what it needs (no timing involved).

A fresh interpreter runs the command line's entry point (:func:`taskplane.cli.main`)
with a command's arguments and reports which modules were imported by the time it
exited: the file and help commands must not load the HTTP stack (quart, hypercorn),
the server, the sources, trio or the plane; the store commands load the plane's
composition root but neither the HTTP stack nor the sources. The command table itself
is checked in process: every name resolves to the click command of that name.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest

from taskplane.cli import COMMANDS, main
from taskplane.cli.credentials_file import mint_token, write_entries

PROBE = """
import json, sys
from taskplane.cli import main
try:
    main(sys.argv[2:], prog_name="taskplane")
    code = 0
except SystemExit as exc:
    code = exc.code
with open(sys.argv[1], "w", encoding="utf-8") as out:
    json.dump({"code": code, "modules": sorted(sys.modules)}, out)
"""
"""Runs ``main`` with the arguments after the report path, then writes the exit
status and every imported module's name to the report file as JSON."""

HTTP_STACK = ("quart", "hypercorn", "taskplane.server", "taskplane.sources")
"""Packages only ``serve`` and ``quickstart`` need (and their submodules)."""

PLANE = ("trio", "taskplane.app")
"""The actor runtime and the composition root: only commands that open a store."""

PROBE_DEADLINE_S = 60.0


def run_probe(tmp_path: Path, *args: str) -> dict[str, Any]:
    """Run ``taskplane ARGS`` in a fresh interpreter: ``{"code", "modules"}``."""
    report = tmp_path / "report.json"
    env = {
        **os.environ,
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "XDG_DATA_HOME": str(tmp_path / "data"),
    }
    subprocess.run(
        [sys.executable, "-c", PROBE, str(report), *args],
        env=env,
        check=True,
        capture_output=True,
        timeout=PROBE_DEADLINE_S,
    )
    result: dict[str, Any] = json.loads(report.read_text(encoding="utf-8"))
    return result


def loaded(modules: list[str], packages: tuple[str, ...]) -> list[str]:
    """The names in ``modules`` that are one of ``packages`` or inside one."""
    return [m for m in modules if any(m == p or m.startswith(p + ".") for p in packages)]


def test_every_command_name_resolves_to_its_command() -> None:
    ctx = click.Context(main)
    assert main.list_commands(ctx) == sorted(COMMANDS)
    for name in COMMANDS:
        command = main.get_command(ctx, name)
        assert isinstance(command, click.Command)
        assert command.name == name
    assert main.get_command(ctx, "nosuch") is None


@pytest.mark.slow
def test_credentials_list_imports_neither_the_http_stack_nor_the_plane(
    tmp_path: Path,
) -> None:
    credentials = tmp_path / "credentials.json"
    write_entries(credentials, [{"token": mint_token(), "principal": "alice"}])

    result = run_probe(tmp_path, "credentials", "list", "--credentials", str(credentials))

    assert result["code"] == 0
    assert loaded(result["modules"], HTTP_STACK + PLANE) == []


@pytest.mark.slow
@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["tasks", "--help"],
        ["store", "--help"],
        ["deliveries", "--help"],
        ["credentials", "--help"],
        ["serve", "--help"],
        ["stor"],
    ],
)
def test_help_and_usage_errors_import_neither_the_http_stack_nor_the_plane(
    tmp_path: Path, args: list[str]
) -> None:
    result = run_probe(tmp_path, *args)

    assert result["code"] == (2 if args == ["stor"] else 0)
    assert loaded(result["modules"], HTTP_STACK + PLANE) == []


@pytest.mark.slow
def test_a_store_command_imports_the_plane_but_not_the_http_stack(tmp_path: Path) -> None:
    empty = tmp_path / "no-store"
    empty.mkdir()

    result = run_probe(tmp_path, "store", "stats", "--store", str(empty))

    assert result["code"] == 1  # there is no store at that root: refused after opening
    assert "taskplane.app" in result["modules"]  # the probe sees lazily imported modules
    assert loaded(result["modules"], HTTP_STACK) == []
