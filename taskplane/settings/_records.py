"""One frozen record per part: the server, the agent, the default directories and
each native source. Every setting field names its variable (:func:`setting`)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Final

import attrs

from taskplane.settings._parse import AgentConfigError, ConfigError, build, setting

DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_PORT: Final = 8788
DEFAULT_BLOCKING_TIMEOUT_MS: Final = 60_000
MAX_BLOCKING_TIMEOUT_MS: Final = 24 * 3600 * 1000
DEFAULT_KEEP_ALIVE_S: Final = 75
DEFAULT_SEND_TIMEOUT_S: Final = 60
DEFAULT_HEADER_TIMEOUT_S: Final = 10
DEFAULT_BODY_TIMEOUT_S: Final = 60
DEFAULT_MAX_CONNECTIONS: Final = 1024
DEFAULT_MAX_CONNECTIONS_PER_CLIENT: Final = 256
MAX_CONNECTIONS: Final = 1_000_000
DEFAULT_LEASE_TTL_S: Final = 15.0
"""``TASKPLANE_LEASE_TTL_S`` default: seconds a node's heartbeat and leases last."""
MIN_LEASE_TTL_S: Final = 2.0
MAX_LEASE_TTL_S: Final = 300.0
DEFAULT_GC_GEN0: Final = 10_000
"""Net container allocations between two young garbage collections of ``taskplane serve``."""
MIN_GC_GEN0: Final = 700
"""CPython's own default; a lower threshold only collects more often."""
MAX_GC_GEN0: Final = 10_000_000
DEFAULT_AGENT_NAME: Final = "channels-agent"
DEFAULT_AGENT_DESCRIPTION: Final = "A resident agent behind an A2A v1 task plane (taskplane)."
DEFAULT_AGENT_VERSION: Final = "0.0.0"
LOG_LEVELS: Final = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
WILDCARD_HOSTS: Final = frozenset({"0.0.0.0", "::", "[::]", ""})
"""Bind-all addresses: no client can reach the server at such a URL."""
RUNTIMES: Final = ("scripted", "openai", "subprocess", "python")
DEFAULT_PROVIDER_PATIENCE_S: Final = 3_600
"""``A2A_AGENT_PROVIDER_PATIENCE_S`` default (1 hour)."""
MAX_PROVIDER_PATIENCE_S: Final = 7 * 24 * 3600
DEFAULT_PROVIDER_BACKOFF_CAP_S: Final = 300
"""``A2A_AGENT_PROVIDER_BACKOFF_CAP_S`` default (5 minutes)."""
MAX_PROVIDER_BACKOFF_CAP_S: Final = 3_600
DEFAULT_TRIAGE_TIMEOUT_MS: Final = 2_000
"""``A2A_AGENT_TRIAGE_TIMEOUT_MS`` default: past it, a new send becomes a Task."""
MAX_TRIAGE_TIMEOUT_MS: Final = 60_000
PLAIN_TEXT_POLICIES: Final = ("complete", "remind", "fail")
A2A_COMPAT_MODES: Final = ("off", "0.3")
"""``TASKPLANE_A2A_COMPAT``: off, or also serve A2A 0.3 clients (:mod:`taskplane.http.compat03`)."""
"""``A2A_AGENT_PLAIN_TEXT`` values (taskplane.bridge.turn_outcome)."""
MAX_CONCURRENCY: Final = 64
"""Upper bound of ``A2A_AGENT_CONCURRENCY``."""
DEFAULT_TURN_TIMEOUT_MS: Final = 600_000
"""``A2A_TURN_TIMEOUT_MS`` default (10 minutes)."""
MAX_TURN_TIMEOUT_MS: Final = 24 * 3600 * 1000
SOURCE_NAMES: Final = (
    "relay",
    "github",
    "slack",
    "jmap",
    "mattermost",
    "zulip",
    "forgejo",
    "signal",
    "jmap-calendar",
    "chatto",
)
DEFAULT_GITHUB_API_URL: Final = "https://api.github.com"
DEFAULT_GITHUB_POLL_INTERVAL_S: Final = 60.0
DEFAULT_SLACK_API_URL: Final = "https://slack.com/api"
DEFAULT_FORGEJO_POLL_INTERVAL_S: Final = 60.0
DEFAULT_SIGNAL_CLI: Final = "signal-cli"

