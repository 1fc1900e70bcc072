"""The server's settings under their older names (:mod:`taskplane.settings` declares
and loads them).

Every variable (and the command-line flag that overrides it), its default and unit
is documented in ``docs/configuration.md``.
"""

from __future__ import annotations

from taskplane.settings import DEFAULT_AGENT_DESCRIPTION as DEFAULT_AGENT_DESCRIPTION
from taskplane.settings import DEFAULT_AGENT_NAME as DEFAULT_AGENT_NAME
from taskplane.settings import DEFAULT_AGENT_VERSION as DEFAULT_AGENT_VERSION
from taskplane.settings import DEFAULT_BLOCKING_TIMEOUT_MS as DEFAULT_BLOCKING_TIMEOUT_MS
from taskplane.settings import DEFAULT_GC_GEN0 as DEFAULT_GC_GEN0
from taskplane.settings import DEFAULT_HOST as DEFAULT_HOST
from taskplane.settings import DEFAULT_KEEP_ALIVE_S as DEFAULT_KEEP_ALIVE_S
from taskplane.settings import DEFAULT_PORT as DEFAULT_PORT
from taskplane.settings import DEFAULT_SEND_TIMEOUT_S as DEFAULT_SEND_TIMEOUT_S
from taskplane.settings import LOG_LEVELS as LOG_LEVELS
from taskplane.settings import MIN_GC_GEN0 as MIN_GC_GEN0
from taskplane.settings import WILDCARD_HOSTS as WILDCARD_HOSTS
from taskplane.settings import ConfigError as ConfigError
from taskplane.settings import ServerSettings as ServerSettings
from taskplane.settings import default_credentials_path as default_credentials_path
from taskplane.settings import default_store_root as default_store_root

Config = ServerSettings
"""The server's settings record (:class:`taskplane.settings.ServerSettings`)."""
