"""A small MCP server of our own, standard library only, for the MCP client tests.

``python3 mcp_server.py stdio`` speaks MCP over stdin/stdout (newline-delimited
JSON-RPC); ``python3 mcp_server.py http`` serves MCP's streamable HTTP transport on
127.0.0.1:<free port> at ``/mcp`` and prints ``PORT <n>`` on stdout first. Over HTTP
it gives a session ID at ``initialize`` and requires it afterwards (404 for another),
answers ``tools/call`` as a ``text/event-stream`` and everything else as JSON.

Tools: ``add(a, b)`` (the sum as text), ``fail`` (a tool error), ``sleep`` (never
answers), ``big`` (100,000 characters), ``crash`` (stdio: the process exits). Every
``tools/call`` is appended to the file ``MCP_CALL_LOG`` names, if set.
"""

from __future__ import annotations

import json
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TOOLS = [
    {
        "name": "add",
        "description": "Add two numbers.",
        "inputSchema": {
            "type": "object",
            "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
            "required": ["a", "b"],
        },
    },
    {"name": "fail", "description": "Always fails.", "inputSchema": {"type": "object"}},
    {"name": "sleep", "description": "Never answers.", "inputSchema": {"type": "object"}},
    {"name": "big", "description": "A long text.", "inputSchema": {"type": "object"}},
    {"name": "crash", "description": "Exits the server.", "inputSchema": {"type": "object"}},
]
SESSION = "session-1"


def call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    log = os.environ.get("MCP_CALL_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as out:
            out.write(json.dumps({"name": name, "arguments": arguments}) + "\n")
    if name == "add":
        total = arguments["a"] + arguments["b"]
        return {"content": [{"type": "text", "text": f"{total:g}"}], "isError": False}
    if name == "fail":
        return {"content": [{"type": "text", "text": "it failed on purpose"}], "isError": True}
    if name == "sleep":
        time.sleep(3600)
    if name == "big":
        return {"content": [{"type": "text", "text": "b" * 100_000}]}
    if name == "crash":
        os._exit(1)
    raise KeyError(name)


def handle(message: dict[str, Any]) -> dict[str, Any] | None:
    """The response to one JSON-RPC message (``None`` for a notification)."""
    if "id" not in message:
        return None
    method, params = message.get("method"), message.get("params") or {}
    if method == "initialize":
        result: Any = {
            "protocolVersion": params.get("protocolVersion", "2025-06-18"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "test-mcp", "version": "1"},
        }
    elif method == "tools/list":
        result = {"tools": TOOLS}
    elif method == "tools/call":
        try:
            result = call(params["name"], params.get("arguments") or {})
        except KeyError:
            return {
                "jsonrpc": "2.0",
                "id": message["id"],
                "error": {"code": -32602, "message": f"unknown tool {params.get('name')}"},
            }
    else:
        return {
            "jsonrpc": "2.0",
            "id": message["id"],
            "error": {"code": -32601, "message": f"no method {method}"},
        }
    return {"jsonrpc": "2.0", "id": message["id"], "result": result}


def stdio() -> None:
    print("test MCP server on stdio", file=sys.stderr, flush=True)
    for line in sys.stdin:
        if line.strip():
            response = handle(json.loads(line))
            if response is not None:
                sys.stdout.write(json.dumps(response) + "\n")
                sys.stdout.flush()


class Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        message = json.loads(body)
        initializing = message.get("method") == "initialize"
        if not initializing and self.headers.get("Mcp-Session-Id") != SESSION:
            self._send(404, "application/json", b'{"error": "unknown session"}')
            return
        response = handle(message)
        if response is None:
            self._send(202, "application/json", b"")
            return
        data = json.dumps(response).encode()
        if message.get("method") == "tools/call":
            self._send(200, "text/event-stream", b"event: message\ndata: " + data + b"\n\n")
        else:
            self._send(200, "application/json", data, initializing)

    def _send(self, status: int, kind: str, data: bytes, session: bool = False) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        if session:
            self.send_header("Mcp-Session-Id", SESSION)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        print(format % args, file=sys.stderr, flush=True)


def http() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    print(f"PORT {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    stdio() if sys.argv[1:] == ["stdio"] else http()