_CREDENTIALS_DOC = "`${XDG_CONFIG_HOME:-$HOME/.config}/taskplane/credentials.json`"
_STORE_DOC = "`${XDG_DATA_HOME:-$HOME/.local/share}/outfitter/channels/task-plane`"


@attrs.frozen
class HomeSettings:
    """The base directories of the default paths (XDG Base Directory)."""

    config_home: Path = setting(
        "XDG_CONFIG_HOME", "path", unit="directory path", default_doc="`$HOME/.config`"
    )
    data_home: Path = setting(
        "XDG_DATA_HOME", "path", unit="directory path", default_doc="`$HOME/.local/share`"
    )

    @property
    def credentials_path(self) -> Path:
        """``<config home>/taskplane/credentials.json``."""
        return self.config_home / "taskplane" / "credentials.json"

    @property
    def store_root(self) -> Path:
        """``<data home>/outfitter/channels/task-plane``."""
        return self.data_home / "outfitter" / "channels" / "task-plane"


def home_settings(variables: Mapping[str, str]) -> HomeSettings:
    """``XDG_CONFIG_HOME`` and ``XDG_DATA_HOME``, else ``$HOME/.config`` and
    ``$HOME/.local/share`` (``~`` when ``HOME`` is unset, expanded by the OS user).

    Raises:
        ConfigError: never in practice (paths take any text).
    """
    home = Path(variables.get("HOME") or "~").expanduser()
    defaults = {"config_home": home / ".config", "data_home": home / ".local/share"}
    return build(HomeSettings, variables, defaults=defaults)


def default_credentials_path(variables: Mapping[str, str]) -> Path:
    """``${XDG_CONFIG_HOME:-$HOME/.config}/taskplane/credentials.json``: where the
    command line looks for (and ``quickstart``/``credentials add`` create) the file."""
    return home_settings(variables).credentials_path


def default_store_root(variables: Mapping[str, str]) -> Path:
    """``${XDG_DATA_HOME:-$HOME/.local/share}/outfitter/channels/task-plane``."""
    return home_settings(variables).store_root


def _process_store_root() -> Path:
    return default_store_root(os.environ)


