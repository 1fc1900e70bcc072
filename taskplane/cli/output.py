"""How the commands print: JSON on stdout, human notes on stderr."""

from __future__ import annotations

import json
from typing import Any

import click


def emit_json(value: Any, *, pretty: bool = True) -> None:
    """Print ``value`` as JSON on stdout (indented, or one line with ``pretty=False``)."""
    if pretty:
        click.echo(json.dumps(value, ensure_ascii=False, indent=2))
    else:
        click.echo(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def note(text: str) -> None:
    """A line for the operator on stderr (never mixed into JSON output)."""
    click.echo(text, err=True)
