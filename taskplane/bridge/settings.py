"""The agent runtime the agent settings select, and the Agent Card's skills file.

:class:`AgentSettings` (declared and loaded by :mod:`taskplane.settings`; its
variables are ``A2A_AGENT_RUNTIME`` and the ones each runtime needs, listed in
``docs/configuration.md``) picks one of four runtimes:

==============  ==================================================================
``scripted``    the built-in deterministic agent (default)
``openai``      an OpenAI-compatible chat-completions endpoint
``subprocess``  a program speaking the agent protocol on stdin/stdout
``python``      an ``async`` function called once per turn
==============  ==================================================================

A file or callable the settings name that cannot be loaded raises
:class:`AgentConfigError` naming the variable, before anything starts.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import trio

from taskplane.bridge.runtime import AgentRuntime
from taskplane.bridge.turn_outcome import PlainTextPolicy
from taskplane.settings import DEFAULT_TURN_TIMEOUT_MS as DEFAULT_TURN_TIMEOUT_MS
from taskplane.settings import MAX_CONCURRENCY as MAX_CONCURRENCY
from taskplane.settings import MAX_TURN_TIMEOUT_MS as MAX_TURN_TIMEOUT_MS
from taskplane.settings import RUNTIMES as RUNTIMES
from taskplane.settings import AgentConfigError as AgentConfigError
from taskplane.settings import AgentSettings as AgentSettings

if TYPE_CHECKING:
    from taskplane.bridge.mcp_client import McpTools
    from taskplane.bridge.sessions import TranscriptStore


@attrs.frozen
class SkillSpec:
    """One Agent Card skill from ``A2A_AGENT_SKILLS_FILE``."""

    id: str
    name: str
    description: str
    tags: tuple[str, ...]
    examples: tuple[str, ...] = ()


def load_skills(path: str) -> tuple[SkillSpec, ...]:
    """Read a skills file: ``[{"id", "name", "description", "tags": [..],
    "examples"?: [..]}]`` (blocking; call at startup).

    Raises:
        AgentConfigError: unreadable file or a malformed entry (the message says which).
    """
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise AgentConfigError(f"A2A_AGENT_SKILLS_FILE={path}: {exc}") from None
    if not isinstance(document, list):
        raise AgentConfigError(f"A2A_AGENT_SKILLS_FILE={path}: expected a JSON array of skills")
    return tuple(_skill(path, i, entry) for i, entry in enumerate(document))


def _skill(path: str, index: int, entry: Any) -> SkillSpec:
    where = f"A2A_AGENT_SKILLS_FILE={path}: skill {index}"
    if not isinstance(entry, dict):
        raise AgentConfigError(f"{where} must be an object")
    for key in ("id", "name", "description"):
        if not isinstance(entry.get(key), str) or not entry[key]:
            raise AgentConfigError(f"{where}: {key} must be a non-empty string")
    lists: dict[str, tuple[str, ...]] = {}
    for key in ("tags", "examples"):
        value = entry.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise AgentConfigError(f"{where}: {key} must be an array of non-empty strings")
        lists[key] = tuple(value)
    if not lists["tags"]:
        raise AgentConfigError(f"{where}: tags must hold at least one tag")
    extra = sorted(set(entry) - {"id", "name", "description", "tags", "examples"})
    if extra:
        raise AgentConfigError(f"{where}: unknown key {extra[0]!r}")
    return SkillSpec(entry["id"], entry["name"], entry["description"], **lists)


@asynccontextmanager
async def open_runtime(
    settings: AgentSettings, store_root: Path, transcripts: TranscriptStore | None = None
) -> AsyncIterator[AgentRuntime]:
    """The runtime ``settings`` select, running for the ``async with`` block.

    ``transcripts``: where the ``openai`` runtime keeps its sessions (the composition
    root picks the store's; ``None``: files under ``store_root``).

    The ``subprocess`` runtime's program, and the ``openai`` runtime's MCP servers
    (``A2A_AGENT_MCP_CONFIG``), are started before the block and stopped after it
    (stdin closed, then SIGKILL after a grace period). The caller still
    calls :meth:`AgentRuntime.aclose` (it releases the sessions).
    Raises:
        AgentConfigError: a file or callable named by the settings cannot be loaded.
        OSError: the agent program cannot be started.
    """
    if settings.runtime == "subprocess":
        from taskplane.bridge.subprocess_runtime import SubprocessRuntime

        runtime = SubprocessRuntime(
            settings.command,
            store_root,
            plain_text=PlainTextPolicy(settings.plain_text),
            triage=settings.triage,
            triage_timeout_s=settings.triage_timeout_ms / 1000,
        )
        async with trio.open_nursery() as nursery:
            await nursery.start(runtime.serve)
            try:
                yield runtime
            finally:
                nursery.cancel_scope.cancel()
        return
    if settings.runtime == "openai" and settings.mcp_config:
        from taskplane.bridge.mcp_client import McpTools
        from taskplane.bridge.mcp_config import load_mcp_config

        path = settings.mcp_config
        mcp = McpTools(await trio.to_thread.run_sync(load_mcp_config, path))
        async with trio.open_nursery() as nursery:
            await nursery.start(mcp.serve)
            try:
                yield await _openai(settings, store_root, mcp, transcripts)
            finally:
                nursery.cancel_scope.cancel()
        return
    yield await build_runtime(settings, store_root, transcripts)


async def build_runtime(
    settings: AgentSettings, store_root: Path, transcripts: TranscriptStore | None = None
) -> AgentRuntime:
    """The ``scripted``, ``openai`` or ``python`` runtime (no background service);
    ``transcripts`` as :func:`open_runtime`'s.

    Raises:
        AgentConfigError: the system prompt file or the callable cannot be loaded,
            or ``settings`` select ``subprocess`` (use :func:`open_runtime`).
    """
    if settings.runtime == "openai":
        return await _openai(settings, store_root, transcripts=transcripts)
    if settings.runtime == "python":
        from taskplane.bridge.python_runtime import PythonRuntime, load_callable, load_triage

        assert settings.callable is not None
        try:
            function = load_callable(settings.callable)
            triage = load_triage(settings.callable) if settings.triage else None
        except ValueError as exc:
            raise AgentConfigError(str(exc)) from None
        return PythonRuntime(
            function,
            store_root,
            plain_text=PlainTextPolicy(settings.plain_text),
            triage=triage,
            triage_timeout_s=settings.triage_timeout_ms / 1000,
        )
    if settings.runtime == "subprocess":
        raise AgentConfigError("the subprocess runtime runs a program: use open_runtime")
    from taskplane.bridge.scripted import ScriptedRuntime

    return ScriptedRuntime()


async def _openai(
    settings: AgentSettings,
    store_root: Path,
    mcp: McpTools | None = None,
    transcripts: TranscriptStore | None = None,
) -> AgentRuntime:
    import openai

    from taskplane.bridge.openai_runtime import DEFAULT_SYSTEM_PROMPT, NO_KEY, OpenAIRuntime
    from taskplane.bridge.sessions import FileTranscriptStore, Profile

    prompt = DEFAULT_SYSTEM_PROMPT
    if settings.system_prompt_file:
        path = Path(settings.system_prompt_file)
        try:
            prompt = await trio.to_thread.run_sync(lambda: path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise AgentConfigError(f"A2A_AGENT_SYSTEM_PROMPT_FILE={path}: {exc}") from None
    assert settings.model is not None
    client = openai.AsyncOpenAI(
        api_key=settings.api_key or NO_KEY,
        base_url=settings.base_url,
        max_retries=0,
        http_client=openai.DefaultAsyncHttpxClient(),
    )
    return OpenAIRuntime(
        client,
        Profile(settings.model, prompt, settings.reasoning_effort),
        transcripts or FileTranscriptStore(store_root),
        plain_text=PlainTextPolicy(settings.plain_text),
        triage=settings.triage,
        triage_timeout_s=settings.triage_timeout_ms / 1000,
        mcp=mcp,
    )
