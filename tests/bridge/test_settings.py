"""Agent settings: runtime selection, required settings, the skills file, and the
runtime each selection builds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from taskplane.bridge.openai_runtime import DEFAULT_SYSTEM_PROMPT, OpenAIRuntime
from taskplane.bridge.python_runtime import PythonRuntime
from taskplane.bridge.scripted import ScriptedRuntime
from taskplane.bridge.settings import (
    DEFAULT_TURN_TIMEOUT_MS,
    AgentConfigError,
    AgentSettings,
    SkillSpec,
    build_runtime,
    load_skills,
)
from taskplane.cli.options import agent_settings


def test_the_default_is_the_scripted_runtime() -> None:
    assert AgentSettings.from_environ({}) == AgentSettings(runtime="scripted")


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"A2A_AGENT_RUNTIME": "llm"}, "A2A_AGENT_RUNTIME='llm' is not one of scripted, openai"),
        ({"A2A_AGENT_RUNTIME": "openai"}, "needs A2A_AGENT_MODEL"),
        ({"A2A_AGENT_RUNTIME": "openai", "A2A_AGENT_MODEL": "m"}, "needs OPENAI_API_KEY"),
        ({"A2A_AGENT_RUNTIME": "subprocess"}, "needs A2A_AGENT_COMMAND"),
        ({"A2A_AGENT_RUNTIME": "subprocess", "A2A_AGENT_COMMAND": "agent 'x"}, "A2A_AGENT_COMMAND"),
        ({"A2A_AGENT_RUNTIME": "python"}, "needs A2A_AGENT_CALLABLE"),
        ({"OPENAI_BASE_URL": "localhost:11434"}, "OPENAI_BASE_URL='localhost:11434' must be"),
        ({"A2A_AGENT_CONCURRENCY": "0"}, "A2A_AGENT_CONCURRENCY='0' must be an integer from 1"),
        ({"A2A_AGENT_CONCURRENCY": "65"}, "A2A_AGENT_CONCURRENCY='65' must be .* to 64"),
        ({"A2A_AGENT_CONCURRENCY": "four"}, "A2A_AGENT_CONCURRENCY='four'"),
        ({"A2A_TURN_TIMEOUT_MS": "-5"}, "A2A_TURN_TIMEOUT_MS='-5' must be an integer from 0"),
        ({"A2A_TURN_TIMEOUT_MS": "1.5"}, "A2A_TURN_TIMEOUT_MS='1.5'"),
    ],
)
def test_a_bad_or_missing_setting_is_one_clear_error(environ: dict[str, str], message: str) -> None:
    with pytest.raises(AgentConfigError, match=message):
        AgentSettings.from_environ(environ)


def test_each_runtime_reads_its_variables() -> None:
    openai = AgentSettings.from_environ(
        {
            "A2A_AGENT_RUNTIME": "OpenAI",
            "A2A_AGENT_MODEL": "llama3.1",
            "OPENAI_BASE_URL": "http://127.0.0.1:11434/v1",
            "A2A_AGENT_SYSTEM_PROMPT_FILE": "/etc/prompt.txt",
        }
    )
    assert (openai.runtime, openai.model, openai.base_url, openai.api_key) == (
        "openai",
        "llama3.1",
        "http://127.0.0.1:11434/v1",
        None,
    )
    sub = AgentSettings.from_environ(
        {"A2A_AGENT_RUNTIME": "subprocess", "A2A_AGENT_COMMAND": "node 'my agent.js' --fast"}
    )
    assert sub.command == ("node", "my agent.js", "--fast")


def test_concurrency_and_turn_deadline_default_and_flags_override() -> None:
    default = AgentSettings.from_environ({})
    assert (default.concurrency, default.turn_timeout_ms) == (1, DEFAULT_TURN_TIMEOUT_MS)
    assert DEFAULT_TURN_TIMEOUT_MS == 600_000
    environ = {"A2A_AGENT_CONCURRENCY": "2", "A2A_TURN_TIMEOUT_MS": "0"}
    read = AgentSettings.from_environ(environ)
    assert (read.concurrency, read.turn_timeout_ms) == (2, 0)  # 0: no deadline
    read = agent_settings({"agent_concurrency": 16, "turn_timeout_ms": 30_000}, environ)
    assert (read.concurrency, read.turn_timeout_ms) == (16, 30_000)


def test_the_api_key_is_not_in_the_settings_repr() -> None:
    settings = AgentSettings.from_environ(
        {"A2A_AGENT_RUNTIME": "openai", "A2A_AGENT_MODEL": "m", "OPENAI_API_KEY": "sk-secret-1"}
    )
    assert "sk-secret-1" not in repr(settings)


def test_a_skills_file_becomes_card_skills(tmp_path: Path) -> None:
    path = tmp_path / "skills.json"
    path.write_text(
        json.dumps(
            [
                {"id": "review", "name": "Review", "description": "Reviews PRs", "tags": ["code"]},
                {
                    "id": "triage",
                    "name": "Triage",
                    "description": "Sorts issues",
                    "tags": ["issues"],
                    "examples": ["triage #12"],
                },
            ]
        )
    )
    assert load_skills(str(path)) == (
        SkillSpec("review", "Review", "Reviews PRs", ("code",)),
        SkillSpec("triage", "Triage", "Sorts issues", ("issues",), ("triage #12",)),
    )


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"id": "x"}, "expected a JSON array"),
        ([{"id": "x", "name": "X", "description": "d", "tags": []}], "at least one tag"),
        ([{"id": "", "name": "X", "description": "d", "tags": ["t"]}], "id must be"),
        ([{"id": "x", "name": "X", "description": "d", "tags": ["t"], "url": 1}], "unknown key"),
    ],
)
def test_a_malformed_skills_file_is_refused(tmp_path: Path, document: object, message: str) -> None:
    path = tmp_path / "skills.json"
    path.write_text(json.dumps(document))
    with pytest.raises(AgentConfigError, match=message):
        load_skills(str(path))


async def test_build_runtime_builds_the_selected_runtime(tmp_path: Path) -> None:
    assert isinstance(await build_runtime(AgentSettings(), tmp_path), ScriptedRuntime)
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("Be brief.")
    settings = AgentSettings(
        runtime="openai", model="m", api_key="sk-x", system_prompt_file=str(prompt)
    )
    runtime = await build_runtime(settings, tmp_path)
    assert isinstance(runtime, OpenAIRuntime)
    assert runtime._profile.system_prompt == "Be brief." != DEFAULT_SYSTEM_PROMPT
    await runtime.aclose()
    python = AgentSettings(runtime="python", callable="tests.bridge.test_prompts:python_agent")
    assert isinstance(await build_runtime(python, tmp_path), PythonRuntime)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_colon", "must be package.module:function"),
        ("no_such_module_xyz:agent", "cannot import no_such_module_xyz"),
        ("json:nothing_here", "has no 'nothing_here'"),
        ("json:dumps", "is not an async function"),
    ],
)
async def test_a_bad_callable_is_a_config_error(tmp_path: Path, spec: str, message: str) -> None:
    with pytest.raises(AgentConfigError, match=message):
        await build_runtime(AgentSettings(runtime="python", callable=spec), tmp_path)


async def test_a_missing_system_prompt_file_is_a_config_error(tmp_path: Path) -> None:
    settings = AgentSettings(
        runtime="openai", model="m", api_key="k", system_prompt_file=str(tmp_path / "nope")
    )
    with pytest.raises(AgentConfigError, match="A2A_AGENT_SYSTEM_PROMPT_FILE"):
        await build_runtime(settings, tmp_path)
