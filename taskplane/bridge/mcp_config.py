"""``A2A_AGENT_MCP_CONFIG``: the MCP servers whose tools an LLM agent may call.

The file is JSON in the common ``mcpServers`` shape::

    {"mcpServers": {
        "files": {"command": "python3", "args": ["files_server.py"], "env": {"ROOT": "/srv"}},
        "search": {"url": "https://mcp.example/mcp", "headers": {"Authorization": "Bearer ..."}}
    }}

A server with ``command`` runs as a child process speaking MCP over stdio (``args``
and ``env`` optional; ``env`` is added to the server's environment); one with ``url``
is reached over MCP's streamable HTTP transport (``headers`` optional, sent with every
request). Server names are 1..32 characters of ``A-Z a-z 0-9 _ -``: a server's tools
are offered to the model as ``<server>__<tool>``. Read once at startup; every problem
is an :class:`~taskplane.settings.AgentConfigError` naming the variable and the server.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from taskplane.settings import AgentConfigError

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,32}$")
MAX_SERVERS = 16
"""Servers one file may name."""


@attrs.frozen
class StdioServerSpec:
    """An MCP server run as a child process (stdio transport)."""

    name: str
    command: tuple[str, ...]
    env: Mapping[str, str] = attrs.field(factory=dict)


@attrs.frozen
class HttpServerSpec:
    """An MCP server reached over streamable HTTP."""

    name: str
    url: str
    headers: Mapping[str, str] = attrs.field(factory=dict, repr=False)


ServerSpec = StdioServerSpec | HttpServerSpec


def load_mcp_config(path: str) -> tuple[ServerSpec, ...]:
    """The servers of ``path`` (blocking: call at startup), in file order.

    Raises:
        AgentConfigError: unreadable or malformed file, or a malformed server entry.
    """
    where = f"A2A_AGENT_MCP_CONFIG={path}"
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise AgentConfigError(f"{where}: {exc}") from None
    servers = document.get("mcpServers") if isinstance(document, dict) else None
    if not isinstance(servers, dict):
        raise AgentConfigError(f'{where}: expected {{"mcpServers": {{name: server, ...}}}}')
    if len(servers) > MAX_SERVERS:
        raise AgentConfigError(f"{where}: at most {MAX_SERVERS} servers")
    return tuple(_server(where, name, entry) for name, entry in servers.items())


def _server(where: str, name: str, entry: Any) -> ServerSpec:
    here = f"{where}: server {name!r}"
    if not _NAME.match(name):
        raise AgentConfigError(f"{here}: a name is 1..32 characters of A-Z a-z 0-9 _ -")
    if not isinstance(entry, dict):
        raise AgentConfigError(f"{here} must be an object")
    if "command" in entry and "url" in entry:
        raise AgentConfigError(f"{here}: give either command or url, not both")
    if "command" in entry:
        _only(here, entry, {"command", "args", "env", "type"})
        command, args = entry["command"], entry.get("args", [])
        if not isinstance(command, str) or not command:
            raise AgentConfigError(f"{here}: command must be a non-empty string")
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise AgentConfigError(f"{here}: args must be an array of strings")
        return StdioServerSpec(name, (command, *args), _strings(here, "env", entry))
    if "url" in entry:
        _only(here, entry, {"url", "headers", "type"})
        url = entry["url"]
        if not isinstance(url, str) or not re.match(r"^https?://[^/\s]+", url):
            raise AgentConfigError(f"{here}: url must be an absolute http or https URL")
        return HttpServerSpec(name, url, _strings(here, "headers", entry))
    raise AgentConfigError(f"{here}: needs command (stdio) or url (streamable HTTP)")


def _only(here: str, entry: dict[str, Any], allowed: set[str]) -> None:
    extra = sorted(set(entry) - allowed)
    if extra:
        raise AgentConfigError(f"{here}: unknown key {extra[0]!r}")


def _strings(here: str, key: str, entry: dict[str, Any]) -> dict[str, str]:
    value = entry.get(key, {})
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise AgentConfigError(f"{here}: {key} must be an object of strings")
    return dict(value)
