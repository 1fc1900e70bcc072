"""MCP tools for LLM agents: the client of the servers ``A2A_AGENT_MCP_CONFIG`` names.

Design document, "Resident-agent bridge": a Task session gets the resident's
non-Channels extensions besides the four task tools. Each server of the file
(:mod:`taskplane.bridge.mcp_config`) is reached over stdio (a supervised child
process, :class:`~taskplane.bridge.agent_process.AgentProcess`, restarted when it
exits) or over MCP's streamable HTTP transport (``POST`` of one JSON-RPC message, the
answer as ``application/json`` or as a ``text/event-stream``; the ``Mcp-Session-Id``
the server gives is sent back, and a session the server forgot is opened again).

:class:`McpTools` starts the servers, opens an MCP session with each (``initialize``,
``notifications/initialized``, protocol ``2025-06-18``) and lists their tools, all
bounded by :data:`START_TIMEOUT_S`; a server that is not up by then (its program
cannot start, exits, or never answers ``initialize``) is logged once
(``mcp_server_unavailable``), its process is stopped and not started again, and its
tools are left out for the life of the process: they come back at the plane's next
start. A stdio server that did start is restarted when it exits, after a backoff
doubling to :data:`RESTART_MAX_S` (each failed start logged with its count). The
``openai`` runtime offers the tools beside the task tools as ``<server>__<tool>``
functions and calls them through :meth:`McpTools.call`, inside the turn: each call is
bounded by :data:`CALL_TIMEOUT_S` and its result by :data:`MAX_RESULT_CHARS`, and any
failure of the server (an error answer, a timeout, a dead process, an HTTP error) is
returned as ``error: <why>`` text for the model to see, never raised: a failing
server never crashes a turn. A stdio server that did not answer a call in time is
sent ``notifications/cancelled`` and then restarted (``mcp_server_restarted``), so a
hung server costs one call's timeout, not every later call's; the next call opens a
session with the fresh process. Results are quoted inside the untrusted-content markers:
what a server returns is data, never instructions.

This module speaks MCP's JSON-RPC itself rather than using the ``mcp`` package: that
package runs on anyio task groups and brings a web server stack (starlette, uvicorn,
sse-starlette) into the plane as runtime dependencies, while the three requests a
client needs here fit the plane's own trio code (bounded channels, cancel scopes)
and its JSON-RPC framing.

Log events: ``mcp_server_ready``, ``mcp_server_unavailable``, ``mcp_tool_failed``,
``mcp_server_restarted``,
and those of the server processes (``mcp_process_started``, ``mcp_stderr`` ...).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any, Final, Protocol

import attrs
import httpx
import trio

from taskplane.bridge import jsonrpc
from taskplane.bridge.agent_process import AgentProcess, AgentUnavailable
from taskplane.bridge.mcp_config import HttpServerSpec, ServerSpec, StdioServerSpec
from taskplane.bridge.tools import quote_untrusted

log = logging.getLogger("taskplane.bridge.mcp")

PROTOCOL_VERSION: Final = "2025-06-18"
START_TIMEOUT_S: Final = 10.0
"""How long starting one server, opening its session and listing its tools may take."""
CALL_TIMEOUT_S: Final = 60.0
"""How long one tool call may take; past it the model sees a tool error."""
RESTART_MAX_S: Final = 300.0
"""Cap of the restart backoff of a stdio server that exits after it started, seconds."""
MAX_RESULT_CHARS: Final = 40_000
"""Characters of a tool result the model sees at most (the rest is cut, and said so)."""
MAX_HTTP_BODY_BYTES: Final = 4 * 1024 * 1024
"""Largest HTTP answer read from a server."""
MAX_TOOLS: Final = 128
"""Tools listed per server at most (pages of ``tools/list`` included)."""
CLIENT_INFO: Final = {"name": "taskplane", "version": "0.1.0"}


class McpError(Exception):
    """A server failed a request: an error answer, a dead transport, a bad reply."""


class _Transport(Protocol):
    async def request(self, method: str, params: dict[str, Any]) -> Any: ...

    async def notify(self, method: str, params: dict[str, Any]) -> None: ...

    async def reset(self) -> None: ...

    def restart(self) -> None: ...


@attrs.frozen
class McpTool:
    """One tool of one server, as the model sees it (``<server>__<tool>``)."""

    server: str
    name: str
    description: str
    input_schema: Mapping[str, Any]

    @property
    def function_name(self) -> str:
        return f"{self.server}__{self.name}"

    def openai_function(self) -> dict[str, Any]:
        """The chat-completions ``tools`` entry."""
        schema = dict(self.input_schema) or {"type": "object", "properties": {}}
        return {
            "type": "function",
            "function": {
                "name": self.function_name,
                "description": f"[MCP server {self.server}] {self.description}"[:1024],
                "parameters": schema,
            },
        }


class StdioTransport:
    """MCP over a child process's stdin/stdout (newline-delimited JSON-RPC)."""

    def __init__(self, spec: StdioServerSpec) -> None:
        self.process = AgentProcess(
            spec.command,
            self._on_message,
            self._on_exit,
            env=spec.env,
            kind="mcp",
            name=spec.name,
            fail_first=False,
            restart_max_s=RESTART_MAX_S,
        )
        self._scope = trio.CancelScope()
        self.supervised = False
        """Whether :meth:`run` is supervising the process (it may start one)."""
        self.stopped = trio.Event()
        self._ids = itertools.count(1)
        self._waiting: dict[int, trio.MemorySendChannel[dict[str, Any]]] = {}
        self.generation = 0
        """Incremented when the process exits: its MCP session is gone with it."""

    async def run(self) -> None:
        """Supervise the server process until cancelled or :meth:`stop`."""
        self.supervised = True
        try:
            with self._scope:
                await self.process.run()
        finally:
            self.supervised = False
            self.stopped.set()

    async def stop(self) -> None:
        """Stop the process and never start it again; return once it is stopped."""
        self._scope.cancel()
        await self.stopped.wait()

    def restart(self) -> None:
        """Kill the process (it hangs); a fresh one is started, with a new session."""
        self.generation += 1
        self.process.restart()

    async def request(self, method: str, params: dict[str, Any]) -> Any:
        request_id = next(self._ids)
        inbox, answers = trio.open_memory_channel[dict[str, Any]](1)
        try:
            try:
                await self.process.wait_running()
                # Registered only once a process runs: the exit of one killed before
                # (a restart) must not fail a request meant for the next.
                self._waiting[request_id] = inbox
                await self.process.send(jsonrpc.request(request_id, method, params))
            except AgentUnavailable as exc:
                raise McpError(str(exc)) from None
            try:
                async with answers:
                    answer = await answers.receive()
                    if "exited" in answer:
                        raise McpError(answer["exited"])
            except trio.Cancelled:
                # Timed out or the turn was cancelled: tell the server to stop.
                with trio.CancelScope(shield=True, deadline=trio.current_time() + 1.0):
                    cancelled = {"requestId": request_id, "reason": "cancelled by the client"}
                    with contextlib.suppress(McpError):
                        await self.notify("notifications/cancelled", cancelled)
                raise
        finally:
            self._waiting.pop(request_id, None)
            inbox.close()
        return _result(answer)

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        try:
            await self.process.send(jsonrpc.notification(method, params))
        except AgentUnavailable as exc:
            raise McpError(str(exc)) from None

    async def reset(self) -> None:
        """Nothing to reset: a new process is a new session."""

    async def _on_message(self, message: dict[str, Any]) -> None:
        method, request_id = message.get("method"), message.get("id")
        if method is None:
            waiting = self._waiting.get(request_id) if isinstance(request_id, int) else None
            if waiting is not None:
                try:
                    waiting.send_nowait(message)
                except (trio.WouldBlock, trio.BrokenResourceError):
                    pass
            return
        if request_id is None:
            return  # a notification from the server (progress, logging): not used
        # A request from the server: answer ping, refuse what this client does not offer.
        reply = (
            jsonrpc.result(request_id, {})
            if method == "ping"
            else jsonrpc.error(request_id, jsonrpc.METHOD_NOT_FOUND, f"no method {method!r}")
        )
        try:
            await self.process.send(reply)
        except AgentUnavailable:
            pass

    def _on_exit(self, reason: str) -> None:
        self.generation += 1
        gone = {"exited": reason}
        for waiting in self._waiting.values():
            try:
                waiting.send_nowait(gone)
            except (trio.WouldBlock, trio.BrokenResourceError):
                pass


