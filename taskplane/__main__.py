"""Command line: ``taskplane serve`` and ``taskplane quickstart`` (also ``python -m taskplane``)."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import click
import trio

from taskplane import __version__
from taskplane.app import PlaneOptions, run_server, stop_on_signals
from taskplane.config import Config, ConfigError
from taskplane.deliveries_cli import deliveries
from taskplane.errors import TaskplaneError
from taskplane.http.auth import Credentials, write_first_run_credentials
from taskplane.logging_setup import configure
from taskplane.sources.registry import plan_sources


def _config_home() -> Path:
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")


def _run(config: Config, on_listening: Callable[[list[str]], None] | None = None) -> None:
    """Serve until SIGINT/SIGTERM; ``on_listening(binds)`` once the listener is up."""
    configure(config.log_level)
    try:
        sources = plan_sources(os.environ)
    except ConfigError as exc:
        click.echo(f"taskplane: {exc}", err=True)
        sys.exit(2)

    async def main() -> None:
        shutdown = trio.Event()
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(stop_on_signals, signals, shutdown)

                async def server(*, task_status: trio.TaskStatus[list[str]]) -> None:
                    options = PlaneOptions(group_commit=config.group_commit)
                    await run_server(
                        config,
                        options=options,
                        shutdown=shutdown,
                        sources=sources,
                        task_status=task_status,
                    )
                    nursery.cancel_scope.cancel()  # stopped: the signal watcher too

                binds = await nursery.start(server)
                if on_listening is not None:
                    on_listening(binds)

    try:
        trio.run(main, strict_exception_groups=True)
    except BaseException as exc:
        startup = _startup_error(exc)
        if startup is None:
            raise
        click.echo(f"taskplane: {startup}", err=True)
        sys.exit(2)


def _startup_error(exc: BaseException) -> BaseException | None:
    """The configuration or environment error inside ``exc``, if that is all it is."""
    if isinstance(exc, BaseExceptionGroup):
        leaves = [e for e in _leaves(exc) if not isinstance(e, KeyboardInterrupt)]
        return leaves[0] if len(leaves) == 1 and _is_startup(leaves[0]) else None
    return exc if _is_startup(exc) else None


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    out: list[BaseException] = []
    for exc in group.exceptions:
        out.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return out


def _is_startup(exc: BaseException) -> bool:
    return isinstance(exc, ConfigError | TaskplaneError | ValueError | OSError)


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
    principals = ", ".join(sorted(credentials.principals))

    def banner(binds: list[str]) -> None:
        url = config.public_url if config.port or config.public_url_override else binds[0]
        click.echo(
            f"taskplane {__version__}\n"
            f"  A2A endpoint : {url}  (Agent Card: {url}/.well-known/agent-card.json)\n"
            f"  store        : {config.store_root}\n"
            f"  credentials  : {path}{' (new)' if created else ''}; principals: {principals}\n"
            f"  token        : {token}\n\n"
            "Try it:\n"
            f"  curl -s -H 'Authorization: Bearer {token}' -H 'Content-Type: application/json' \\\n"
            f'    -d \'{{"message":{{"messageId":"hello-1","role":"ROLE_USER",'
            f'"parts":[{{"text":"hello"}}]}}}}\' {url}/message:send\n',
            err=True,
        )

    _run(config, banner)


main.add_command(deliveries)

if __name__ == "__main__":
    main()