@attrs.frozen
class ServerSettings:
    """The server's settings; each attribute names its variable.

    ``Config`` is this record's older name. ``store_root`` defaults to the default
    root of this process's variables, so a bare ``ServerSettings()`` is usable.
    Properties give the URL the Agent Card advertises.
    """

    a2a_server: bool = setting(
        "A2A_SERVER", "switch", False, unit="`1 true yes on`", default_doc="on for `serve`"
    )
    credentials_path: str | None = setting(
        "A2A_CREDENTIALS_PATH", "text", unit="file path", default_doc=_CREDENTIALS_DOC
    )
    host: str = setting("A2A_HOST", "text", DEFAULT_HOST, unit="host name or IP address")
    port: int = setting("A2A_PORT", "int", DEFAULT_PORT, unit="TCP port", low=0, high=65535)
    public_url_override: str | None = setting(
        "A2A_PUBLIC_URL",
        "url",
        unit="absolute `http`/`https` URL",
        plain=True,
        default_doc="`http://<A2A_HOST>:<A2A_PORT>`",
    )
    agent_name: str = setting("A2A_AGENT_NAME", "text", DEFAULT_AGENT_NAME, unit="text")
    agent_description: str = setting(
        "A2A_AGENT_DESCRIPTION", "text", DEFAULT_AGENT_DESCRIPTION, unit="text"
    )
    agent_version: str = setting("A2A_AGENT_VERSION", "text", DEFAULT_AGENT_VERSION, unit="text")
    store_root: Path = setting(
        "CHANNELS_TASK_STORE_PATH",
        "path",
        factory=_process_store_root,
        unit="directory path",
        default_doc=_STORE_DOC,
    )
    store_url: str | None = setting(
        "TASKPLANE_STORE_URL",
        "text",
        secret=True,
        unit="libpq URL or connection string",
        default_doc="unset (the SQLite store in the store root)",
    )
    node_id: str | None = setting(
        "TASKPLANE_NODE_ID",
        "text",
        unit="1-128 letters, digits, `.`, `_`, `-`",
        default_doc="generated per start (`node-` and 12 hex digits)",
    )
    lease_ttl_s: float = setting(
        "TASKPLANE_LEASE_TTL_S",
        "float",
        DEFAULT_LEASE_TTL_S,
        unit="seconds",
        low=MIN_LEASE_TTL_S,
        high=MAX_LEASE_TTL_S,
    )
    legacy_store_path: str | None = setting("A2A_STORE_PATH", "text", unit="file path")
    workflow_manifest: str | None = setting("A2A_WORKFLOW_MANIFEST", "text", unit="file path")
    workflow: str | None = setting("A2A_WORKFLOW", "text", unit="workflow `id`")
    blocking_timeout_ms: int = setting(
        "A2A_BLOCKING_TIMEOUT_MS",
        "int",
        DEFAULT_BLOCKING_TIMEOUT_MS,
        unit="milliseconds",
        low=0,
        high=MAX_BLOCKING_TIMEOUT_MS,
    )
    log_level: str = setting("TASKPLANE_LOG_LEVEL", "choice", "INFO", choices=LOG_LEVELS)
    group_commit: bool = setting("TASKPLANE_GROUP_COMMIT", "switch", True, unit="`1 true yes on`")
    keep_alive_s: int = setting(
        "TASKPLANE_KEEP_ALIVE_S", "int", DEFAULT_KEEP_ALIVE_S, unit="seconds", low=1, high=3600
    )
    send_timeout_s: int = setting(
        "TASKPLANE_SEND_TIMEOUT_S", "int", DEFAULT_SEND_TIMEOUT_S, unit="seconds", low=1, high=3600
    )
    header_timeout_s: int = setting(
        "TASKPLANE_HEADER_TIMEOUT_S",
        "int",
        DEFAULT_HEADER_TIMEOUT_S,
        unit="seconds",
        low=1,
        high=3600,
    )
    body_timeout_s: int = setting(
        "TASKPLANE_BODY_TIMEOUT_S", "int", DEFAULT_BODY_TIMEOUT_S, unit="seconds", low=1, high=3600
    )
    max_connections: int = setting(
        "TASKPLANE_MAX_CONNECTIONS",
        "int",
        DEFAULT_MAX_CONNECTIONS,
        unit="connections",
        low=1,
        high=MAX_CONNECTIONS,
    )
    max_connections_per_client: int = setting(
        "TASKPLANE_MAX_CONNECTIONS_PER_CLIENT",
        "int",
        DEFAULT_MAX_CONNECTIONS_PER_CLIENT,
        unit="connections",
        low=1,
        high=MAX_CONNECTIONS,
    )
    http2: bool = setting("TASKPLANE_HTTP2", "switch", False, unit="`1 true yes on`")
    cors_origins: tuple[str, ...] = setting(
        "TASKPLANE_CORS_ORIGINS",
        "list",
        (),
        unit="comma list of exact origins (`https://app.example.com`)",
        default_doc="unset (no CORS)",
    )
    a2a_compat: str = setting("TASKPLANE_A2A_COMPAT", "choice", "off", choices=A2A_COMPAT_MODES)
    gc_gen0: int = setting(
        "TASKPLANE_GC_GEN0",
        "int",
        DEFAULT_GC_GEN0,
        low=MIN_GC_GEN0,
        high=MAX_GC_GEN0,
        zero_ok=True,
    )

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

    def check(self) -> None:
        """Raise :class:`ConfigError` if the listener runs without a credentials file, a
        CORS origin is not exact (``*``, a path or a trailing ``/``), a store URL is
        given without ``A2A_PUBLIC_URL`` (every node of a shared store advertises the
        load balancer's URL), or ``TASKPLANE_NODE_ID`` is not a node id."""
        if self.store_url and self.public_url_override is None:
            raise ConfigError(
                "A2A_PUBLIC_URL is required with TASKPLANE_STORE_URL: every node of a "
                "PostgreSQL store advertises the same URL (the load balancer's), e.g. "
                "A2A_PUBLIC_URL=https://agents.example.com"
            )
        if self.node_id is not None and not _NODE_ID.fullmatch(self.node_id):
            raise ConfigError(
                f"TASKPLANE_NODE_ID={self.node_id!r} must be 1-128 letters, digits, '.', '_' or '-'"
            )
        for origin in self.cors_origins:
            if not _EXACT_ORIGIN.fullmatch(origin):
                raise ConfigError(
                    f"TASKPLANE_CORS_ORIGINS: {origin!r} is not an exact origin such as "
                    "https://app.example.com (no wildcard, path or trailing /)"
                )
        if self.a2a_server and not self.credentials_path:
            raise ConfigError(
                "the A2A listener needs A2A_CREDENTIALS_PATH: a JSON file "
                '{"credentials": [{"token": "...", "principal": "..."}]}'
            )

    @classmethod
    def from_environ(
        cls, environ: Mapping[str, str], *, listen_by_default: bool = False
    ) -> ServerSettings:
        """The server record of ``environ`` (see :func:`taskplane.settings.load_server`)."""
        from taskplane.settings._load import load_server

        return load_server(environ, listen_by_default=listen_by_default)


