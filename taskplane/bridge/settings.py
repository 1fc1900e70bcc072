"""Agent settings from the environment, and the runtime they select.

=================================  ===================================================
``A2A_AGENT_RUNTIME``              ``scripted`` (default) | ``openai`` | ``subprocess``
                                   | ``python``
``A2A_AGENT_MODEL``                openai: the model name (required)
``OPENAI_BASE_URL``                openai: the endpoint (default: the OpenAI API)
``OPENAI_API_KEY``                 openai: the key (required without OPENAI_BASE_URL)
``A2A_AGENT_SYSTEM_PROMPT_FILE``   openai: a UTF-8 file replacing the default
                                   system prompt
``A2A_AGENT_COMMAND``              subprocess: the program and arguments (shell-style
                                   quoting, no shell) (required)
``A2A_AGENT_CALLABLE``             python: ``package.module:function`` (required)
``A2A_AGENT_SKILLS_FILE``          the Agent Card's skills (JSON array); default: the
                                   scripted agent's skills with ``scripted``, none
                                   otherwise
``A2A_AGENT_CONCURRENCY``          turns that may run at once, each for its own Task,
                                   1..64 (default 1: a single resident turn)
``A2A_TURN_TIMEOUT_MS``            a turn's deadline in ms, 0..86,400,000; a turn
                                   past it is cancelled and counted as a failed turn;
                                   0 = no deadline (default 600,000: 10 minutes)
=================================  ===================================================

A bad value or a missing required setting raises :class:`AgentConfigError` naming
the variable, before anything starts.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import attrs
import trio

from taskplane.bridge.runtime import AgentRuntime

RUNTIMES = ("scripted", "openai", "subprocess", "python")
MAX_CONCURRENCY = 64
"""Upper bound of ``A2A_AGENT_CONCURRENCY``."""
DEFAULT_TURN_TIMEOUT_MS = 600_000
"""``A2A_TURN_TIMEOUT_MS`` default (10 minutes)."""
MAX_TURN_TIMEOUT_MS = 24 * 3600 * 1000


class AgentConfigError(ValueError):
    """An agent setting is missing or malformed; the message names the variable."""


@attrs.frozen
class SkillSpec:
    """One Agent Card skill from ``A2A_AGENT_SKILLS_FILE``."""

    id: str
    name: str
    description: str
    tags: tuple[str, ...]
    examples: tuple[str, ...] = ()


@attrs.frozen
class AgentSettings:
    """The agent runtime's settings (module docstring). Build with :meth:`from_environ`."""

    runtime: str = "scripted"
    model: str | None = None
    base_url: str | None = None
    api_key: str | None = attrs.field(default=None, repr=False)
    system_prompt_file: str | None = None
    command: tuple[str, ...] = ()
    callable: str | None = None
    skills_file: str | None = None
    concurrency: int = 1
    turn_timeout_ms: int = DEFAULT_TURN_TIMEOUT_MS

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> AgentSettings:
        """Read the agent variables of ``environ``.

        Raises:
            AgentConfigError: an unknown runtime, a malformed value, or a setting the
                chosen runtime requires is missing.
        """
        runtime = (environ.get("A2A_AGENT_RUNTIME") or "scripted").strip().lower()
        if runtime not in RUNTIMES:
            raise AgentConfigError(
                f"A2A_AGENT_RUNTIME={runtime!r} is not one of {', '.join(RUNTIMES)}"
            )
        settings = cls(
            runtime=runtime,
            model=environ.get("A2A_AGENT_MODEL") or None,
            base_url=_url(environ.get("OPENAI_BASE_URL") or None),
            api_key=environ.get("OPENAI_API_KEY") or None,
            system_prompt_file=environ.get("A2A_AGENT_SYSTEM_PROMPT_FILE") or None,
            command=_command(environ.get("A2A_AGENT_COMMAND") or ""),
            callable=environ.get("A2A_AGENT_CALLABLE") or None,
            skills_file=environ.get("A2A_AGENT_SKILLS_FILE") or None,
            concurrency=_int(environ, "A2A_AGENT_CONCURRENCY", 1, 1, MAX_CONCURRENCY),
            turn_timeout_ms=_int(
                environ, "A2A_TURN_TIMEOUT_MS", DEFAULT_TURN_TIMEOUT_MS, 0, MAX_TURN_TIMEOUT_MS
            ),
        )
        settings.check()
        return settings

    def check(self) -> None:
        """Raise :class:`AgentConfigError` if the chosen runtime misses a setting."""
        need = {
            "openai": ("A2A_AGENT_MODEL", self.model),
            "subprocess": ("A2A_AGENT_COMMAND", self.command),
            "python": ("A2A_AGENT_CALLABLE", self.callable),
        }.get(self.runtime)
        if need is not None and not need[1]:
            raise AgentConfigError(f"A2A_AGENT_RUNTIME={self.runtime} needs {need[0]}")
        if self.runtime == "openai" and not self.api_key and not self.base_url:
            raise AgentConfigError(
                "A2A_AGENT_RUNTIME=openai needs OPENAI_API_KEY "
                "(or OPENAI_BASE_URL for a server without keys)"
            )


