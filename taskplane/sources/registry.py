"""Which native sources run: ``OUTFITTER_CHANNELS`` and each source's variables.

``OUTFITTER_CHANNELS`` unset (or empty): auto-detection, every source whose required
variable is set is started, and one that fails to start is logged and left out.
``off`` or ``none``: no native source. A comma list (``relay,github``): exactly those,
all or nothing: a missing variable or a failed start stops the process.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence

import attrs

from taskplane.config import ConfigError
from taskplane.sources.base import Source
from taskplane.sources.github import GitHubSource
from taskplane.sources.relay import RelaySource
from taskplane.sources.slack import SlackSource

log = logging.getLogger("taskplane.sources")

Factory = Callable[[Mapping[str, str]], Source]

KNOWN: dict[str, tuple[str, Factory]] = {
    # name: (the variable whose presence auto-detects it, the factory)
    "relay": ("RELAY_SPOOL_DIR", RelaySource.from_environ),
    "github": ("GITHUB_TOKEN", GitHubSource.from_environ),
    "slack": ("SLACK_APP_TOKEN", SlackSource.from_environ),
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


def plan_sources(environ: Mapping[str, str]) -> SourcePlan:
    """Read ``OUTFITTER_CHANNELS`` and the variables of the sources it selects.

    Raises:
        ConfigError: an unknown source name, or a listed source misconfigured.
    """
    raw = (environ.get("OUTFITTER_CHANNELS") or "").strip()
    if raw.lower() in ("off", "none"):
        return SourcePlan()
    if not raw:
        found: list[Source] = []
        for name, (var, _) in KNOWN.items():
            if not environ.get(var):
                continue
            try:
                found.append(_build(name, environ))
            except ConfigError as exc:
                log.error(
                    "source %s is not configured: %s",
                    name,
                    exc,
                    extra={"event": "source_start_failed", "source": name, "error": str(exc)},
                )
        return SourcePlan(tuple(found), explicit=False)
    names = [n.strip().lower() for n in raw.split(",") if n.strip()]
    unknown = [n for n in names if n not in KNOWN]
    if unknown:
        raise ConfigError(
            f"OUTFITTER_CHANNELS names unknown sources {', '.join(unknown)};"
            f" known: {', '.join(KNOWN)}, or off/none"
        )
    return SourcePlan(tuple(_build(n, environ) for n in dict.fromkeys(names)), explicit=True)


def _build(name: str, environ: Mapping[str, str]) -> Source:
    try:
        return KNOWN[name][1](environ)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
