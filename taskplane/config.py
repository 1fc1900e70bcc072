"""Runtime configuration from environment variables.

Every variable (and the command-line flag that overrides it), its default and unit
is documented in ``docs/configuration.md``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

import attrs

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8788
DEFAULT_BLOCKING_TIMEOUT_MS = 60_000
DEFAULT_KEEP_ALIVE_S = 75
DEFAULT_SEND_TIMEOUT_S = 60
DEFAULT_GC_GEN0 = 10_000
"""Net container allocations between two young garbage collections of ``taskplane serve``."""
MIN_GC_GEN0 = 700
"""CPython's own default; a lower threshold only collects more often."""
DEFAULT_AGENT_NAME = "channels-agent"
DEFAULT_AGENT_DESCRIPTION = "A resident agent behind an A2A v1 task plane (taskplane)."
DEFAULT_AGENT_VERSION = "0.0.0"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
WILDCARD_HOSTS = frozenset({"0.0.0.0", "::", "[::]", ""})
"""Bind-all addresses: no client can reach the server at such a URL."""
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


class ConfigError(ValueError):
    """A configuration variable is missing or malformed; the message names it."""


def default_credentials_path(environ: Mapping[str, str]) -> Path:
    """``${XDG_CONFIG_HOME:-$HOME/.config}/taskplane/credentials.json``: where the
    command line looks for (and ``quickstart``/``credentials add`` create) the file."""
    config_home = environ.get("XDG_CONFIG_HOME") or str(Path(environ.get("HOME", "~")) / ".config")
    return Path(config_home).expanduser() / "taskplane" / "credentials.json"


def default_store_root(environ: Mapping[str, str]) -> Path:
    """``${XDG_DATA_HOME:-$HOME/.local/share}/outfitter/channels/task-plane``."""
    data_home = environ.get("XDG_DATA_HOME") or str(Path(environ.get("HOME", "~")) / ".local/share")
    return Path(data_home).expanduser() / "outfitter" / "channels" / "task-plane"


