"""Which native sources run: the sources record turned into sources.

:class:`~taskplane.settings.SourceSettings` holds ``OUTFITTER_CHANNELS`` and the
records of the sources it selects. ``OUTFITTER_CHANNELS`` unset (or empty):
auto-detection, every source whose main variable is set is started, and one that is
misconfigured or fails to start is logged and left out. ``off`` or ``none``: no
native source. A comma list (``relay,github``): exactly those, all or nothing: a
missing setting or a failed start stops the process.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from taskplane.settings import ConfigError, SourceSettings
from taskplane.sources.base import Source
from taskplane.sources.chatto import ChattoSource
from taskplane.sources.forgejo import ForgejoSource
from taskplane.sources.github import GitHubSource
from taskplane.sources.jmap import JmapSource
from taskplane.sources.jmap_calendar import JmapCalendarSource
from taskplane.sources.mattermost import MattermostSource
from taskplane.sources.relay import RelaySource
from taskplane.sources.signal import SignalSource
from taskplane.sources.slack import SlackSource
from taskplane.sources.zulip import ZulipSource

log = logging.getLogger("taskplane.sources")

KNOWN: dict[str, Callable[[Any], Source]] = {
    # name: the factory taking the source's settings record
    "relay": RelaySource.from_settings,
    "github": GitHubSource.from_settings,
    "slack": SlackSource.from_settings,
    "jmap": JmapSource.from_settings,
    "mattermost": MattermostSource.from_settings,
    "zulip": ZulipSource.from_settings,
    "forgejo": ForgejoSource.from_settings,
    "signal": SignalSource.from_settings,
    "jmap-calendar": JmapCalendarSource.from_settings,
    "chatto": ChattoSource.from_settings,
}


@attrs.frozen
class SourcePlan:
    """The sources to start and whether startup is all-or-nothing."""

    sources: Sequence[Source] = ()
    explicit: bool = False

    @property
    def anchor_sources(self) -> frozenset[str]:
        """Names of the planned sources that support reply anchors."""
        return frozenset(s.name for s in self.sources if s.supports_anchors)


def plan_sources(settings: SourceSettings) -> SourcePlan:
    """The sources ``settings`` select, built from their records.

    Raises:
        ConfigError: a listed source misconfigured (with auto-detection it is logged
            as ``source_start_failed`` and left out instead).
    """
    found: list[Source] = []
    for name, error in settings.failed:
        _left_out(name, error)
    for name in settings.selected:
        try:
            found.append(_build(name, settings))
        except ConfigError as exc:
            if settings.explicit:
                raise
            _left_out(name, str(exc))
    return SourcePlan(tuple(found), explicit=settings.explicit)


def _left_out(name: str, error: str) -> None:
    log.error(
        "source %s is not configured: %s",
        name,
        error,
        extra={"event": "source_start_failed", "source": name, "error": error},
    )


def _build(name: str, settings: SourceSettings) -> Source:
    try:
        return KNOWN[name](getattr(settings, name.replace("-", "_")))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
