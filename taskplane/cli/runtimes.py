"""The agent runtime named by ``A2A_AGENT_RUNTIME`` / ``--agent`` and its settings."""

from __future__ import annotations

from collections.abc import Mapping

from taskplane.bridge.settings import AgentSettings


def agent_settings(environ: Mapping[str, str]) -> AgentSettings:
    """The agent settings of ``environ`` (flags already written over their variables).

    Read before anything starts, so a bad value stops startup with one line.
    Raises:
        AgentConfigError: (a ``ValueError``) an unknown runtime, a malformed value, or
            a setting the chosen runtime requires is missing; the message names it.
    """
    return AgentSettings.from_environ(environ)