class HttpTransport:
    """MCP over streamable HTTP: one ``POST`` per JSON-RPC message."""

    def __init__(self, spec: HttpServerSpec, client: httpx.AsyncClient) -> None:
        self._spec = spec
        self._client = client
        self._ids = itertools.count(1)
        self.session_id: str | None = None
        self.generation = 0
        """Incremented when the server forgot the session (HTTP 404)."""

    async def request(self, method: str, params: dict[str, Any]) -> Any:
        request_id = next(self._ids)
        answer = await self._post(jsonrpc.request(request_id, method, params), request_id)
        if answer is None:
            raise McpError(f"{method}: the server sent no answer")
        return _result(answer)

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        await self._post(jsonrpc.notification(method, params), None)

    async def reset(self) -> None:
        self.session_id = None

    def restart(self) -> None:
        """Nothing to restart: each request is its own ``POST``."""

    async def _post(self, message: dict[str, Any], request_id: int | None) -> Any:
        headers = {
            **self._spec.headers,
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
            "MCP-Protocol-Version": PROTOCOL_VERSION,
        }
        if self.session_id is not None:
            headers["Mcp-Session-Id"] = self.session_id
        body = json.dumps(message, separators=(",", ":")).encode()
        try:
            async with self._client.stream(
                "POST", self._spec.url, content=body, headers=headers
            ) as response:
                if response.status_code == 404 and self.session_id is not None:
                    self.session_id = None
                    self.generation += 1
                    raise McpError("the server ended the MCP session; it is opened again")
                if response.status_code >= 400:
                    raise McpError(f"the server answered HTTP {response.status_code}")
                given = response.headers.get("mcp-session-id")
                if given:
                    self.session_id = given
                if request_id is None or response.status_code == 202:
                    return None
                raw = await _read_capped(response)
                kind = response.headers.get("content-type", "")
        except httpx.HTTPError as exc:
            raise McpError(f"the server could not be reached: {exc}") from None
        if kind.startswith("text/event-stream"):
            return _from_event_stream(raw, request_id)
        try:
            return json.loads(raw)
        except ValueError:
            raise McpError("the server answered with invalid JSON") from None


