"""The ``taskplane`` command line (also ``python -m taskplane``).

``serve`` and ``quickstart`` run the server; ``tasks``, ``store``, ``credentials`` and
``deliveries`` look after a stopped server's data; ``card`` prints the Agent Card.
Each command's module is imported only when that command runs (or for ``--help``'s
list), and each module imports the server, the store or the HTTP stack only inside
the commands that need them, so a command starts as fast as its own work allows.
"""

from __future__ import annotations

import click

from taskplane import __version__
from taskplane.cli.lazy_group import LazyGroup

COMMANDS = {
    "serve": "taskplane.cli.serve:serve",
    "quickstart": "taskplane.cli.serve:quickstart",
    "tasks": "taskplane.cli.tasks_cmd:tasks",
    "store": "taskplane.cli.store_cmd:store",
    "credentials": "taskplane.cli.credentials_cmd:credentials",
    "deliveries": "taskplane.cli.deliveries_cmd:deliveries",
    "card": "taskplane.cli.card_cmd:card",
}
"""Each command's name and where it is defined (``module:attribute``)."""


@click.group(
    cls=LazyGroup,
    lazy_subcommands=COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(__version__, prog_name="taskplane")
def main() -> None:
    """taskplane: an A2A v1.0.1 HTTP+JSON task plane for a resident agent.

    Start with `taskplane quickstart` (creates a token, then serves), or create
    credentials with `taskplane credentials add NAME` and run `taskplane serve`.
    Every setting is an environment variable, and the server commands take a flag
    for each; a flag wins over its variable. See docs/configuration.md.
    """


__all__ = ["main"]
