"""A fake Slack on 127.0.0.1: the Web API methods the Socket Mode source calls
(``auth.test``, ``apps.connections.open``, ``chat.postMessage``,
``conversations.replies``, ``reactions.add`` with ``already_reacted``) over HTTP,
and a real WebSocket server (trio-websocket, in its own thread) speaking Socket Mode
frames: ``hello``, ``events_api`` envelopes that stay pending until acknowledged
(and are sent again, ``retry_attempt`` + 1, on the next connection), ``disconnect``."""

from __future__ import annotations

import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import trio
from trio_websocket import ConnectionClosed, WebSocketConnection, WebSocketRequest, serve_websocket

from tests.e2e.fake_http import SHUTDOWN_POLL_S

TEAM, BOT_USER, BOT_ID = "T0001", "U0BOT", "B0001"
APP_TOKEN, BOT_TOKEN = "xapp-1-test", "xoxb-test"


class FakeSlack:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pending: dict[str, dict[str, Any]] = {}
        self.acks: list[str] = []
        self.ignore_acks = False
        self.messages: dict[str, list[dict[str, Any]]] = {}  # "channel/root" -> thread
        self.calls: list[str] = []
        self.roots: dict[str, str] = {}  # envelope ID -> the mentioned message's ts
        self.refuse_posts = 0
        self.reactions: list[dict[str, Any]] = []
        self.reaction_calls = 0
        self.fail_reactions = 0
        self.drop_posts = 0
        self.connections = 0
        self._ts = 1_700_000_000
        self._conn: WebSocketConnection | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._ready = threading.Event()
        self._stop: trio.Event | None = None
        self.ws_port = 0
        handler = type("Handler", (_Handler,), {"fake": self})
        self.http = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}/api"
        self._threads = [
            threading.Thread(target=self.http.serve_forever, args=(SHUTDOWN_POLL_S,), daemon=True),
            threading.Thread(target=trio.run, args=(self._ws_main,), daemon=True),
        ]

    def start(self) -> FakeSlack:
        for thread in self._threads:
            thread.start()
        self._ready.wait(10)
        return self

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()
        if self._token is not None and self._stop is not None:
            trio.from_thread.run_sync(self._stop.set, trio_token=self._token)

    # ---- test controls -----------------------------------------------------------

    def mention(self, event_id: str, text: str, channel: str = "C0001", **event: Any) -> str:
        """Push an ``app_mention`` envelope (or another event type via ``type=``)."""
        ts = self.next_ts()
        body = {
            "type": "app_mention",
            "text": f"<@{BOT_USER}> {text}",
            "user": "U0USER",
            "ts": ts,
            "team": TEAM,
            "channel": channel,
            "event_ts": ts,
            **event,
        }
        with self.lock:
            self.messages.setdefault(f"{channel}/{ts}", []).append(
                {"type": "message", "user": "U0USER", "text": body["text"], "ts": ts}
            )
        envelope_id = self.push(
            {
                "token": "verification-token",
                "team_id": TEAM,
                "api_app_id": "A0001",
                "event": body,
                "type": "event_callback",
                "event_id": event_id,
                "event_time": int(time.time()),
            }
        )
        self.roots[envelope_id] = ts
        return envelope_id

    def direct(self, event_id: str, text: str, channel: str = "D0001", **event: Any) -> str:
        """Push a direct message to the bot (``message`` with ``channel_type`` ``im``)."""
        return self.mention(
            event_id, text, channel=channel, type="message", channel_type="im", **event
        )

    def push(self, payload: dict[str, Any], kind: str = "events_api") -> str:
        envelope_id = str(uuid.uuid4())
        envelope = {
            "envelope_id": envelope_id,
            "payload": payload,
            "type": kind,
            "accepts_response_payload": False,
            "retry_attempt": 0,
            "retry_reason": "",
        }
        with self.lock:
            self.pending[envelope_id] = envelope
        self._send(envelope)
        return envelope_id

    def send_raw(self, text: str) -> None:
        assert self._token is not None
        trio.from_thread.run(self._send_text, text, trio_token=self._token)

    def disconnect(self) -> None:
        self.send_raw(json.dumps({"type": "disconnect", "reason": "refresh_requested"}))

    def drop(self) -> None:
        assert self._token is not None
        trio.from_thread.run(self._drop, trio_token=self._token)

    def replies(self, channel: str, root: str) -> list[dict[str, Any]]:
        with self.lock:
            return [
                m for m in self.messages.get(f"{channel}/{root}", []) if m.get("user") == BOT_USER
            ]

    def next_ts(self) -> str:
        with self.lock:
            self._ts += 1
            return f"{self._ts}.000100"

    # ---- WebSocket side (trio thread) ----------------------------------------------------

    def _send(self, envelope: dict[str, Any]) -> None:
        if self._token is not None:
            trio.from_thread.run(self._send_text, json.dumps(envelope), trio_token=self._token)

    async def _send_text(self, text: str) -> None:
        if self._conn is not None:
            try:
                await self._conn.send_message(text)
            except ConnectionClosed:
                pass

    async def _drop(self) -> None:
        if self._conn is not None:
            await self._conn.aclose(code=1011, reason="dropped")

    async def _ws_main(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._stop = trio.Event()
        async with trio.open_nursery() as nursery:
            server = await nursery.start(serve_websocket, self._handle, "127.0.0.1", 0, None)
            self.ws_port = server.port
            self._ready.set()
            await self._stop.wait()
            nursery.cancel_scope.cancel()

    async def _handle(self, request: WebSocketRequest) -> None:
        ws = await request.accept()
        self._conn = ws
        with self.lock:
            self.connections += 1
            again = list(self.pending.values())
            for envelope in again:
                envelope["retry_attempt"] += 1
                envelope["retry_reason"] = "timeout"
        await ws.send_message(json.dumps({"type": "hello", "num_connections": 1}))
        for envelope in again:
            await ws.send_message(json.dumps(envelope))
        try:
            while True:
                frame = json.loads(await ws.get_message())
                with self.lock:
                    self.acks.append(frame["envelope_id"])
                    if not self.ignore_acks:
                        self.pending.pop(frame["envelope_id"], None)
        except ConnectionClosed:
            pass
        finally:
            if self._conn is ws:
                self._conn = None


class _Handler(BaseHTTPRequestHandler):
    fake: FakeSlack
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _json(self, body: dict[str, Any], status: int = 200) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _route(self) -> None:
        fake = self.fake
        url = urlsplit(self.path)
        method = url.path.removeprefix("/api/")
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else {}
        token = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
        with fake.lock:
            fake.calls.append(method)
        if method == "apps.connections.open":
            if token != APP_TOKEN:
                return self._json({"ok": False, "error": "invalid_auth"})
            return self._json({"ok": True, "url": f"ws://127.0.0.1:{fake.ws_port}/link/?ticket=t"})
        if token != BOT_TOKEN:
            return self._json({"ok": False, "error": "invalid_auth"})
        if method == "auth.test":
            return self._json(
                {
                    "ok": True,
                    "url": "https://acme.slack.com/",
                    "team": "Acme",
                    "user": "tp",
                    "team_id": TEAM,
                    "user_id": BOT_USER,
                    "bot_id": BOT_ID,
                }
            )
        if method == "chat.postMessage":
            return self._post(body)
        if method == "conversations.replies":
            query = {k: v[0] for k, v in parse_qs(url.query).items()}
            return self._replies(query)
        if method == "reactions.add":
            return self._react(body)
        return self._json({"ok": False, "error": "unknown_method"}, 404)

    def _post(self, body: dict[str, Any]) -> None:
        fake = self.fake
        with fake.lock:
            if fake.refuse_posts > 0:
                fake.refuse_posts -= 1
                return self._json({"ok": False, "error": "channel_not_found"})
        ts = fake.next_ts()
        message = {
            "type": "message",
            "user": BOT_USER,
            "bot_id": BOT_ID,
            "text": body["text"],
            "ts": ts,
            "thread_ts": body.get("thread_ts"),
            "metadata": body.get("metadata"),
        }
        with fake.lock:
            fake.messages.setdefault(f"{body['channel']}/{body.get('thread_ts')}", []).append(
                message
            )
            drop = fake.drop_posts > 0
            fake.drop_posts -= 1 if drop else 0
        if drop:
            self.close_connection = True
            self.connection.shutdown(2)
            return None
        return self._json({"ok": True, "channel": body["channel"], "ts": ts, "message": message})

    def _react(self, body: dict[str, Any]) -> None:
        fake = self.fake
        with fake.lock:
            fake.reaction_calls += 1
            if fake.fail_reactions > 0:
                fake.fail_reactions -= 1
                failing = True
            else:
                failing = False
                key = {k: body.get(k) for k in ("channel", "timestamp", "name")}
                again = key in fake.reactions
                if not again:
                    fake.reactions.append(key)
        if failing:
            return self._json({"ok": False, "error": "internal_error"}, 500)
        if again:
            return self._json({"ok": False, "error": "already_reacted"})
        return self._json({"ok": True})

    def _replies(self, query: dict[str, str]) -> None:
        with self.fake.lock:
            thread = list(self.fake.messages.get(f"{query['channel']}/{query['ts']}", []))
        start = int(query.get("cursor") or 0)
        limit = int(query.get("limit") or 2)  # small pages: the source must follow cursors
        page = thread[start : start + limit]
        if query.get("include_all_metadata") != "true":
            page = [{k: v for k, v in m.items() if k != "metadata"} for m in page]
        nxt = str(start + limit) if start + limit < len(thread) else ""
        return self._json(
            {
                "ok": True,
                "messages": page,
                "has_more": bool(nxt),
                "response_metadata": {"next_cursor": nxt},
            }
        )

    def do_GET(self) -> None:
        self._route()

    def do_POST(self) -> None:
        self._route()