async def _read_capped(response: httpx.Response) -> bytes:
    data = bytearray()
    async for chunk in response.aiter_bytes():
        data += chunk
        if len(data) > MAX_HTTP_BODY_BYTES:
            raise McpError(f"the server's answer is over {MAX_HTTP_BODY_BYTES} bytes")
    return bytes(data)


def _from_event_stream(raw: bytes, request_id: int) -> Any:
    """The JSON-RPC response to ``request_id`` among the stream's ``data:`` events."""
    for event in raw.decode("utf-8", "replace").replace("\r\n", "\n").split("\n\n"):
        data = "\n".join(
            line[5:].lstrip(" ") for line in event.split("\n") if line.startswith("data:")
        )
        if not data:
            continue
        try:
            message = json.loads(data)
        except ValueError:
            continue
        if isinstance(message, dict) and message.get("id") == request_id:
            return message
    raise McpError("the server's event stream held no answer")


def _result(answer: Any) -> Any:
    if not isinstance(answer, dict):
        raise McpError("the server's answer is not a JSON-RPC object")
    error = answer.get("error")
    if error is not None:
        text = error.get("message") if isinstance(error, dict) else error
        raise McpError(f"the server answered an error: {text}")
    return answer.get("result")


class McpServer:
    """One configured server: its transport, its MCP session and its tools."""

    def __init__(self, name: str, transport: _Transport) -> None:
        self.name = name
        self.transport = transport
        self.tools: tuple[McpTool, ...] = ()
        self._session_of: int | None = None
        self._lock = trio.Lock()

    async def open(self) -> None:
        """Open the session and list the tools (``tools`` is replaced)."""
        await self._ensure_session()
        tools: list[McpTool] = []
        cursor: str | None = None
        while len(tools) < MAX_TOOLS:
            page = {"cursor": cursor} if cursor else {}
            listed = await self.transport.request("tools/list", page)
            for entry in (listed or {}).get("tools") or ():
                tool = _tool(self.name, entry)
                if tool is not None:
                    tools.append(tool)
            cursor = (listed or {}).get("nextCursor")
            if not isinstance(cursor, str) or not cursor:
                break
        self.tools = tuple(tools[:MAX_TOOLS])

    async def call(self, tool: str, arguments: dict[str, Any]) -> Any:
        """``tools/call``; the session is opened again first if the server lost it.

        Raises:
            McpError: the server failed.
        """
        await self._ensure_session()
        return await self.transport.request("tools/call", {"name": tool, "arguments": arguments})

    async def _ensure_session(self) -> None:
        async with self._lock:
            generation = getattr(self.transport, "generation", 0)
            if self._session_of == generation:
                return
            await self.transport.reset()
            params = {
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": CLIENT_INFO,
            }
            await self.transport.request("initialize", params)
            await self.transport.notify("notifications/initialized", {})
            self._session_of = getattr(self.transport, "generation", 0)


