"""A fake Chatto server on 127.0.0.1: the ConnectRPC JSON API and the realtime
WebSocket on one port (quart-trio under hypercorn, in its own thread).

ConnectRPC: ``POST /api/connect/chatto.api.v1.<Service>/<Method>`` with
``Content-Type: application/json``; answers are protobuf JSON, failures Connect error
bodies ``{"code": ..., "message": ...}`` with the HTTP status of their code
(``unauthenticated`` 401, ``permission_denied`` 403, ``not_found`` 404,
``resource_exhausted`` 429 with ``Retry-After``, ``internal`` 500, ``unavailable`` 503,
``unimplemented`` 501). Methods: ``ViewerService/GetViewer``,
``NotificationService/GetNotificationOccurrence`` and ``/DeleteNotificationOccurrence``
(``deleted: false`` when already absent), ``/ListNotificationOccurrences`` (offset
pages, newest first), ``MessageService/GetMessage`` and
``/CreateMessage``.

Realtime ``/api/realtime``: binary protobuf ``RealtimeClientFrame``/``RealtimeServerFrame``
frames; ``hello`` (version 2 and the bearer key, else a fatal ``error``) answered
``hello``, ``subscribe_events`` answered ``subscribed``, then a projection event (a
``reset`` too when no cursor was given) whose ``notification_occurrences_replace`` holds
the current notifications (the newest ``page_size`` of them), and ``caught_up``. Every
later change of the notifications is one more projection event with a new resume
cursor. Faults: refused, rate-limited and failing (created, then ``internal``)
messages, failing dismissals, a notification dismissed elsewhere before it is read,
dropped connections, a ``close`` with a delay, a refused resume cursor, a connection
that falls silent (no heartbeat) without closing.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from typing import Any

import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from quart import Response, request, websocket
from quart_trio import QuartTrio

from taskplane.sources.chatto_realtime import decode, encode

TOKEN = "cht_BK_fake0key"
BOT = {"id": "usr0bot", "login": "taskplane_bot", "displayName": "Task Bot", "isBot": True}
ALICE = {"id": "usr0alice", "login": "alice", "displayName": "Alice"}
ROOM = {"id": "room0general", "kind": "ROOM_KIND_CHANNEL", "name": "general"}
STATUS = {
    "unauthenticated": 401,
    "permission_denied": 403,
    "not_found": 404,
    "resource_exhausted": 429,
    "internal": 500,
    "unimplemented": 501,
    "unavailable": 503,
}
PREFIX = "/api/connect/chatto.api.v1."


def _error(code: str, message: str, headers: dict[str, str] | None = None) -> Response:
    body = json.dumps({"code": code, "message": message})
    response = Response(body, status=STATUS[code], content_type="application/json")
    response.headers.update(headers or {})
    return response


def _ok(body: dict[str, Any]) -> Response:
    return Response(json.dumps(body), status=200, content_type="application/json")


class FakeChatto:
    """Start with :meth:`start`; ``url`` is for ``CHATTO_URL``."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.messages: dict[str, dict[str, Any]] = {}
        self.occurrences: dict[str, dict[str, Any]] = {}
        self.created: list[dict[str, Any]] = []
        self.create_requests: list[float] = []
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.subscriptions: list[str | None] = []
        self.refuse_creates = 0
        self.fail_after_create = 0
        self.rate_limit_creates_s = 0
        self.fail_deletes = False
        self.vanish_next = False
        self.page_size = 50
        self.heartbeat_s = 30
        self.silent = False
        self.refuse_cursors = False
        self.connections = 0
        self.cursor = 0
        self._sockets: list[trio.MemorySendChannel[bytes | None]] = []
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None
        self._ready = threading.Event()
        self.url = ""
        self.app = self._app()
        self._thread = threading.Thread(target=trio.run, args=(self._main,), daemon=True)

    def start(self) -> FakeChatto:
        self._thread.start()
        assert self._ready.wait(10), "the fake Chatto did not start"
        return self

    def close(self) -> None:
        if self._token is not None and self._stop is not None:
            trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
        self._thread.join(10)

    # ---- test controls -------------------------------------------------------------

    def notify(
        self,
        text: str,
        *,
        kind: str = "directMentionReceived",
        room: dict[str, Any] = ROOM,
        thread_root: str = "",
        actor: dict[str, Any] = ALICE,
    ) -> tuple[str, str]:
        """``actor`` posts ``text`` and Chatto gives the bot a notification of ``kind``;
        every subscribed socket gets the new notification state. Returns (message ID,
        notification ID)."""
        message_id = f"evt{uuid.uuid4().hex[:12]}"
        notification_id = f"ntf{uuid.uuid4().hex[:12]}"
        reference: dict[str, Any] = {"room": room, "eventId": message_id}
        if thread_root:
            reference["threadRootEventId"] = thread_root
        with self.lock:
            self.messages[message_id] = {
                "id": message_id,
                "roomId": room["id"],
                "actorId": actor["id"],
                "body": text,
                "threadRootEventId": thread_root,
            }
            self.occurrences[notification_id] = {
                "id": notification_id,
                "actor": actor,
                "signal": {kind: {"message": reference}},
                "unread": True,
                "vanished": self.vanish_next,
            }
            self.vanish_next = False
        self.broadcast()
        return message_id, notification_id

    def edit(self, message_id: str, text: str) -> None:
        """The author edits the message (no notification changes)."""
        with self.lock:
            self.messages[message_id]["body"] = text

    def visible(self) -> list[str]:
        """IDs of the notifications not yet dismissed."""
        with self.lock:
            return [n for n, o in self.occurrences.items() if not o.get("deleted")]

    def bot_messages(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.created)

    def called(self, method: str) -> int:
        with self.lock:
            return sum(1 for m, _ in self.calls if m == method)

    def broadcast(self) -> None:
        """One projection event with the current notifications to every socket."""
        frame, sockets = self._projection(reset=False)
        for tx in sockets:
            self._call(tx.send, frame)

    def drop(self, close: dict[str, Any] | None = None) -> None:
        """Close every WebSocket from the server side (after a ``close`` frame with
        ``close`` as its body, when given)."""
        with self.lock:
            sockets = list(self._sockets)
        for tx in sockets:
            if close is not None:
                self._call(tx.send, encode("RealtimeServerFrame", {"close": close}))
            self._call(tx.send, None)

    def _projection(
        self, *, reset: bool
    ) -> tuple[bytes, list[trio.MemorySendChannel[bytes | None]]]:
        with self.lock:
            self.cursor += 1
            current = self._listed()[: self.page_size]
            operations: list[dict[str, Any]] = [{"reset": {}}] if reset else []
            operations.append(
                {
                    "notificationOccurrencesReplace": {
                        "occurrences": {"occurrences": current, "unreadCount": len(current)}
                    }
                }
            )
            event = {
                "id": f"pev{self.cursor}",
                "resumeCursor": f"cur{self.cursor}",
                "operations": operations,
            }
            sockets = list(self._sockets)
        return encode("RealtimeServerFrame", {"projectionEvent": event}), sockets

    def _listed(self) -> list[dict[str, Any]]:
        """The visible notifications, newest first (call with the lock held)."""
        return [
            {k: v for k, v in o.items() if k not in ("vanished", "deleted")}
            for o in reversed(self.occurrences.values())
            if not o.get("deleted")
        ]

    def _call(self, fn: Any, *args: Any) -> None:
        assert self._token is not None
        try:
            trio.from_thread.run(fn, *args, trio_token=self._token)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass

    # ---- the server ----------------------------------------------------------------

    async def _main(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._stop = trio.Event()
        config = Config()
        config.bind = ["127.0.0.1:0"]
        config.accesslog = None
        config.errorlog = None
        # At close, a socket a taskplane process still holds would otherwise keep
        # the fake up for hypercorn's default 3 s grace (nothing is checked then).
        config.graceful_timeout = 0.5
        async with trio.open_nursery() as nursery:
            binds = await nursery.start(
                lambda task_status: serve(
                    self.app,  # type: ignore[arg-type]
                    config,
                    shutdown_trigger=self._stop.wait,  # type: ignore[union-attr]
                    task_status=task_status,
                )
            )
            self.url = str(binds[0])
            self._ready.set()

    def _rpc(self, method: str, body: dict[str, Any]) -> Response:
        with self.lock:
            self.calls.append((method, body))
        if method == "ViewerService/GetViewer":
            return _ok({"user": {"profile": BOT, "hasPassword": False}})
        if method == "NotificationService/GetNotificationOccurrence":
            with self.lock:
                occurrence = self.occurrences.get(body.get("notificationId", ""))
                if occurrence is None or occurrence.get("deleted") or occurrence.get("vanished"):
                    return _error("not_found", "notification occurrence not found")
                shown = {k: v for k, v in occurrence.items() if k != "vanished"}
            return _ok({"occurrence": shown})
        if method == "NotificationService/DeleteNotificationOccurrence":
            with self.lock:
                if self.fail_deletes:
                    return _error("unavailable", "notification store unavailable")
                occurrence = self.occurrences.get(body.get("notificationId", ""))
                deleted = occurrence is not None and not occurrence.get("deleted")
                if occurrence is not None:
                    occurrence["deleted"] = True
            if deleted:
                frame, sockets = self._projection(reset=False)
                for tx in sockets:  # every device sees the dismissal
                    try:
                        tx.send_nowait(frame)
                    except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
                        pass
            return _ok({"deleted": deleted})
        if method == "NotificationService/ListNotificationOccurrences":
            page = body.get("page") or {}
            limit, offset = int(page.get("limit") or 50), int(page.get("offset") or 0)
            with self.lock:
                listed = self._listed()
            chosen = listed[offset : offset + limit]
            return _ok(
                {
                    "occurrences": chosen,
                    "page": {
                        "totalCount": str(len(listed)),
                        "hasMore": offset + limit < len(listed),
                    },
                    "unreadCount": len(listed),
                }
            )
        if method == "MessageService/GetMessage":
            with self.lock:
                message = self.messages.get(body.get("eventId", ""))
            if message is None or message["roomId"] != body.get("roomId"):
                return _error("not_found", "message not found")
            return _ok({"message": message})
        if method == "MessageService/CreateMessage":
            return self._create(body)
        return _error("unimplemented", f"{method} is not implemented")

    def _create(self, body: dict[str, Any]) -> Response:
        with self.lock:
            self.create_requests.append(time.monotonic())
            limited, self.rate_limit_creates_s = self.rate_limit_creates_s, 0
            refused = self.refuse_creates > 0
            self.refuse_creates -= 1 if refused else 0
        if limited:
            return _error("resource_exhausted", "slow down", {"Retry-After": str(limited)})
        if refused:
            return _error("permission_denied", "message.post is not allowed")
        if not body.get("roomId") or not body.get("body"):
            return _error("invalid_argument", "room_id and body are required")
        message = {
            "id": f"evt{uuid.uuid4().hex[:12]}",
            "roomId": body["roomId"],
            "actorId": BOT["id"],
            "body": body["body"],
            "inReplyTo": body.get("inReplyTo", ""),
            "threadRootEventId": body.get("threadRootEventId", ""),
        }
        with self.lock:
            self.messages[message["id"]] = message
            self.created.append(message)
            fail = self.fail_after_create > 0
            self.fail_after_create -= 1 if fail else 0
        if fail:  # created, but the caller cannot know
            return _error("internal", "internal error")
        return _ok({"message": message})

    def _app(self) -> QuartTrio:
        app = QuartTrio(__name__)
        fake = self

        @app.post(PREFIX + "<service>/<method>")
        async def rpc(service: str, method: str) -> Any:
            if request.headers.get("Authorization") != f"Bearer {TOKEN}":
                return _error("unauthenticated", "a valid bearer credential is required")
            if request.headers.get("Content-Type", "").split(";")[0] != "application/json":
                return Response("unsupported media type", status=415)
            body = await request.get_json()
            return fake._rpc(f"{service}/{method}", body if isinstance(body, dict) else {})

        @app.websocket("/api/realtime")
        async def realtime() -> None:
            with fake.lock:
                fake.connections += 1
            hello = decode("RealtimeClientFrame", await websocket.receive()).get("hello") or {}
            if hello.get("protocolVersion") != 2 or hello.get("bearerToken") != TOKEN:
                error = {"code": "unauthenticated", "message": "bad credential", "fatal": True}
                await websocket.send(encode("RealtimeServerFrame", {"error": error}))
                return
            server_hello = {
                "protocolVersion": 2,
                "serverVersion": "0.5.0",
                "heartbeatIntervalSeconds": fake.heartbeat_s,
                "capabilities": ["chatto.realtime.projection.v1"],
            }
            await websocket.send(encode("RealtimeServerFrame", {"hello": server_hello}))
            frame = decode("RealtimeClientFrame", await websocket.receive())
            subscribe = frame.get("subscribeEvents") or {}
            cursor = subscribe.get("resumeCursor")
            with fake.lock:
                fake.subscriptions.append(cursor)
            if cursor and fake.refuse_cursors:
                error = {"code": "invalid_cursor", "message": "cursor not usable", "fatal": True}
                await websocket.send(encode("RealtimeServerFrame", {"error": error}))
                return
            start = {"startCursor": cursor or f"cur{fake.cursor}"}
            await websocket.send(encode("RealtimeServerFrame", {"subscribed": start}))
            tx, rx = trio.open_memory_channel[bytes | None](64)
            snapshot, _ = fake._projection(reset=cursor is None)
            with fake.lock:
                fake._sockets.append(tx)
                caught_up = {"caughtUp": {"cursor": f"cur{fake.cursor}"}}
            try:
                await websocket.send(snapshot)
                await websocket.send(encode("RealtimeServerFrame", caught_up))
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(_drain)
                    nursery.start_soon(_heartbeats, tx.clone())
                    async for data in rx:
                        if data is None:
                            break
                        await websocket.send(data)
                    nursery.cancel_scope.cancel()
            finally:
                with fake.lock:
                    fake._sockets.remove(tx)

        async def _heartbeats(tx: trio.MemorySendChannel[bytes | None]) -> None:
            async with tx:
                while True:
                    await trio.sleep(fake.heartbeat_s)
                    if not fake.silent:
                        beat = {"heartbeat": {"id": f"hb{uuid.uuid4().hex[:8]}"}}
                        await tx.send(encode("RealtimeServerFrame", beat))

        async def _drain() -> None:
            while True:
                await websocket.receive()  # pings and other client frames

        return app
