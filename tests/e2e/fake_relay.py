"""A fake relay server on 127.0.0.1 speaking the relay server protocol of
``docs/sources/relay.md``: bearer auth, ``GET /v1/agent``, ``GET /v1/messages`` (a
long poll of up to one second after an opaque cursor, from the oldest message not
acknowledged without one), ``POST /v1/ack`` (cumulative, idempotent) and
``POST /v1/responses`` (``201`` stored, ``200`` for the same ``messageId`` and body
again, ``409 response_conflict`` for another body), with the protocol's error bodies
``{"error": {"code", "message"}}``. Faults: refused or rate-limited responses (``429``
with ``Retry-After``), a response stored and then answered ``500``, failing acks,
dropped connections during polls, and an expired cursor (``410 cursor_expired``).
"""

from __future__ import annotations

import json
import socket
import threading
import time
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.e2e.fake_http import JsonHandler, LoopbackServer

TOKEN = "relay-test-token-0123"
AGENT_ID = "taskplane-under-test"


class FakeRelay:
    """Start with :meth:`start`; ``url`` is for ``RELAY_URL``."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.messages: list[tuple[int, object]] = []
        self.acked = 0
        self.acks: list[str] = []
        self.polls: list[str | None] = []
        self.responses: dict[str, dict[str, Any]] = {}
        self.response_calls: list[tuple[float, str, int]] = []
        self.refuse_responses = 0
        self.rate_limit_responses_s = 0
        self.fail_after_store = 0
        self.fail_acks = 0
        self.drop_polls = 0
        self.expire_cursor = False
        handler = type("Handler", (_Handler,), {"fake": self})
        self.http = LoopbackServer(handler)
        self.url = self.http.url + "/relay"

    def start(self) -> FakeRelay:
        self.http.start()
        return self

    def close(self) -> None:
        self.http.close()

    # ---- test controls -------------------------------------------------------------

    def post(self, body: object) -> str:
        """Queue one message for taskplane; returns its cursor."""
        with self.lock:
            seq = len(self.messages) + 1
            self.messages.append((seq, body))
            self.changed.notify_all()
        return f"c-{seq}"

    def say(self, message_id: str, text: str, **extra: str) -> str:
        """``agent-a`` sends ``text`` in conversation ``conv-1``."""
        body = {"from": "agent-a", "conversationId": "conv-1", "messageId": message_id}
        return self.post({**body, "text": text, **extra})

    def stored(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.responses.values())

    def acked_cursor(self) -> str:
        with self.lock:
            return f"c-{self.acked}"


def _seq(cursor: object) -> int | None:
    if isinstance(cursor, str) and cursor.startswith("c-") and cursor[2:].isdigit():
        return int(cursor[2:])
    return None


class _Handler(JsonHandler):
    fake: FakeRelay

    def _error(self, status: int, code: str, message: str, **headers: str) -> None:
        self._send(status, {"error": {"code": code, "message": message}}, headers)

    def _authorized(self) -> bool:
        if self.headers.get("Authorization") == f"Bearer {TOKEN}":
            return True
        self._error(401, "unauthorized", "bad token", **{"WWW-Authenticate": "Bearer"})
        return False

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        try:
            return json.loads(self.rfile.read(length)) if length else None
        except ValueError:
            return None

    def do_GET(self) -> None:
        if not self._authorized():
            return None
        url = urlsplit(self.path)
        if url.path == "/relay/v1/agent":
            return self._send(200, {"agentId": AGENT_ID})
        if url.path == "/relay/v1/messages":
            return self._messages({k: v[0] for k, v in parse_qs(url.query).items()})
        return self._error(404, "not_found", url.path)

    def do_POST(self) -> None:
        body = self._body()
        if not self._authorized():
            return None
        path = urlsplit(self.path).path
        if not isinstance(body, dict):
            return self._error(400, "bad_request", "the body must be a JSON object")
        if path == "/relay/v1/ack":
            return self._ack(body)
        if path == "/relay/v1/responses":
            return self._respond(body)
        return self._error(404, "not_found", path)

    def _messages(self, params: dict[str, str]) -> None:
        fake = self.fake
        after = params.get("after")
        limit = min(int(params.get("limit", "10")), 100)
        deadline = time.monotonic() + min(float(params.get("wait", "0")), 1.0)
        with fake.lock:
            fake.polls.append(after)
            drop = fake.drop_polls > 0
            fake.drop_polls -= 1 if drop else 0
            expired, fake.expire_cursor = fake.expire_cursor and after is not None, False
            start = fake.acked if after is None else _seq(after)
            page: list[dict[str, object]] = []
            while not drop and not expired and start is not None:
                page = [
                    {"cursor": f"c-{seq}", "message": body}
                    for seq, body in fake.messages
                    if seq > start
                ][:limit]
                if page or time.monotonic() >= deadline:
                    break
                fake.changed.wait(timeout=max(0.0, deadline - time.monotonic()))
        if drop:  # the connection goes away mid-poll: no answer at all
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return None
        if expired:
            return self._error(410, "cursor_expired", f"cursor {after} is no longer known")
        if start is None:
            return self._error(400, "bad_cursor", f"cursor {after} was never issued")
        return self._send(200, {"messages": page})

    def _ack(self, body: dict[str, Any]) -> None:
        fake = self.fake
        seq = _seq(body.get("cursor"))
        with fake.lock:
            fake.acks.append(str(body.get("cursor")))
            failing = fake.fail_acks > 0
            fake.fail_acks -= 1 if failing else 0
            if not failing and seq is not None and seq <= len(fake.messages):
                fake.acked = max(fake.acked, seq)
        if failing:
            return self._error(503, "unavailable", "try again")
        if seq is None or seq > len(fake.messages):
            return self._error(400, "bad_cursor", "never issued")
        return self._send(200, {"acked": body["cursor"]})

    def _respond(self, body: dict[str, Any]) -> None:
        fake = self.fake
        response_id = str(body.get("messageId", ""))
        with fake.lock:
            limited, fake.rate_limit_responses_s = fake.rate_limit_responses_s, 0
            refused = fake.refuse_responses > 0
            fake.refuse_responses -= 1 if refused else 0
            status = 201
            if limited:
                status = 429
            elif refused:
                status = 400
            elif response_id in fake.responses:
                status = 200 if fake.responses[response_id] == body else 409
            else:
                fake.responses[response_id] = body
            fail = status == 201 and fake.fail_after_store > 0
            fake.fail_after_store -= 1 if fail else 0
            fake.response_calls.append((time.monotonic(), response_id, 500 if fail else status))
        if limited:
            return self._error(429, "rate_limited", "slow down", **{"Retry-After": str(limited)})
        if refused:
            return self._error(400, "bad_request", "the relay refuses this response")
        if status == 409:
            return self._error(409, "response_conflict", f"{response_id} holds another body")
        if fail:
            return self._error(500, "unavailable", "stored, but the answer was lost")
        return self._send(status, {"messageId": response_id})
