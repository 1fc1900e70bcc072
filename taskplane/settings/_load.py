"""The loader: every record from one mapping of variables, flags applied as each
record is built."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TypeVar

import attrs

from taskplane.settings._parse import AgentConfigError, ConfigError, build
from taskplane.settings._records import (
    SHARED_RECORDS,
    SOURCE_NAMES,
    SOURCE_RECORDS,
    AgentSettings,
    ChattoSettings,
    ForgejoSettings,
    GitHubSettings,
    HomeSettings,
    JmapCalendarSettings,
    JmapSettings,
    MattermostSettings,
    RelaySettings,
    ServerSettings,
    SignalSettings,
    SlackSettings,
    SourceSettings,
    ZulipSettings,
    home_settings,
)

R = TypeVar("R")

RECORDS: tuple[type, ...] = (
    ServerSettings,
    AgentSettings,
    HomeSettings,
    SourceSettings,
    RelaySettings,
    GitHubSettings,
    SlackSettings,
    JmapSettings,
    MattermostSettings,
    ZulipSettings,
    ForgejoSettings,
    SignalSettings,
    JmapCalendarSettings,
    ChattoSettings,
)
"""Every record class that declares settings."""


@attrs.frozen
class Settings:
    """Every part's settings, as :func:`load` builds them."""

    server: ServerSettings
    agent: AgentSettings
    sources: SourceSettings


def load(environ: Mapping[str, str], *, listen_by_default: bool = False) -> Settings:
    """Every record from ``environ`` (``os.environ`` or any mapping).

    Raises:
        ConfigError: the first malformed or missing setting, naming its variable
            (:class:`AgentConfigError` for the agent's).
    """
    return Settings(
        server=load_server(environ, listen_by_default=listen_by_default),
        agent=load_agent(environ),
        sources=load_sources(environ),
    )


def load_server(
    environ: Mapping[str, str],
    *,
    listen_by_default: bool = False,
    flags: Mapping[str, object] | None = None,
    default_credentials: bool = False,
) -> ServerSettings:
    """The server record.

    Args:
        listen_by_default: ``A2A_SERVER``'s value when unset: off for an embedder,
            on for ``taskplane serve``.
        flags: field name to a flag's value, which wins over its variable.
        default_credentials: an unset ``A2A_CREDENTIALS_PATH`` means the default file
            (:attr:`HomeSettings.credentials_path`), as on the command line.
    Raises:
        ConfigError: a malformed value, or the listener on without a credentials file.
    """
    home = home_settings(environ)
    defaults: dict[str, object] = {"a2a_server": listen_by_default, "store_root": home.store_root}
    if default_credentials:
        defaults["credentials_path"] = str(home.credentials_path)
    settings = build(ServerSettings, environ, given=flags, defaults=defaults)
    settings.check()
    return settings


def load_agent(
    environ: Mapping[str, str], *, flags: Mapping[str, object] | None = None
) -> AgentSettings:
    """The agent record (``flags`` as for :func:`load_server`).

    Raises:
        AgentConfigError: an unknown runtime, a malformed value, or a setting the
            chosen runtime requires is missing.
    """
    settings = build(AgentSettings, environ, given=flags, error=AgentConfigError)
    settings.check()
    return settings


def load_sources(environ: Mapping[str, str]) -> SourceSettings:
    """``OUTFITTER_CHANNELS`` and the records of the sources it selects.

    Unset: auto-detection, each source whose main variable is set; a malformed
    variable of such a source is kept in ``failed`` (logged and left out later).
    A list: exactly those sources, and a malformed variable stops here. Variables of
    sources not selected are not read.

    Raises:
        ConfigError: an unknown source name, or a listed source's malformed variable.
    """
    channels = build(SourceSettings, environ).channels
    if channels == ():
        return SourceSettings(channels=())
    records: dict[str, object] = {}
    failed: list[tuple[str, str]] = []
    if channels is None:
        for name in SOURCE_NAMES:
            record = SOURCE_RECORDS[name]
            detected_by = record.DETECTED_BY
            names = (detected_by,) if isinstance(detected_by, str) else detected_by
            if not any(environ.get(n) for n in names):
                continue
            try:
                records[name] = _source_record(name, environ)
            except ConfigError as exc:
                failed.append((name, str(exc)))
    else:
        records = {name: _source_record(name, environ) for name in channels}
    return SourceSettings(
        channels=channels,
        explicit=channels is not None,
        selected=tuple(records),
        failed=tuple(failed),
        relay=_pick(records, RelaySettings),
        github=_pick(records, GitHubSettings),
        slack=_pick(records, SlackSettings),
        jmap=_pick(records, JmapSettings),
        mattermost=_pick(records, MattermostSettings),
        zulip=_pick(records, ZulipSettings),
        forgejo=_pick(records, ForgejoSettings),
        signal=_pick(records, SignalSettings),
        jmap_calendar=_pick(records, JmapCalendarSettings),
        chatto=_pick(records, ChattoSettings),
    )


def _source_record(name: str, environ: Mapping[str, str]) -> object:
    record: object = build(SOURCE_RECORDS[name], environ)
    if name in SHARED_RECORDS:
        field, shared = SHARED_RECORDS[name]
        record = attrs.evolve(record, **{field: build(shared, environ)})  # type: ignore[misc]
    return record


def _pick(records: Mapping[str, object], cls: type[R]) -> R | None:
    return next((r for r in records.values() if isinstance(r, cls)), None)


def store_root(environ: Mapping[str, str]) -> Path:
    """``CHANNELS_TASK_STORE_PATH``, else the default root; no other variable is read."""
    home = home_settings(environ)
    only = build(_StoreRoot, environ, defaults={"store_root": home.store_root})
    return only.store_root


def store_url(environ: Mapping[str, str], *, flag: str | None = None) -> str | None:
    """``flag`` (``--store-url``), else ``TASKPLANE_STORE_URL``, else ``None`` (the
    SQLite store of the store root); no other variable is read.

    Raises:
        ConfigError: a malformed value, naming the variable.
    """
    given = None if flag is None else {"store_url": flag}
    return build(_StoreUrl, environ, given=given).store_url


def credentials_path(environ: Mapping[str, str]) -> Path:
    """``A2A_CREDENTIALS_PATH``, else the default file; no other variable is read."""
    home = home_settings(environ)
    only = build(_Credentials, environ, defaults={"credentials_path": str(home.credentials_path)})
    return Path(only.credentials_path).expanduser()


@attrs.frozen
class _StoreRoot:
    store_root: Path = attrs.field(
        metadata=attrs.fields_dict(ServerSettings)["store_root"].metadata
    )


@attrs.frozen
class _StoreUrl:
    store_url: str | None = attrs.field(
        default=None, repr=False, metadata=attrs.fields_dict(ServerSettings)["store_url"].metadata
    )


@attrs.frozen
class _Credentials:
    credentials_path: str = attrs.field(
        metadata=attrs.fields_dict(ServerSettings)["credentials_path"].metadata
    )


def child_environment(extra: Mapping[str, str]) -> dict[str, str]:
    """This process's environment with ``extra`` added: what a child program the
    settings name (an MCP server with ``env``) is started with."""
    return {**os.environ, **extra}
