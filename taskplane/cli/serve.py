"""``taskplane serve`` and ``taskplane quickstart``: run the task plane in this process."""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click

from taskplane.cli.banner import Banner, postgres_store
from taskplane.cli.gc_tuning import freeze_startup_objects, raise_thresholds
from taskplane.cli.options import agent_settings, server_config, server_options
from taskplane.errors import TaskplaneError
from taskplane.http.auth import Credentials, write_first_run_credentials
from taskplane.logging_setup import configure
from taskplane.settings import ConfigError, ServerSettings, load_sources

if TYPE_CHECKING:
    from taskplane.app import PlaneOptions
    from taskplane.bridge.settings import AgentSettings
    from taskplane.sources.registry import SourcePlan

log = logging.getLogger("taskplane")

STARTUP_EXIT_STATUS = 2
"""Exit status of a startup failure found after the flags and variables were read."""


@click.command()
@server_options
def serve(**flags: Any) -> None:
    """Run the task plane and its A2A HTTP+JSON listener until SIGINT/SIGTERM.

    The listener is on by default; A2A_SERVER=0 (or --no-listen) runs the plane
    without it. Each flag overrides the environment variable named in its help, and
    the variable overrides the default. The credentials file must exist (create one
    with `taskplane credentials add NAME`, or use `taskplane quickstart`).

    Once listening, a banner goes to stdout; logs are JSON lines on stderr. A startup
    failure prints one line `taskplane: ...` and exits with status 2. See
    docs/configuration.md for every setting.
    """
    config = server_config(flags)
    if config.a2a_server:
        assert config.credentials_path is not None
        if not Path(config.credentials_path).exists():
            raise click.ClickException(
                f"no credentials file at {config.credentials_path} (A2A_CREDENTIALS_PATH / "
                "--credentials); create one with `taskplane credentials add NAME`, or run "
                "`taskplane quickstart`"
            )
    _serve(config, flags, None)


@click.command()
@server_options
def quickstart(**flags: Any) -> None:
    """First run: create a credentials file if there is none, then serve.

    Like `serve` with the listener forced on; a missing credentials file
    (A2A_CREDENTIALS_PATH, default $XDG_CONFIG_HOME/taskplane/credentials.json) is
    created with mode 0600 and one random token for principal `local`, which the
    banner shows once. `./run serve` runs this command.
    """
    if flags.get("listen") is False:
        raise click.UsageError("quickstart always listens; use `serve --no-listen` instead")
    flags["listen"] = True
    config = server_config(flags)
    assert config.credentials_path is not None
    try:
        token = write_first_run_credentials(config.credentials_path)
    except OSError as exc:
        raise click.ClickException(
            f"cannot create the credentials file {config.credentials_path} "
            f"(A2A_CREDENTIALS_PATH / --credentials): {exc.strerror or exc}"
        ) from None
    _serve(config, flags, token)


def _serve(config: ServerSettings, flags: Mapping[str, object], token: str | None) -> None:
    """Check the settings the OS will judge, then run; one line per startup failure.

    Logging is configured first, so every record from here on (a source left out by
    auto-detection: ``source_start_failed``) is a JSON line on stderr. The server, the
    plane and the sources are imported here, not with the module: ``--help`` and the
    other commands never pay for them.
    """
    from taskplane.app import PlaneOptions
    from taskplane.server import with_node_id
    from taskplane.sources.registry import plan_sources

    logs = configure(config.log_level)
    config = with_node_id(config)
    try:
        agent = agent_settings(flags)
        sources = plan_sources(load_sources(os.environ))
        credentials = _preflight(config)
    except (ConfigError, ValueError, OSError) as exc:
        _fail(exc)
    warnings = public_url_warnings(config)
    for warning in warnings:
        log.warning(warning, extra={"event": "a2a_public_url_unreachable"})

    def banner(binds: list[str]) -> None:
        if credentials is None:
            return
        url = config.public_url if config.port or config.public_url_override else binds[0]
        text = Banner(
            url=url,
            try_url=_loopback(url) if config.public_url_is_wildcard else url,
            store_root=config.store_root,
            credentials=Path(str(config.credentials_path)),
            principals=credentials.principals,
            token=token,
            warnings=tuple(warnings),
            store=(
                None
                if config.store_url is None or config.node_id is None
                else postgres_store(config.store_url, config.node_id)
            ),
        ).render()
        click.echo(text)

    options = PlaneOptions(group_commit=config.group_commit)
    _run(config, options, agent, sources, banner, lambda: logs.statistics().dropped)


