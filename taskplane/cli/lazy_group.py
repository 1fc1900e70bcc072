"""A click group whose subcommands are imported only when they are used.

``python -m taskplane credentials list`` should pay for the credentials file, not for
the HTTP stack, the sources and the plane that ``serve`` needs. :class:`LazyGroup`
holds a static table of command names and import paths (click's lazy-loading
pattern): listing the names imports nothing, and resolving one name imports that
one command's module (the command being run, or each name for ``--help``'s list).

The table stands in for the group's ``commands`` mapping itself, so every path of
click that reads it (resolving a name, listing names, the "Did you mean" suggestion
of an unknown name, shell completion) behaves exactly as with eagerly added
commands: names, help, options, exit statuses and error texts are unchanged.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any

import click


class LazyCommands(MutableMapping[str, click.Command]):
    """Command name -> :class:`click.Command`, importing each command on lookup.

    ``table`` maps each name to ``"package.module:attribute"``; looking a name up
    imports its module (Python caches it, so only the first lookup costs anything).
    Commands set directly (``Group.add_command``) are kept as given and win over a
    table entry of the same name; deleting a name removes both.
    """

    def __init__(self, table: Mapping[str, str]) -> None:
        self._table = dict(table)
        self._added: dict[str, click.Command] = {}

    def __getitem__(self, name: str) -> click.Command:
        """The command ``name``.

        Raises:
            KeyError: no command has that name.
            TypeError: the table points at something that is not a click command (a
                programming error, never an operator's).
        """
        if name in self._added:
            return self._added[name]
        module_name, _, attribute = self._table[name].partition(":")
        loaded = getattr(importlib.import_module(module_name), attribute)
        if not isinstance(loaded, click.Command):
            raise TypeError(f"{self._table[name]} is not a click command")
        return loaded

    def __setitem__(self, name: str, command: click.Command) -> None:
        self._added[name] = command

    def __delitem__(self, name: str) -> None:
        if name not in self._added and name not in self._table:
            raise KeyError(name)
        self._added.pop(name, None)
        self._table.pop(name, None)

    def __iter__(self) -> Iterator[str]:
        return iter(sorted({*self._table, *self._added}))

    def __len__(self) -> int:
        return len({*self._table, *self._added})

    def __contains__(self, name: object) -> bool:
        return name in self._added or name in self._table


class LazyGroup(click.Group):
    """A :class:`click.Group` whose commands are ``lazy_subcommands``, a table of
    ``name -> "package.module:attribute"`` imported one by one on use (see
    :class:`LazyCommands`)."""

    def __init__(
        self, *args: Any, lazy_subcommands: Mapping[str, str] | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.commands = LazyCommands(lazy_subcommands or {})
