"""The HTTP plumbing the fake providers share: a loopback ``ThreadingHTTPServer`` served
from a daemon thread, and a quiet HTTP/1.1 request handler that answers JSON.

Each fake keeps its own routes, status codes, error bodies and media type (those are the
provider's rules); only the socket, thread and response framing live here."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SHUTDOWN_POLL_S = 0.05
"""Seconds between the serving thread's looks for :meth:`LoopbackServer.close`, which
waits for the next look (socketserver's default, 0.5 s, made every close wait up to
that)."""


class LoopbackServer:
    """``handler`` served on ``127.0.0.1`` at an ephemeral port from a daemon thread.

    ``url`` is ``http://127.0.0.1:<port>`` (no trailing slash) as soon as it is built;
    requests are answered only after :meth:`start`. Request threads are daemon threads
    (``ThreadingHTTPServer``'s own default), so :meth:`close` waits for none of them."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(
            target=self.server.serve_forever, args=(SHUTDOWN_POLL_S,), daemon=True
        )

    def start(self) -> None:
        """Start serving (once)."""
        self.thread.start()

    def close(self) -> None:
        """Stop serving and close the listening socket."""
        self.server.shutdown()
        self.server.server_close()


class JsonHandler(BaseHTTPRequestHandler):
    """A request handler that logs nothing and answers with :meth:`_send`."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def content_type(self, status: int) -> str:
        """The ``Content-Type`` of a response with ``status`` (the provider's own)."""
        return "application/json"

    def _send(self, status: int, body: Any = None, headers: dict[str, str] | None = None) -> None:
        """A response of ``status`` with ``body`` as JSON (empty when ``None``), its
        ``Content-Length`` and the extra ``headers``."""
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", self.content_type(status))
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)