def _tool(server: str, entry: Any) -> McpTool | None:
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
        return None
    schema = entry.get("inputSchema")
    tool = McpTool(
        server,
        entry["name"],
        str(entry.get("description") or ""),
        schema if isinstance(schema, dict) else {},
    )
    if not _offerable(tool.function_name):
        log.warning(
            "MCP tool %r of server %s cannot be offered (its name)",
            tool.name,
            server,
            extra={"event": "mcp_tool_skipped", "server": server},
        )
        return None
    return tool


def _offerable(name: str) -> bool:
    return 1 <= len(name) <= 64 and all(c.isascii() and (c.isalnum() or c in "_-") for c in name)


def render_result(result: Any) -> str:
    """A ``tools/call`` result as the model's tool message: the text contents (other
    contents named, e.g. ``[image omitted]``) quoted as untrusted data, ``error:``
    first when the tool reported an error, cut at :data:`MAX_RESULT_CHARS`."""
    result = result if isinstance(result, dict) else {}
    parts: list[str] = []
    for item in result.get("content") or ():
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == "text" and isinstance(item.get("text"), str):
            parts.append(item["text"])
        elif kind == "resource" and isinstance(item.get("resource"), dict):
            resource = item["resource"]
            parts.append(str(resource.get("text") or f"[resource {resource.get('uri')}]"))
        elif kind == "resource_link":
            parts.append(f"[resource link {item.get('uri')}]")
        else:
            parts.append(f"[{kind} omitted]")
    if not parts and "structuredContent" in result:
        parts.append(json.dumps(result["structuredContent"], ensure_ascii=False))
    text = "\n".join(parts) or "(no content)"
    if len(text) > MAX_RESULT_CHARS:
        cut = len(text) - MAX_RESULT_CHARS
        text = f"{text[:MAX_RESULT_CHARS]}\n[{cut} more characters cut]"
    quoted = quote_untrusted(text)
    return f"error: the tool reported an error:\n{quoted}" if result.get("isError") else quoted