def _preflight(config: ServerSettings) -> Credentials | None:
    """Settings whose OS errors would not name them: store root, host, credentials.

    Raises:
        ConfigError: the store root cannot be created or written, or ``A2A_HOST``
            does not resolve.
        ValueError: the credentials file is invalid.
    """
    root = config.store_root
    try:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"cannot create the store root {root} (CHANNELS_TASK_STORE_PATH / --store): "
            f"{exc.strerror or exc}"
        ) from None
    if not os.access(root, os.W_OK | os.X_OK):
        raise ConfigError(
            f"the store root {root} (CHANNELS_TASK_STORE_PATH / --store) is not writable "
            "by this user"
        )
    if not config.a2a_server:
        return None
    try:
        socket.getaddrinfo(config.host, config.port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        reason = exc.strerror if isinstance(exc, socket.gaierror) else "not a valid host name"
        raise ConfigError(
            f"the host {config.host!r} (A2A_HOST / --host) cannot be resolved: {reason}"
        ) from None
    assert config.credentials_path is not None
    return Credentials.load(config.credentials_path)


def public_url_warnings(config: ServerSettings) -> list[str]:
    """Why the Agent Card's URL may be unreachable (a bind-all ``A2A_HOST`` without
    ``A2A_PUBLIC_URL``); empty when it looks fine."""
    if not (config.a2a_server and config.public_url_is_wildcard):
        return []
    return [
        f"A2A_HOST={config.host} listens on every interface, but without A2A_PUBLIC_URL "
        f"the Agent Card advertises http://{config.host}:<port>, which no client can "
        "reach; set A2A_PUBLIC_URL (or --public-url) to the URL clients use, e.g. "
        "http://my-host.example:8788"
    ]


def _loopback(url: str) -> str:
    return url.replace("://0.0.0.0", "://127.0.0.1").replace("://[::]", "://[::1]")


def _fail(exc: BaseException) -> NoReturn:
    click.echo(f"taskplane: {exc}", err=True)
    sys.exit(STARTUP_EXIT_STATUS)


def _run(
    config: ServerSettings,
    options: PlaneOptions,
    agent: AgentSettings,
    sources: SourcePlan,
    on_listening: Callable[[list[str]], None],
    log_records_dropped: Callable[[], int] | None = None,
) -> None:
    """Serve until SIGINT/SIGTERM; ``on_listening(binds)`` once the listener is up;
    ``log_records_dropped`` reads the log writer's drops for ``/metrics``."""
    import trio

    from taskplane.server import run_server, stop_on_signals

    async def main() -> None:
        shutdown = trio.Event()
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(stop_on_signals, signals, shutdown)

                async def server(*, task_status: trio.TaskStatus[list[str]]) -> None:
                    await run_server(
                        config,
                        options=options,
                        shutdown=shutdown,
                        agent=agent,
                        sources=sources,
                        log_records_dropped=log_records_dropped,
                        task_status=task_status,
                    )
                    nursery.cancel_scope.cancel()  # stopped: the signal watcher too

                binds = await nursery.start(server)
                freeze_startup_objects()
                if binds:
                    on_listening(binds)

    raise_thresholds(config.gc_gen0)
    try:
        trio.run(main, strict_exception_groups=True)
    except BaseException as exc:
        startup = _startup_error(exc)
        if startup is None:
            raise
        _fail(startup)


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
