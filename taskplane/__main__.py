"""Command line: ``taskplane serve`` and ``taskplane quickstart`` (also ``python -m taskplane``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click
import trio

from taskplane import __version__
from taskplane.app import PlaneOptions, run_server
from taskplane.config import Config, ConfigError
from taskplane.errors import TaskplaneError
from taskplane.http.auth import Credentials, write_first_run_credentials
from taskplane.logging_setup import configure


def _config_home() -> Path:
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")


def _run(config: Config) -> None:
    configure(config.log_level)

    async def main() -> None:
        await run_server(config, options=PlaneOptions(group_commit=config.group_commit))

    try:
        trio.run(main)
    except KeyboardInterrupt:
        pass
    except (ConfigError, TaskplaneError, ValueError, OSError) as exc:
        click.echo(f"taskplane: {exc}", err=True)
        sys.exit(2)


@click.group()
@click.version_option(__version__)
def main() -> None:
    """taskplane: an A2A v1.0.1 HTTP+JSON task plane for a resident agent."""


@main.command()
def serve() -> None:
    """Run the composed runtime, configured by environment variables.

    The A2A listener runs when A2A_SERVER=1 (then A2A_CREDENTIALS_PATH is required).
    See docs/configuration.md for every variable.
    """
    try:
        config = Config.from_environ(os.environ)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    _run(config)


@main.command()
def quickstart() -> None:
    """First run: create credentials if needed, print how to call the server, serve.

    Uses A2A_CREDENTIALS_PATH, or $XDG_CONFIG_HOME/taskplane/credentials.json; a new
    file (mode 0600) gets one random token for principal ``local``.
    """
    environ = dict(os.environ)
    path = environ.get("A2A_CREDENTIALS_PATH") or str(
        _config_home() / "taskplane" / "credentials.json"
    )
    created = write_first_run_credentials(path)
    environ["A2A_SERVER"] = "1"
    environ["A2A_CREDENTIALS_PATH"] = path
    try:
        config = Config.from_environ(environ)
        credentials = Credentials.load(path)
    except (ConfigError, ValueError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    token = created if created is not None else "<the token in that file>"
    principal = sorted(credentials.principals)[0]
    url = config.public_url
    click.echo(
        f"taskplane {__version__}\n"
        f"  A2A endpoint : {url}  (Agent Card: {url}/.well-known/agent-card.json)\n"
        f"  store        : {config.store_root}\n"
        f"  credentials  : {path}{' (new)' if created else ''}, principal {principal!r}\n"
        f"  token        : {token}\n\n"
        "Try it:\n"
        f"  curl -s -H 'Authorization: Bearer {token}' -H 'Content-Type: application/json' \\\n"
        f'    -d \'{{"message":{{"messageId":"hello-1","role":"ROLE_USER",'
        f'"parts":[{{"text":"hello"}}]}}}}\' {url}/message:send\n',
        err=True,
    )
    _run(config)


if __name__ == "__main__":
    main()