class McpTools:
    """The tools of every configured server (module docstring).

    Args:
        specs: the servers (:func:`~taskplane.bridge.mcp_config.load_mcp_config`).
        call_timeout_s: one call's bound in seconds.
        start_timeout_s: one server's start, session and tool listing bound, in seconds.
    Run :meth:`serve` in a nursery before the first turn; it returns once every server
    was tried (up to ``start_timeout_s`` each, at once) and keeps the processes.
    """

    def __init__(
        self,
        specs: Sequence[ServerSpec],
        *,
        call_timeout_s: float = CALL_TIMEOUT_S,
        start_timeout_s: float = START_TIMEOUT_S,
    ) -> None:
        self._specs = tuple(specs)
        self._call_timeout_s = call_timeout_s
        self._start_timeout_s = start_timeout_s
        self._servers: dict[str, McpServer] = {}
        self._by_function: dict[str, McpTool] = {}

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Start the servers, open their sessions, list their tools; then keep the
        stdio processes until cancelled."""
        async with httpx.AsyncClient(timeout=CALL_TIMEOUT_S) as client:
            async with trio.open_nursery() as nursery:
                for spec in self._specs:
                    if isinstance(spec, StdioServerSpec):
                        stdio = StdioTransport(spec)
                        nursery.start_soon(stdio.run)
                        self._servers[spec.name] = McpServer(spec.name, stdio)
                    else:
                        http = HttpTransport(spec, client)
                        self._servers[spec.name] = McpServer(spec.name, http)
                async with trio.open_nursery() as opening:
                    for server in self._servers.values():
                        opening.start_soon(self._open, server)
                for server in self._servers.values():
                    for tool in server.tools:
                        self._by_function.setdefault(tool.function_name, tool)
                task_status.started()
                await trio.sleep_forever()

    async def _open(self, server: McpServer) -> None:
        """Open ``server``; one that fails is logged once and, over stdio, stopped for
        good (its tools are left out until the plane's next start)."""
        why = f"not ready within {self._start_timeout_s:g} s"
        with trio.move_on_after(self._start_timeout_s):
            try:
                await server.open()
            except McpError as exc:
                why = str(exc)
            else:
                log.info(
                    "MCP server %s ready with %d tools",
                    server.name,
                    len(server.tools),
                    extra={"event": "mcp_server_ready", "server": server.name},
                )
                return
        log.warning(
            "MCP server %s is unavailable (%s); its tools are left out",
            server.name,
            why,
            extra={"event": "mcp_server_unavailable", "server": server.name},
        )
        if isinstance(server.transport, StdioTransport):
            await server.transport.stop()

    @property
    def supervised(self) -> tuple[str, ...]:
        """The stdio servers whose process is supervised (started, restarted) now."""
        return tuple(
            name
            for name, server in self._servers.items()
            if isinstance(server.transport, StdioTransport) and server.transport.supervised
        )

    @property
    def tools(self) -> tuple[McpTool, ...]:
        """Every tool offered, in server then listing order."""
        return tuple(self._by_function.values())

    def openai_functions(self) -> list[dict[str, Any]]:
        """The chat-completions ``tools`` entries of every tool."""
        return [tool.openai_function() for tool in self._by_function.values()]

    def offers(self, function_name: str) -> bool:
        """Whether ``function_name`` is one of these tools."""
        return function_name in self._by_function

    async def call(self, function_name: str, arguments: Any) -> str:
        """Call a tool; its result text, or ``error: <why>`` (never raises, except
        ``trio.Cancelled``)."""
        tool = self._by_function.get(function_name)
        if tool is None:
            return f"error: no tool {function_name!r}"
        if not isinstance(arguments, dict):
            return f"error: the arguments of {function_name} must be a JSON object"
        server = self._servers[tool.server]
        why = f"no answer within {self._call_timeout_s:g} s"
        with trio.move_on_after(self._call_timeout_s) as bound:
            try:
                return render_result(await server.call(tool.name, arguments))
            except McpError as exc:
                why = str(exc)
        if bound.cancelled_caught:
            # (The cancel notice was sent.) A server that hangs would hang every
            # later call too: start a fresh one.
            server.transport.restart()
            if isinstance(server.transport, StdioTransport):
                why += "; the server is restarted"
                log.warning(
                    "MCP server %s did not answer a call within %g s; restarted",
                    tool.server,
                    self._call_timeout_s,
                    extra={"event": "mcp_server_restarted", "server": tool.server},
                )
        log.warning(
            "MCP tool %s failed: %s",
            function_name,
            why,
            extra={"event": "mcp_tool_failed", "server": tool.server, "tool": tool.name},
        )
        return f"error: MCP server {tool.server} failed the call: {why}"
