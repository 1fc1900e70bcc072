"""The agent runtime named by ``A2A_AGENT_RUNTIME`` / ``--agent``.

Only the scripted runtime ships today; the other names are accepted by the
configuration (so scripts can be written against them) and stop startup here with
one line. Replace :func:`agent_runtime` when a runtime lands.
"""

from __future__ import annotations

from taskplane.bridge.runtime import AgentRuntime
from taskplane.bridge.scripted import ScriptedRuntime
from taskplane.config import Config, ConfigError


def agent_runtime(config: Config) -> AgentRuntime:
    """A new runtime for ``config.agent_runtime``.

    Raises:
        ConfigError: the runtime is not available in this taskplane.
    """
    if config.agent_runtime == "scripted":
        return ScriptedRuntime()
    raise ConfigError(
        f"the agent runtime {config.agent_runtime!r} (A2A_AGENT_RUNTIME / --agent) is not "
        "available yet; use 'scripted'"
    )