_NODE_ID: Final = re.compile(r"[A-Za-z0-9._-]{1,128}", re.ASCII)
_EXACT_ORIGIN: Final = re.compile(
    r"https?://[A-Za-z0-9.-]+(?::[0-9]{1,5})?|https?://\[[0-9A-Fa-f:.]+\](?::[0-9]{1,5})?"
)
"""An origin as a browser sends it: scheme, host, optional port; nothing else."""


@attrs.frozen
class AgentSettings:
    """The agent runtime's settings: which runtime, and what it needs."""

    runtime: str = setting("A2A_AGENT_RUNTIME", "choice", "scripted", choices=RUNTIMES)
    model: str | None = setting("A2A_AGENT_MODEL", "text", unit="model name")
    base_url: str | None = setting(
        "OPENAI_BASE_URL", "url", unit="absolute `http`/`https` URL", default_doc="the OpenAI API"
    )
    api_key: str | None = setting("OPENAI_API_KEY", "text", secret=True, unit="text")
    system_prompt_file: str | None = setting(
        "A2A_AGENT_SYSTEM_PROMPT_FILE", "text", unit="file path"
    )
    command: tuple[str, ...] = setting("A2A_AGENT_COMMAND", "command", (), unit="a command line")
    callable: str | None = setting("A2A_AGENT_CALLABLE", "text", unit="`package.module:function`")
    skills_file: str | None = setting("A2A_AGENT_SKILLS_FILE", "text", unit="file path")
    concurrency: int = setting("A2A_AGENT_CONCURRENCY", "int", 1, low=1, high=MAX_CONCURRENCY)
    turn_timeout_ms: int = setting(
        "A2A_TURN_TIMEOUT_MS",
        "int",
        DEFAULT_TURN_TIMEOUT_MS,
        unit="milliseconds",
        low=0,
        high=MAX_TURN_TIMEOUT_MS,
    )

    plain_text: str = setting(
        "A2A_AGENT_PLAIN_TEXT", "choice", "remind", choices=PLAIN_TEXT_POLICIES
    )
    provider_patience_s: int = setting(
        "A2A_AGENT_PROVIDER_PATIENCE_S",
        "int",
        DEFAULT_PROVIDER_PATIENCE_S,
        unit="seconds",
        low=1,
        high=MAX_PROVIDER_PATIENCE_S,
    )
    provider_backoff_cap_s: int = setting(
        "A2A_AGENT_PROVIDER_BACKOFF_CAP_S",
        "int",
        DEFAULT_PROVIDER_BACKOFF_CAP_S,
        unit="seconds",
        low=1,
        high=MAX_PROVIDER_BACKOFF_CAP_S,
    )
    triage: bool = setting("A2A_AGENT_TRIAGE", "switch", False, unit="`1 true yes on`")
    triage_timeout_ms: int = setting(
        "A2A_AGENT_TRIAGE_TIMEOUT_MS",
        "int",
        DEFAULT_TRIAGE_TIMEOUT_MS,
        unit="milliseconds",
        low=1,
        high=MAX_TRIAGE_TIMEOUT_MS,
    )
    mcp_config: str | None = setting("A2A_AGENT_MCP_CONFIG", "text", unit="file path")
    reasoning_effort: str | None = setting(
        "A2A_AGENT_REASONING_EFFORT", "text", unit="the provider's word, e.g. `low`"
    )

    def check(self) -> None:
        """Raise :class:`AgentConfigError` if the chosen runtime misses a setting."""
        need = {
            "openai": ("A2A_AGENT_MODEL", self.model),
            "subprocess": ("A2A_AGENT_COMMAND", self.command),
            "python": ("A2A_AGENT_CALLABLE", self.callable),
        }.get(self.runtime)
        if need is not None and not need[1]:
            raise AgentConfigError(f"A2A_AGENT_RUNTIME={self.runtime} needs {need[0]}")
        if self.runtime == "openai" and not self.api_key and not self.base_url:
            raise AgentConfigError(
                "A2A_AGENT_RUNTIME=openai needs OPENAI_API_KEY "
                "(or OPENAI_BASE_URL for a server without keys)"
            )

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> AgentSettings:
        """The agent record of ``environ`` (see :func:`taskplane.settings.load_agent`)."""
        from taskplane.settings._load import load_agent

        return load_agent(environ)