@attrs.frozen
class Config:
    """The server's settings. Build with :meth:`from_environ`.

    Attributes:
        a2a_server: run the HTTP listener (``A2A_SERVER``; see :meth:`from_environ`).
        credentials_path: ``A2A_CREDENTIALS_PATH`` (required with the listener).
        host, port: ``A2A_HOST`` / ``A2A_PORT`` (default 127.0.0.1:8788; port 0 picks one).
        public_url: ``A2A_PUBLIC_URL``, default ``http://<host>:<port>``.
        agent_name, agent_description, agent_version: the Agent Card's identity.
        store_root: ``CHANNELS_TASK_STORE_PATH`` (a directory).
        legacy_store_path: ``A2A_STORE_PATH`` (only warned about; never merged).
        workflow_manifest, workflow: ``A2A_WORKFLOW_MANIFEST`` / ``A2A_WORKFLOW``.
        blocking_timeout_ms: ``A2A_BLOCKING_TIMEOUT_MS``, ms a blocking send waits.
        log_level: ``TASKPLANE_LOG_LEVEL`` (default ``INFO``).
        group_commit: ``TASKPLANE_GROUP_COMMIT`` (default on; ``0`` commits each op
            in its own transaction, for benchmarks).
        keep_alive_s: ``TASKPLANE_KEEP_ALIVE_S``, seconds an idle keep-alive
            connection stays open (default 75).
        send_timeout_s: ``TASKPLANE_SEND_TIMEOUT_S``, seconds a response may make no
            progress (a client that stopped reading) before the connection is
            aborted (default 60).
        gc_gen0: ``TASKPLANE_GC_GEN0``, net container allocations between two young
            garbage collections of the server process (default 10,000; 0 keeps
            CPython's default of 700).
    """

    a2a_server: bool = False
    credentials_path: str | None = None
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    public_url_override: str | None = None
    agent_name: str = DEFAULT_AGENT_NAME
    agent_description: str = DEFAULT_AGENT_DESCRIPTION
    agent_version: str = DEFAULT_AGENT_VERSION
    store_root: Path = attrs.field(factory=lambda: default_store_root(os.environ))
    legacy_store_path: str | None = None
    workflow_manifest: str | None = None
    workflow: str | None = None
    blocking_timeout_ms: int = DEFAULT_BLOCKING_TIMEOUT_MS
    log_level: str = "INFO"
    group_commit: bool = True
    keep_alive_s: int = DEFAULT_KEEP_ALIVE_S
    send_timeout_s: int = DEFAULT_SEND_TIMEOUT_S
    gc_gen0: int = DEFAULT_GC_GEN0

    @property
    def public_url_is_wildcard(self) -> bool:
        """The Agent Card would advertise a bind-all address (``0.0.0.0``, ``::``):
        ``A2A_HOST`` is one and ``A2A_PUBLIC_URL`` is unset."""
        return self.public_url_override is None and self.host in WILDCARD_HOSTS

    @property
    def public_url(self) -> str:
        """The interface URL in the Agent Card and in ``outfitter-task/v1`` locators."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return (self.public_url_override or f"http://{host}:{self.port}").rstrip("/")

    @classmethod
    def from_environ(cls, environ: Mapping[str, str], *, listen_by_default: bool = False) -> Config:
        """Read every variable of ``environ``.

        Args:
            listen_by_default: the listener's setting when ``A2A_SERVER`` is unset or
                empty. The library default is off (an embedder composes its own
                surface); ``taskplane serve`` passes ``True``.
        Raises:
            ConfigError: a malformed value (an ``A2A_SERVER`` that is not one of
                ``1 true yes on 0 false no off`` included), or the listener on without
                ``A2A_CREDENTIALS_PATH``.
        """
        server = _switch(environ, "A2A_SERVER", default=listen_by_default)
        credentials = environ.get("A2A_CREDENTIALS_PATH") or None
        if server and not credentials:
            raise ConfigError(
                "the A2A listener needs A2A_CREDENTIALS_PATH: a JSON file "
                '{"credentials": [{"token": "...", "principal": "..."}]}'
            )
        store = environ.get("CHANNELS_TASK_STORE_PATH")
        return cls(
            a2a_server=server,
            credentials_path=credentials,
            host=environ.get("A2A_HOST") or DEFAULT_HOST,
            port=_int(environ, "A2A_PORT", DEFAULT_PORT, low=0, high=65535),
            public_url_override=_public_url(environ.get("A2A_PUBLIC_URL") or None),
            agent_name=environ.get("A2A_AGENT_NAME") or DEFAULT_AGENT_NAME,
            agent_description=environ.get("A2A_AGENT_DESCRIPTION") or DEFAULT_AGENT_DESCRIPTION,
            agent_version=environ.get("A2A_AGENT_VERSION") or DEFAULT_AGENT_VERSION,
            store_root=Path(store).expanduser() if store else default_store_root(environ),
            legacy_store_path=environ.get("A2A_STORE_PATH") or None,
            workflow_manifest=environ.get("A2A_WORKFLOW_MANIFEST") or None,
            workflow=environ.get("A2A_WORKFLOW") or None,
            blocking_timeout_ms=_int(
                environ,
                "A2A_BLOCKING_TIMEOUT_MS",
                DEFAULT_BLOCKING_TIMEOUT_MS,
                low=0,
                high=24 * 3600 * 1000,
            ),
            log_level=_log_level(environ),
            group_commit=_switch(environ, "TASKPLANE_GROUP_COMMIT", default=True),
            keep_alive_s=_int(
                environ, "TASKPLANE_KEEP_ALIVE_S", DEFAULT_KEEP_ALIVE_S, low=1, high=3600
            ),
            send_timeout_s=_int(
                environ, "TASKPLANE_SEND_TIMEOUT_S", DEFAULT_SEND_TIMEOUT_S, low=1, high=3600
            ),
            gc_gen0=_gc_gen0(environ),
        )


def _public_url(value: str | None) -> str | None:
    if value is None:
        return None
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise ConfigError(
            f"A2A_PUBLIC_URL={value!r} must be an absolute http(s) URL without query or fragment"
        )
    return value


def _switch(environ: Mapping[str, str], name: str, *, default: bool) -> bool:
    raw = environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ConfigError(
        f"{name}={raw!r} is not understood; use one of {', '.join(_TRUE)} (on) "
        f"or {', '.join(_FALSE)} (off)"
    )


def _log_level(environ: Mapping[str, str]) -> str:
    level = (environ.get("TASKPLANE_LOG_LEVEL") or "INFO").strip().upper()
    if level not in LOG_LEVELS:
        raise ConfigError(f"TASKPLANE_LOG_LEVEL={level!r} is not one of {', '.join(LOG_LEVELS)}")
    return level


def _gc_gen0(environ: Mapping[str, str]) -> int:
    value = _int(environ, "TASKPLANE_GC_GEN0", DEFAULT_GC_GEN0, low=0, high=10_000_000)
    if 0 < value < MIN_GC_GEN0:
        raise ConfigError(
            f"TASKPLANE_GC_GEN0={value} is below {MIN_GC_GEN0}; use 0 for CPython's default"
        )
    return value


def _int(environ: Mapping[str, str], name: str, default: int, *, low: int, high: int) -> int:
    raw = environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not an integer") from None
    if not low <= value <= high:
        raise ConfigError(f"{name}={value} is outside {low}..{high}")
    return value
