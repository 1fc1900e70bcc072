"""The ``taskplane`` command line (also ``python -m taskplane``).

``serve`` and ``quickstart`` run the server; ``tasks``, ``store``, ``credentials`` and
``deliveries`` look after a stopped server's data; ``card`` prints the Agent Card.
"""

from __future__ import annotations

import click

from taskplane import __version__
from taskplane.cli.card_cmd import card
from taskplane.cli.credentials_cmd import credentials
from taskplane.cli.deliveries_cmd import deliveries
from taskplane.cli.serve import quickstart, serve
from taskplane.cli.store_cmd import store
from taskplane.cli.tasks_cmd import tasks


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="taskplane")
def main() -> None:
    """taskplane: an A2A v1.0.1 HTTP+JSON task plane for a resident agent.

    Start with `taskplane quickstart` (creates a token, then serves), or create
    credentials with `taskplane credentials add NAME` and run `taskplane serve`.
    Every setting is an environment variable, and the server commands take a flag
    for each; a flag wins over its variable. See docs/configuration.md.
    """


for command in (serve, quickstart, tasks, store, credentials, deliveries, card):
    main.add_command(command)

__all__ = ["main"]