@attrs.frozen
class RelaySettings:
    """The agent relay: over a filesystem spool (the spool and the outbox directories
    required) or over a relay server (its URL and token required); the receipts
    directory optional for both. ``RELAY_URL`` set selects the server, and then the
    spool variables must not be set."""

    DETECTED_BY = ("RELAY_SPOOL_DIR", "RELAY_URL")
    spool_dir: Path | None = setting("RELAY_SPOOL_DIR", "path", unit="existing directory path")
    outbox_dir: Path | None = setting("RELAY_OUTBOX_DIR", "path", unit="existing directory path")
    receipts_dir: Path | None = setting(
        "RELAY_RECEIPTS_DIR", "path", unit="existing directory path"
    )
    url: str | None = setting("RELAY_URL", "url", unit="URL", plain=True)
    token: str | None = setting("RELAY_TOKEN", "text", secret=True, unit="token")


@attrs.frozen
class GitHubSettings:
    """The GitHub notifications source (``token`` required to run it)."""

    DETECTED_BY = "GITHUB_TOKEN"
    token: str | None = setting("GITHUB_TOKEN", "text", secret=True, unit="token")
    api_url: str = setting("GITHUB_API_URL", "url", DEFAULT_GITHUB_API_URL, unit="URL", plain=True)
    notify_orgs: tuple[str, ...] = setting(
        "GITHUB_NOTIFY_ORGS", "list", (), unit="comma list of owners", lower=True
    )
    poll_interval_s: float = setting(
        "GITHUB_POLL_INTERVAL_S",
        "float",
        DEFAULT_GITHUB_POLL_INTERVAL_S,
        unit="seconds",
        low=1,
        high=86_400,
    )


@attrs.frozen
class SlackSettings:
    """The Slack Socket Mode source (both tokens required to run it)."""

    DETECTED_BY = "SLACK_APP_TOKEN"
    app_token: str | None = setting("SLACK_APP_TOKEN", "text", secret=True, unit="tokens")
    bot_token: str | None = setting("SLACK_BOT_TOKEN", "text", secret=True, unit="tokens")
    api_url: str = setting("SLACK_API_URL", "url", DEFAULT_SLACK_API_URL, unit="URL", plain=True)
    allowed_channels: tuple[str, ...] = setting(
        "SLACK_ALLOWED_CHANNELS", "list", (), unit="comma list of channel IDs"
    )
    handled_reaction: str | None = setting("SLACK_HANDLED_REACTION", "text", unit="emoji name")


@attrs.frozen
class JmapSettings:
    """The JMAP email source (the session URL and a credential required to run it:
    ``username`` with ``password``, or ``token``)."""

    DETECTED_BY = "JMAP_SESSION_URL"
    session_url: str | None = setting("JMAP_SESSION_URL", "url", unit="URL")
    username: str | None = setting("JMAP_USERNAME", "text", unit="text")
    password: str | None = setting("JMAP_PASSWORD", "text", secret=True, unit="text")
    token: str | None = setting("JMAP_TOKEN", "text", secret=True, unit="token")


@attrs.frozen
class MattermostSettings:
    """The Mattermost source (the server URL and the bot's token required to run it)."""

    DETECTED_BY = "MATTERMOST_URL"
    url: str | None = setting("MATTERMOST_URL", "url", unit="URL", plain=True)
    token: str | None = setting("MATTERMOST_TOKEN", "text", secret=True, unit="token")
    allowed_channels: tuple[str, ...] = setting(
        "MATTERMOST_ALLOWED_CHANNELS", "list", (), unit="comma list of channel IDs"
    )


@attrs.frozen
class ZulipSettings:
    """The Zulip source (the site, the bot's email and its API key required to run it;
    the names a ``zuliprc`` file uses)."""

    DETECTED_BY = "ZULIP_SITE"
    site: str | None = setting("ZULIP_SITE", "url", unit="URL", plain=True)
    email: str | None = setting("ZULIP_EMAIL", "text", unit="text")
    api_key: str | None = setting("ZULIP_API_KEY", "text", secret=True, unit="token")


