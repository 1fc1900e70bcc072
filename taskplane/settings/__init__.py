"""Settings: every environment variable taskplane reads, declared once.

One frozen record per part (:class:`ServerSettings`, :class:`AgentSettings`,
:class:`HomeSettings`, :class:`SourceSettings` and one per native source). Each
setting field names its variable, kind, unit, default and bounds (:class:`Var`), and
``docs/configuration.md`` lists the same variables, units and defaults (a test keeps
them equal). :func:`load` builds every record from one mapping (``os.environ``, or
any ``Mapping[str, str]``), with one parser per kind of value:

- integers: ASCII decimal digits only (no sign, ``+``, ``_`` or other scripts'
  digits), within the declared bounds;
- switches: ``1 true yes on`` / ``0 false no off``, in any case;
- numbers (seconds): ASCII decimal digits with an optional fraction;
- URLs: absolute ``http``/``https`` with a host;
- lists: comma separated, items stripped.

A refusal is a :class:`ConfigError` naming the variable, the value and what is
accepted. Only this package and the command line read the environment; every other
module takes its record. The command line applies its flags as each record is built
(a flag wins over its variable, which is then not read), never to a copy of the
environment.
"""

from taskplane.settings._load import RECORDS as RECORDS
from taskplane.settings._load import Settings as Settings
from taskplane.settings._load import child_environment as child_environment
from taskplane.settings._load import credentials_path as credentials_path
from taskplane.settings._load import load as load
from taskplane.settings._load import load_agent as load_agent
from taskplane.settings._load import load_server as load_server
from taskplane.settings._load import load_sources as load_sources
from taskplane.settings._load import store_root as store_root
from taskplane.settings._load import store_url as store_url
from taskplane.settings._parse import FALSE as FALSE
from taskplane.settings._parse import TRUE as TRUE
from taskplane.settings._parse import AgentConfigError as AgentConfigError
from taskplane.settings._parse import ConfigError as ConfigError
from taskplane.settings._parse import Var as Var
from taskplane.settings._parse import declared as declared
from taskplane.settings._parse import number_text as number_text
from taskplane.settings._parse import parse as parse
from taskplane.settings._records import DEFAULT_AGENT_DESCRIPTION as DEFAULT_AGENT_DESCRIPTION
from taskplane.settings._records import DEFAULT_AGENT_NAME as DEFAULT_AGENT_NAME
from taskplane.settings._records import DEFAULT_AGENT_VERSION as DEFAULT_AGENT_VERSION
from taskplane.settings._records import DEFAULT_BLOCKING_TIMEOUT_MS as DEFAULT_BLOCKING_TIMEOUT_MS
from taskplane.settings._records import DEFAULT_BODY_TIMEOUT_S as DEFAULT_BODY_TIMEOUT_S
from taskplane.settings._records import DEFAULT_GC_GEN0 as DEFAULT_GC_GEN0
from taskplane.settings._records import DEFAULT_GITHUB_API_URL as DEFAULT_GITHUB_API_URL
from taskplane.settings._records import DEFAULT_HOST as DEFAULT_HOST
from taskplane.settings._records import DEFAULT_KEEP_ALIVE_S as DEFAULT_KEEP_ALIVE_S
from taskplane.settings._records import DEFAULT_LEASE_TTL_S as DEFAULT_LEASE_TTL_S
from taskplane.settings._records import DEFAULT_PORT as DEFAULT_PORT
from taskplane.settings._records import (
    DEFAULT_PROVIDER_BACKOFF_CAP_S as DEFAULT_PROVIDER_BACKOFF_CAP_S,
)
from taskplane.settings._records import DEFAULT_PROVIDER_PATIENCE_S as DEFAULT_PROVIDER_PATIENCE_S
from taskplane.settings._records import DEFAULT_SEND_TIMEOUT_S as DEFAULT_SEND_TIMEOUT_S
from taskplane.settings._records import DEFAULT_SLACK_API_URL as DEFAULT_SLACK_API_URL
from taskplane.settings._records import DEFAULT_TURN_TIMEOUT_MS as DEFAULT_TURN_TIMEOUT_MS
from taskplane.settings._records import LOG_LEVELS as LOG_LEVELS
from taskplane.settings._records import MAX_BLOCKING_TIMEOUT_MS as MAX_BLOCKING_TIMEOUT_MS
from taskplane.settings._records import MAX_CONCURRENCY as MAX_CONCURRENCY
from taskplane.settings._records import MAX_LEASE_TTL_S as MAX_LEASE_TTL_S
from taskplane.settings._records import MAX_TURN_TIMEOUT_MS as MAX_TURN_TIMEOUT_MS
from taskplane.settings._records import MIN_GC_GEN0 as MIN_GC_GEN0
from taskplane.settings._records import MIN_LEASE_TTL_S as MIN_LEASE_TTL_S
from taskplane.settings._records import PLAIN_TEXT_POLICIES as PLAIN_TEXT_POLICIES
from taskplane.settings._records import RUNTIMES as RUNTIMES
from taskplane.settings._records import SOURCE_NAMES as SOURCE_NAMES
from taskplane.settings._records import SOURCE_RECORDS as SOURCE_RECORDS
from taskplane.settings._records import WILDCARD_HOSTS as WILDCARD_HOSTS
from taskplane.settings._records import AgentSettings as AgentSettings
from taskplane.settings._records import ChattoSettings as ChattoSettings
from taskplane.settings._records import ForgejoSettings as ForgejoSettings
from taskplane.settings._records import GitHubSettings as GitHubSettings
from taskplane.settings._records import HomeSettings as HomeSettings
from taskplane.settings._records import JmapCalendarSettings as JmapCalendarSettings
from taskplane.settings._records import JmapSettings as JmapSettings
from taskplane.settings._records import MattermostSettings as MattermostSettings
from taskplane.settings._records import RelaySettings as RelaySettings
from taskplane.settings._records import ServerSettings as ServerSettings
from taskplane.settings._records import SignalSettings as SignalSettings
from taskplane.settings._records import SlackSettings as SlackSettings
from taskplane.settings._records import SourceSettings as SourceSettings
from taskplane.settings._records import ZulipSettings as ZulipSettings
from taskplane.settings._records import default_credentials_path as default_credentials_path
from taskplane.settings._records import default_store_root as default_store_root
