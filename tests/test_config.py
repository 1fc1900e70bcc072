"""Config from environment variables: switches, the agent runtime, the listener default,
and the bind-all warning (the startup-error findings of the operations issue)."""

from __future__ import annotations

import pytest

from taskplane.bridge.settings import RUNTIMES, AgentConfigError, AgentSettings
from taskplane.cli.serve import public_url_warnings
from taskplane.config import Config, ConfigError

CREDENTIALS = {"A2A_CREDENTIALS_PATH": "/nonexistent/credentials.json"}


@pytest.mark.parametrize("value", ["1", "true", "TRUE", "yes", "on", " On "])
def test_a2a_server_on_values_turn_the_listener_on(value: str) -> None:
    assert Config.from_environ({"A2A_SERVER": value, **CREDENTIALS}).a2a_server


@pytest.mark.parametrize("value", ["0", "false", "no", "off", "OFF"])
def test_a2a_server_off_values_turn_it_off_even_when_listening_by_default(value: str) -> None:
    config = Config.from_environ({"A2A_SERVER": value}, listen_by_default=True)
    assert not config.a2a_server


@pytest.mark.parametrize("value", ["maybe", "2", "enabled", "y"])
def test_a2a_server_value_it_does_not_understand_is_rejected_naming_it(value: str) -> None:
    with pytest.raises(ConfigError, match=f"A2A_SERVER='{value}' is not understood"):
        Config.from_environ({"A2A_SERVER": value, **CREDENTIALS})


def test_unset_a2a_server_follows_the_callers_default() -> None:
    assert not Config.from_environ({}).a2a_server
    assert Config.from_environ(CREDENTIALS, listen_by_default=True).a2a_server


def test_listener_without_credentials_path_names_the_variable() -> None:
    with pytest.raises(ConfigError, match="A2A_CREDENTIALS_PATH"):
        Config.from_environ({}, listen_by_default=True)


def test_group_commit_switch_rejects_unknown_values() -> None:
    assert not Config.from_environ({"TASKPLANE_GROUP_COMMIT": "off"}).group_commit
    with pytest.raises(ConfigError, match="TASKPLANE_GROUP_COMMIT"):
        Config.from_environ({"TASKPLANE_GROUP_COMMIT": "sometimes"})


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_agent_runtime_accepts_the_documented_values(runtime: str) -> None:
    environ = {
        "A2A_AGENT_RUNTIME": runtime.upper(),
        "A2A_AGENT_MODEL": "m",
        "OPENAI_BASE_URL": "http://127.0.0.1:1/v1",
        "A2A_AGENT_COMMAND": "agent",
        "A2A_AGENT_CALLABLE": "pkg.mod:fn",
    }
    assert AgentSettings.from_environ(environ).runtime == runtime


def test_agent_runtime_defaults_to_scripted_and_rejects_others() -> None:
    assert AgentSettings.from_environ({}).runtime == "scripted"
    with pytest.raises(AgentConfigError, match="A2A_AGENT_RUNTIME='gpt'"):
        AgentSettings.from_environ({"A2A_AGENT_RUNTIME": "gpt"})


@pytest.mark.parametrize("host", ["0.0.0.0", "::"])
def test_bind_all_host_without_public_url_warns_and_explains_a2a_public_url(host: str) -> None:
    config = Config.from_environ({"A2A_HOST": host, **CREDENTIALS}, listen_by_default=True)
    assert config.public_url_is_wildcard
    (warning,) = public_url_warnings(config)
    assert f"A2A_HOST={host}" in warning and "A2A_PUBLIC_URL" in warning


def test_bind_all_host_with_public_url_does_not_warn() -> None:
    config = Config.from_environ(
        {"A2A_HOST": "0.0.0.0", "A2A_PUBLIC_URL": "https://agent.example", **CREDENTIALS},
        listen_by_default=True,
    )
    assert not config.public_url_is_wildcard
    assert public_url_warnings(config) == []


def test_gc_gen0_defaults_to_ten_thousand_and_zero_keeps_cpythons_default() -> None:
    assert Config.from_environ({}).gc_gen0 == 10_000
    assert Config.from_environ({"TASKPLANE_GC_GEN0": "0"}).gc_gen0 == 0
    assert Config.from_environ({"TASKPLANE_GC_GEN0": "50000"}).gc_gen0 == 50_000


@pytest.mark.parametrize("value", ["-1", "1", "699", "10000001", "lots"])
def test_gc_gen0_out_of_range_is_refused_naming_the_variable(value: str) -> None:
    with pytest.raises(ConfigError, match="TASKPLANE_GC_GEN0"):
        Config.from_environ({"TASKPLANE_GC_GEN0": value})
