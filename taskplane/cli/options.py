"""Command-line flags that mirror environment variables, and the settings they build.

A flag wins over its variable; a variable wins over the default. Flags are checked by
click (the error names the flag), then, like variables, by the settings loader
(:mod:`taskplane.settings`; the error names the variable). Flags are applied to the
settings records as they are built, never written into the environment.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import attrs
import click

from taskplane.settings import (
    LOG_LEVELS,
    MAX_BLOCKING_TIMEOUT_MS,
    MAX_CONCURRENCY,
    MAX_TURN_TIMEOUT_MS,
    RUNTIMES,
    AgentSettings,
    ConfigError,
    ServerSettings,
    declared,
    load_agent,
    load_server,
)
from taskplane.settings import credentials_path as configured_credentials_path
from taskplane.settings import store_root as configured_store_root
from taskplane.settings import store_url as configured_store_url

F = TypeVar("F", bound=Callable[..., Any])

SERVER_FLAGS: dict[str, str] = {
    "host": "host",
    "port": "port",
    "public_url": "public_url_override",
    "store": "store_root",
    "store_url": "store_url",
    "credentials": "credentials_path",
    "log_level": "log_level",
    "listen": "a2a_server",
    "workflow_manifest": "workflow_manifest",
    "workflow": "workflow",
    "blocking_timeout_ms": "blocking_timeout_ms",
}
"""Each server flag (as a click parameter name) and the :class:`ServerSettings` field
it sets."""
AGENT_FLAGS: dict[str, str] = {
    "agent": "runtime",
    "agent_concurrency": "concurrency",
    "turn_timeout_ms": "turn_timeout_ms",
}
"""Each agent flag and the :class:`AgentSettings` field it sets."""
FLAG_VARIABLES: dict[str, str] = {
    **{flag: declared(ServerSettings)[field].name for flag, field in SERVER_FLAGS.items()},
    **{flag: declared(AgentSettings)[field].name for flag, field in AGENT_FLAGS.items()},
}
"""Each server flag and the variable it overrides (from the declared settings)."""


def _fields(flags: Mapping[str, object], names: Mapping[str, str]) -> dict[str, object]:
    """The given (non-``None``) flags among ``names``, keyed by field."""
    return {names[f]: v for f, v in flags.items() if f in names and v is not None}


def store_option(func: F) -> F:
    """``--store DIR``: the store root (``CHANNELS_TASK_STORE_PATH``)."""
    return click.option(
        "--store",
        type=click.Path(file_okay=False, path_type=Path),
        help="Store root directory. Overrides CHANNELS_TASK_STORE_PATH "
        "[default: $XDG_DATA_HOME/outfitter/channels/task-plane].",
    )(func)


def store_url_option(func: F) -> F:
    """``--store-url URL``: the PostgreSQL store (``TASKPLANE_STORE_URL``)."""
    return click.option(
        "--store-url",
        help="PostgreSQL store (a libpq URL such as postgresql://user@host/db; keep "
        "passwords in ~/.pgpass or PGPASSWORD) instead of the SQLite store in the store "
        "root; any number of nodes may share one database (each needs the same "
        "A2A_PUBLIC_URL and its own TASKPLANE_NODE_ID). Overrides TASKPLANE_STORE_URL "
        "[default: unset].",
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
                "--host",
                help="Address to bind (IPv4, IPv6 or name). Overrides A2A_HOST "
                "[default: 127.0.0.1].",
            ),
            click.option(
                "--port",
                type=click.IntRange(0, 65535),
                help="TCP port; 0 lets the OS pick a free one. Overrides A2A_PORT [default: 8788].",
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
        store_url_option,
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
            help="Agent runtime behind the plane. Overrides A2A_AGENT_RUNTIME [default: scripted].",
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
            type=click.IntRange(0, MAX_BLOCKING_TIMEOUT_MS),
            help="Longest a blocking message:send waits, in ms; 0 = no limit. Overrides "
            "A2A_BLOCKING_TIMEOUT_MS [default: 60000].",
        ),
    ]
    return card_options(stacked(func, options))


def server_config(
    flags: Mapping[str, object], environ: Mapping[str, str] | None = None
) -> ServerSettings:
    """The ``serve`` settings: ``environ`` (default ``os.environ``) with ``flags``
    applied as the record is built. The listener is on unless ``A2A_SERVER`` (or
    ``--no-listen``) turns it off, and the credentials file defaults to
    :func:`~taskplane.settings.default_credentials_path`.

    Raises:
        click.ClickException: a malformed variable (the message names it).
    """
    try:
        return load_server(
            os.environ if environ is None else environ,
            listen_by_default=True,
            flags=_fields(flags, SERVER_FLAGS),
            default_credentials=True,
        )
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None


def card_config(
    flags: Mapping[str, object], environ: Mapping[str, str] | None = None
) -> ServerSettings:
    """The ``card`` settings: like :func:`server_config` with the listener off (the
    card needs no listener and no credentials).

    Raises:
        ConfigError: a malformed variable (the message names it).
    """
    given = {**_fields(flags, SERVER_FLAGS), "a2a_server": False}
    return load_server(os.environ if environ is None else environ, flags=given)


def agent_settings(
    flags: Mapping[str, object], environ: Mapping[str, str] | None = None
) -> AgentSettings:
    """The agent settings: ``environ`` (default ``os.environ``) with the agent flags.

    Raises:
        AgentConfigError: a malformed or missing agent setting (the message names it).
    """
    return load_agent(os.environ if environ is None else environ, flags=_fields(flags, AGENT_FLAGS))


@attrs.frozen
class StoreLocation:
    """Where the operator commands find the store.

    Attributes:
        root: the store root (the SQLite store; with ``url``, only the agent sessions).
        url: the PostgreSQL store's libpq URL, or ``None`` for the SQLite store.
    """

    root: Path
    url: str | None = attrs.field(default=None, repr=False)


def store_location(
    store: Path | None, store_url: str | None = None, environ: Mapping[str, str] | None = None
) -> StoreLocation:
    """The store of the operator commands (``tasks``, ``store``, ``deliveries``):
    ``--store-url``, else ``TASKPLANE_STORE_URL`` (PostgreSQL), else the SQLite store
    of ``--store``, else ``CHANNELS_TASK_STORE_PATH``, else the default root.

    Raises:
        click.ClickException: a malformed variable or flag (the message names it).
    """
    variables = os.environ if environ is None else environ
    try:
        url = configured_store_url(variables, flag=store_url)
        root = configured_store_root(variables) if store is None else store.expanduser()
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    return StoreLocation(root, url)


def store_options(func: F) -> F:
    """``--store DIR`` and ``--store-url URL`` (see :func:`store_location`)."""
    return stacked(func, [store_option, store_url_option])


def credentials_file(credentials: Path | None, environ: Mapping[str, str] | None = None) -> Path:
    """``--credentials``, else ``A2A_CREDENTIALS_PATH``, else the default file."""
    if credentials is not None:
        return credentials.expanduser()
    return configured_credentials_path(os.environ if environ is None else environ)
