"""Command-line flags that mirror environment variables, and the Config they build.

A flag wins over its variable; a variable wins over the default. Flags are checked by
click (the error names the flag), variables by :class:`~taskplane.config.Config` (the
error names the variable).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click

from taskplane.bridge.settings import MAX_CONCURRENCY, MAX_TURN_TIMEOUT_MS, RUNTIMES
from taskplane.config import (
    LOG_LEVELS,
    Config,
    ConfigError,
    default_credentials_path,
    default_store_root,
)

F = TypeVar("F", bound=Callable[..., Any])

FLAG_VARIABLES: dict[str, str] = {
    "host": "A2A_HOST",
    "port": "A2A_PORT",
    "public_url": "A2A_PUBLIC_URL",
    "store": "CHANNELS_TASK_STORE_PATH",
    "credentials": "A2A_CREDENTIALS_PATH",
    "log_level": "TASKPLANE_LOG_LEVEL",
    "agent": "A2A_AGENT_RUNTIME",
    "listen": "A2A_SERVER",
    "workflow_manifest": "A2A_WORKFLOW_MANIFEST",
    "workflow": "A2A_WORKFLOW",
    "blocking_timeout_ms": "A2A_BLOCKING_TIMEOUT_MS",
    "agent_concurrency": "A2A_AGENT_CONCURRENCY",
    "turn_timeout_ms": "A2A_TURN_TIMEOUT_MS",
}
"""Each server flag (as a click parameter name) and the variable it overrides."""


def store_option(func: F) -> F:
    """``--store DIR``: the store root (``CHANNELS_TASK_STORE_PATH``)."""
    return click.option(
        "--store",
        type=click.Path(file_okay=False, path_type=Path),
        help="Store root directory. Overrides CHANNELS_TASK_STORE_PATH "
        "[default: $XDG_DATA_HOME/outfitter/channels/task-plane].",
    )(func)


def credentials_option(func: F) -> F:
    """``--credentials FILE``: the credentials file (``A2A_CREDENTIALS_PATH``)."""
    return click.option(
        "--credentials",
        type=click.Path(dir_okay=False, path_type=Path),
        help="Credentials file. Overrides A2A_CREDENTIALS_PATH "
        "[default: $XDG_CONFIG_HOME/taskplane/credentials.json].",
    )(func)


def stacked(func: F, options: Sequence[Callable[[F], F]]) -> F:
    """``func`` under ``options``, as if written as decorators in that order (the
    first one on top, so ``--help`` lists the flags in that order)."""
    for option in reversed(options):
        func = option(func)
    return func


def card_options(func: F) -> F:
    """``--host``, ``--port``, ``--public-url``: what the Agent Card advertises."""
    return stacked(
        func,
        [
            click.option(
                "--host", help="Address to bind (IPv4, IPv6 or name). Overrides A2A_HOST "
                "[default: 127.0.0.1]."
            ),
            click.option(
                "--port",
                type=click.IntRange(0, 65535),
                help="TCP port; 0 lets the OS pick a free one. Overrides A2A_PORT "
                "[default: 8788].",
            ),
            click.option(
                "--public-url",
                help="Absolute http(s) URL clients use to reach the server (Agent Card). "
                "Overrides A2A_PUBLIC_URL [default: http://HOST:PORT].",
            ),
        ],
    )


def server_options(func: F) -> F:
    """Every flag of ``serve`` and ``quickstart`` (see :data:`FLAG_VARIABLES`)."""
    options = [
        click.option(
            "--listen/--no-listen",
            default=None,
            help="Run the A2A HTTP listener. Overrides A2A_SERVER [default: listen].",
        ),
        store_option,
        credentials_option,
        click.option(
            "--log-level",
            type=click.Choice(LOG_LEVELS, case_sensitive=False),
            help="Minimum level of the JSON log lines on stderr. Overrides "
            "TASKPLANE_LOG_LEVEL [default: INFO].",
        ),
        click.option(
            "--agent",
            type=click.Choice(RUNTIMES, case_sensitive=False),
            help="Agent runtime behind the plane. Overrides A2A_AGENT_RUNTIME "
            "[default: scripted].",
        ),
        click.option(
            "--agent-concurrency",
            type=click.IntRange(1, MAX_CONCURRENCY),
            help="Agent turns that may run at once, each for its own Task. Overrides "
            "A2A_AGENT_CONCURRENCY [default: 1].",
        ),
        click.option(
            "--turn-timeout-ms",
            type=click.IntRange(0, MAX_TURN_TIMEOUT_MS),
            help="A turn's deadline in ms; a turn past it is cancelled and counted as "
            "failed; 0 = no deadline. Overrides A2A_TURN_TIMEOUT_MS [default: 600000].",
        ),
        click.option(
            "--workflow-manifest",
            type=click.Path(dir_okay=False, path_type=Path),
            help="Workflow manifest declaring the outputs an agent may record. "
            "Overrides A2A_WORKFLOW_MANIFEST.",
        ),
        click.option(
            "--workflow",
            help="Workflow id in a manifest that holds several. Overrides A2A_WORKFLOW.",
        ),
        click.option(
            "--blocking-timeout-ms",
            type=click.IntRange(0, 24 * 3600 * 1000),
            help="Longest a blocking message:send waits, in ms; 0 = no limit. Overrides "
            "A2A_BLOCKING_TIMEOUT_MS [default: 60000].",
        ),
    ]
    return card_options(stacked(func, options))


def environ_with_flags(
    flags: Mapping[str, object], environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """``environ`` (default ``os.environ``) with each given flag written over its
    variable; ``None`` flags leave the variable alone."""
    merged = dict(os.environ if environ is None else environ)
    for name, value in flags.items():
        variable = FLAG_VARIABLES.get(name)
        if variable is None or value is None:
            continue
        if isinstance(value, bool):
            merged[variable] = "1" if value else "0"
        else:
            merged[variable] = str(value)
    return merged


def server_config(environ: Mapping[str, str]) -> Config:
    """The ``serve`` configuration: the listener is on unless ``A2A_SERVER`` (or
    ``--no-listen``) turns it off, and the credentials file defaults to
    :func:`~taskplane.config.default_credentials_path`.

    Raises:
        click.ClickException: a malformed variable (the message names it).
    """
    environ = dict(environ)
    if not environ.get("A2A_CREDENTIALS_PATH"):
        environ["A2A_CREDENTIALS_PATH"] = str(default_credentials_path(environ))
    try:
        return Config.from_environ(environ, listen_by_default=True)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None


def store_root(store: Path | None, environ: Mapping[str, str] | None = None) -> Path:
    """``--store``, else ``CHANNELS_TASK_STORE_PATH``, else the default root."""
    environ = os.environ if environ is None else environ
    if store is not None:
        return store.expanduser()
    configured = environ.get("CHANNELS_TASK_STORE_PATH")
    return Path(configured).expanduser() if configured else default_store_root(environ)


def credentials_file(credentials: Path | None, environ: Mapping[str, str] | None = None) -> Path:
    """``--credentials``, else ``A2A_CREDENTIALS_PATH``, else the default file."""
    environ = os.environ if environ is None else environ
    if credentials is not None:
        return credentials.expanduser()
    configured = environ.get("A2A_CREDENTIALS_PATH")
    return Path(configured).expanduser() if configured else default_credentials_path(environ)