@attrs.frozen
class ForgejoSettings:
    """The Forgejo / Gitea notifications source (the URL and token required to run it)."""

    DETECTED_BY = "FORGEJO_URL"
    url: str | None = setting("FORGEJO_URL", "url", unit="URL", plain=True)
    token: str | None = setting("FORGEJO_TOKEN", "text", secret=True, unit="token")
    mark_read: bool = setting("FORGEJO_NOTIFY_MARK_READ", "switch", False, unit="`1 true yes on`")
    poll_interval_s: float = setting(
        "FORGEJO_POLL_INTERVAL_S",
        "float",
        DEFAULT_FORGEJO_POLL_INTERVAL_S,
        unit="seconds",
        low=1,
        high=86_400,
    )


@attrs.frozen
class SignalSettings:
    """The Signal source (the account required to run it; ``signal-cli`` found on
    ``PATH`` unless ``SIGNAL_CLI`` names the program)."""

    DETECTED_BY = "SIGNAL_ACCOUNT"
    program: str = setting("SIGNAL_CLI", "text", DEFAULT_SIGNAL_CLI, unit="program path")
    account: str | None = setting("SIGNAL_ACCOUNT", "text", unit="phone number")


@attrs.frozen
class JmapCalendarSettings:
    """The JMAP calendar-alert source (its session URL required to run it; the
    credentials are the email source's ``JMAP_*`` ones, in ``credentials``)."""

    DETECTED_BY = "JMAP_CALENDAR_SESSION_URL"
    session_url: str | None = setting("JMAP_CALENDAR_SESSION_URL", "url", unit="URL")
    credentials: JmapSettings | None = None


@attrs.frozen
class ChattoSettings:
    """The Chatto source (the server URL and the bot's API key required to run it)."""

    DETECTED_BY = "CHATTO_URL"
    url: str | None = setting("CHATTO_URL", "url", unit="URL", plain=True)
    token: str | None = setting("CHATTO_TOKEN", "text", secret=True, unit="token")


@attrs.frozen
class SourceSettings:
    """Which native sources run (``OUTFITTER_CHANNELS``) and the records of those.

    Attributes:
        channels: the list given, ``()`` for ``off``/``none``, ``None`` when unset
            (auto-detection: every source whose main variable is set).
        explicit: a list was given, so startup is all-or-nothing.
        selected: the selected sources' names, in start order.
        relay, github, slack, jmap, mattermost, zulip, forgejo, signal, jmap_calendar,
        chatto:
            the record of each selected source, else ``None``.
        failed: auto-detected sources whose variables are malformed, with the
            message: they are logged and left out.
    """

    channels: tuple[str, ...] | None = setting(
        "OUTFITTER_CHANNELS",
        "list",
        unit="sources",
        choices=SOURCE_NAMES,
        lower=True,
        default_doc="unset (auto-detect)",
    )
    explicit: bool = False
    selected: tuple[str, ...] = ()
    relay: RelaySettings | None = None
    github: GitHubSettings | None = None
    slack: SlackSettings | None = None
    jmap: JmapSettings | None = None
    mattermost: MattermostSettings | None = None
    zulip: ZulipSettings | None = None
    forgejo: ForgejoSettings | None = None
    signal: SignalSettings | None = None
    jmap_calendar: JmapCalendarSettings | None = None
    chatto: ChattoSettings | None = None
    failed: tuple[tuple[str, str], ...] = ()


SourceRecord = (
    RelaySettings
    | GitHubSettings
    | SlackSettings
    | JmapSettings
    | MattermostSettings
    | ZulipSettings
    | ForgejoSettings
    | SignalSettings
    | JmapCalendarSettings
    | ChattoSettings
)

SOURCE_RECORDS: Final[Mapping[str, type[SourceRecord]]] = {
    "relay": RelaySettings,
    "github": GitHubSettings,
    "slack": SlackSettings,
    "jmap": JmapSettings,
    "mattermost": MattermostSettings,
    "zulip": ZulipSettings,
    "forgejo": ForgejoSettings,
    "signal": SignalSettings,
    "jmap-calendar": JmapCalendarSettings,
    "chatto": ChattoSettings,
}
"""Each source's record, in auto-detection order."""

SHARED_RECORDS: Final[Mapping[str, tuple[str, type[SourceRecord]]]] = {
    "jmap-calendar": ("credentials", JmapSettings),
}
"""A source whose record also carries another source's record (field name, class):
the calendar alerts use the email source's ``JMAP_*`` credentials."""
