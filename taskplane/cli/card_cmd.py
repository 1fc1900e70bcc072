"""``taskplane card``: print the Agent Card a server with these settings would serve."""

from __future__ import annotations

from typing import Any

import click

from taskplane.cli.options import card_config, card_options
from taskplane.cli.output import emit_json
from taskplane.settings import ConfigError


@click.command()
@card_options
def card(**flags: Any) -> None:
    """Print the public Agent Card as JSON, built from the same settings as `serve`.

    Reads A2A_HOST, A2A_PORT, A2A_PUBLIC_URL (or the flags) and A2A_AGENT_NAME,
    A2A_AGENT_DESCRIPTION, A2A_AGENT_VERSION. Needs no store and no running server.
    """
    from taskplane.http.card import agent_card_json  # the card model: only when printed

    try:
        config = card_config(flags)
        document = agent_card_json(
            public_url=config.public_url,
            name=config.agent_name,
            description=config.agent_description,
            version=config.agent_version,
        )
    except (ConfigError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    emit_json(document)