def _int(environ: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    raw = (environ.get(name) or "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = low - 1
    if not low <= value <= high:
        raise AgentConfigError(f"{name}={raw!r} must be an integer from {low} to {high}")
    return value


def _url(value: str | None) -> str | None:
    if value is not None:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise AgentConfigError(f"OPENAI_BASE_URL={value!r} must be an absolute http(s) URL")
    return value


def _command(value: str) -> tuple[str, ...]:
    try:
        return tuple(shlex.split(value))
    except ValueError as exc:
        raise AgentConfigError(f"A2A_AGENT_COMMAND: {exc}") from None


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
async def open_runtime(settings: AgentSettings, store_root: Path) -> AsyncIterator[AgentRuntime]:
    """The runtime ``settings`` select, running for the ``async with`` block.

    The ``subprocess`` runtime's program is started before the block and stopped
    after it (stdin closed, then SIGKILL after a grace period). The caller still
    calls :meth:`AgentRuntime.aclose` (it releases the sessions).
    Raises:
        AgentConfigError: a file or callable named by the settings cannot be loaded.
        OSError: the agent program cannot be started.
    """
    if settings.runtime == "subprocess":
        from taskplane.bridge.subprocess_runtime import SubprocessRuntime

        runtime = SubprocessRuntime(settings.command, store_root)
        async with trio.open_nursery() as nursery:
            await nursery.start(runtime.serve)
            try:
                yield runtime
            finally:
                nursery.cancel_scope.cancel()
        return
    yield await build_runtime(settings, store_root)


async def build_runtime(settings: AgentSettings, store_root: Path) -> AgentRuntime:
    """The ``scripted``, ``openai`` or ``python`` runtime (no background service).

    Raises:
        AgentConfigError: the system prompt file or the callable cannot be loaded,
            or ``settings`` select ``subprocess`` (use :func:`open_runtime`).
    """
    if settings.runtime == "openai":
        return await _openai(settings, store_root)
    if settings.runtime == "python":
        from taskplane.bridge.python_runtime import PythonRuntime, load_callable

        assert settings.callable is not None
        try:
            function = load_callable(settings.callable)
        except ValueError as exc:
            raise AgentConfigError(str(exc)) from None
        return PythonRuntime(function, store_root)
    if settings.runtime == "subprocess":
        raise AgentConfigError("the subprocess runtime runs a program: use open_runtime")
    from taskplane.bridge.scripted import ScriptedRuntime

    return ScriptedRuntime()


async def _openai(settings: AgentSettings, store_root: Path) -> AgentRuntime:
    import openai

    from taskplane.bridge.openai_runtime import DEFAULT_SYSTEM_PROMPT, OpenAIRuntime
    from taskplane.bridge.sessions import Profile, TranscriptStore

    prompt = DEFAULT_SYSTEM_PROMPT
    if settings.system_prompt_file:
        path = Path(settings.system_prompt_file)
        try:
            prompt = await trio.to_thread.run_sync(lambda: path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise AgentConfigError(f"A2A_AGENT_SYSTEM_PROMPT_FILE={path}: {exc}") from None
    assert settings.model is not None
    client = openai.AsyncOpenAI(
        api_key=settings.api_key or "unused",
        base_url=settings.base_url,
        max_retries=0,
        http_client=openai.DefaultAsyncHttpxClient(),
    )
    return OpenAIRuntime(client, Profile(settings.model, prompt), TranscriptStore(store_root))
