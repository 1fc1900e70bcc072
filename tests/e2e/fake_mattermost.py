"""A fake Mattermost server on 127.0.0.1: REST v4 and the WebSocket API on one port
(quart-trio under hypercorn, in its own thread).

REST: ``GET /api/v4/users/me``, ``GET /api/v4/users/me/channels``, ``POST
/api/v4/users/ids``, ``GET /api/v4/channels/{id}/posts`` (a post list ``{"order":
newest first, "posts": {...} with thread roots not in order, "next_post_id",
"prev_post_id", "has_next"}``; ``after`` = created after that post, whatever its
channel, oldest first by ``page``/``per_page`` (nothing when the post is gone);
``since`` = modified since, at most 1000, ``400`` beside any other parameter),
``POST /api/v4/posts`` (``201`` with the post),
``POST /api/v4/reactions`` (the same reaction again is the existing one), error bodies
``{"id", "message", "detailed_error", "request_id", "status_code"}``, ``401`` for a
bad token, ``429`` with ``X-Ratelimit-*`` headers. WebSocket ``/api/v4/websocket``:
``authentication_challenge`` answered ``{"status": "OK", "seq_reply": 1}`` (or
``FAIL`` and closed), then ``hello`` and events such as ``posted`` (``data.post`` and
``data.mentions`` as JSON strings) with increasing ``seq``. Faults: refused posts, a
post answered ``500`` after it was created, rate-limited posts, dropped connections.
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

TOKEN = "mm-bot-token"
BOT = {"id": "bot0user0id0000000000000000", "username": "taskbot", "is_bot": True}
ALICE = "alice0user0id000000000000000"
TEAM = "team0id00000000000000000000"
CHANNEL = "chan0town0square0000000000"
DM = "dm0channel"
CHANNELS = {
    CHANNEL: {"type": "O", "name": "town-square", "display_name": "Town Square"},
    DM: {"type": "D", "name": f"{BOT['id']}__{ALICE}", "display_name": ""},
}
USERNAMES = {BOT["id"]: BOT["username"], ALICE: "alice"}


def _error(status: int, error_id: str, message: str) -> Response:
    body = {
        "id": error_id,
        "message": message,
        "detailed_error": "",
        "request_id": uuid.uuid4().hex[:26],
        "status_code": status,
    }
    return Response(json.dumps(body), status=status, content_type="application/json")


class FakeMattermost:
    """Start with :meth:`start`; ``url`` is for ``MATTERMOST_URL``."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.posts: list[dict[str, Any]] = []
        self.reactions: list[dict[str, Any]] = []
        self.post_requests: list[float] = []
        self.refuse_posts = 0
        self.fail_after_post = 0
        self.rate_limit_posts_s = 0
        self.fail_reactions = 0
        self.connections = 0
        self.hold_sockets = False
        self._last_stamp = 0
        self.list_requests: list[dict[str, str]] = []
        self.authenticated = 0
        self._seq = 0
        self._sockets: list[trio.MemorySendChannel[str | None]] = []
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None
        self._ready = threading.Event()
        self.url = ""
        self.app = self._app()
        self._thread = threading.Thread(target=trio.run, args=(self._main,), daemon=True)

    def start(self) -> FakeMattermost:
        self._thread.start()
        assert self._ready.wait(10), "the fake Mattermost did not start"
        return self

    def close(self) -> None:
        if self._token is not None and self._stop is not None:
            trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
        self._thread.join(10)

    # ---- test controls -------------------------------------------------------------

    def say(
        self,
        message: str,
        *,
        channel: str = CHANNEL,
        channel_type: str = "O",
        mention: bool = True,
        root_id: str = "",
        user: str = ALICE,
    ) -> str:
        """A user posts ``message``; every authenticated socket gets ``posted``
        (none is connected while :attr:`hold_sockets` refuses them)."""
        post_id = uuid.uuid4().hex[:26]
        now = self._stamp()
        post = {
            "id": post_id,
            "create_at": now,
            "update_at": now,
            "edit_at": 0,
            "delete_at": 0,
            "is_pinned": False,
            "user_id": user,
            "channel_id": channel,
            "root_id": root_id,
            "original_id": "",
            "message": f"@{BOT['username']} {message}" if mention else message,
            "type": "",
            "props": {},
            "hashtags": "",
            "pending_post_id": "",
            "reply_count": 0,
            "metadata": {},
        }
        with self.lock:
            self.posts.append(post)
        known = CHANNELS.get(channel, {"name": "", "display_name": ""})
        self.broadcast(
            "posted",
            {
                "channel_display_name": known["display_name"],
                "channel_name": known["name"],
                "channel_type": channel_type,
                "mentions": json.dumps([BOT["id"]]) if mention else None,
                "post": json.dumps(post),
                "sender_name": f"@{USERNAMES.get(user, user)}",
                "set_online": True,
                "team_id": TEAM,
            },
            channel,
        )
        return post_id

    def broadcast(self, event: str, data: dict[str, Any], channel: str = "") -> None:
        frame, sockets = self._frame(event, data, channel)
        for tx in sockets:
            self._call(tx.send, frame)

    def _frame(
        self, event: str, data: dict[str, Any], channel: str
    ) -> tuple[str, list[trio.MemorySendChannel[str | None]]]:
        data = {k: v for k, v in data.items() if v is not None}
        with self.lock:
            self._seq += 1
            frame = {
                "event": event,
                "data": data,
                "broadcast": {
                    "omit_users": None,
                    "user_id": "",
                    "channel_id": channel,
                    "team_id": "",
                },
                "seq": self._seq,
            }
            sockets = list(self._sockets)
        return json.dumps(frame), sockets

    def drop(self) -> None:
        """Close every WebSocket from the server side."""
        with self.lock:
            sockets = list(self._sockets)
        for tx in sockets:
            self._call(tx.send, None)

    def _stamp(self) -> int:
        """A ``create_at`` (Unix ms) later than every post's: unique and increasing."""
        with self.lock:
            self._last_stamp = max(int(time.time() * 1000), self._last_stamp + 1)
            return self._last_stamp

    def purge(self, post_id: str) -> None:
        """Delete a post for good (history pruned): ``after`` it lists nothing."""
        with self.lock:
            self.posts = [p for p in self.posts if p["id"] != post_id]

    def bot_posts(self) -> list[dict[str, Any]]:
        with self.lock:
            return [p for p in self.posts if p["user_id"] == BOT["id"]]

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

    def _app(self) -> QuartTrio:
        app = QuartTrio(__name__)
        fake = self

        def authorized() -> bool:
            return request.headers.get("Authorization") == f"Bearer {TOKEN}"

        @app.get("/api/v4/users/me")
        async def me() -> Any:
            if not authorized():
                return _error(401, "api.context.session_expired.app_error", "Invalid session")
            return {**BOT, "roles": "system_user", "locale": "en"}

        @app.get("/api/v4/users/me/channels")
        async def my_channels() -> Any:
            if not authorized():
                return _error(401, "api.context.session_expired.app_error", "Invalid session")
            return [
                {"id": cid, "team_id": "" if c["type"] == "D" else TEAM, **c}
                for cid, c in CHANNELS.items()
            ]

        @app.post("/api/v4/users/ids")
        async def users_by_ids() -> Any:
            if not authorized():
                return _error(401, "api.context.session_expired.app_error", "Invalid session")
            ids = await request.get_json()
            return [{"id": i, "username": USERNAMES[i]} for i in ids if i in USERNAMES]

        @app.get("/api/v4/channels/<channel_id>/posts")
        async def channel_posts(channel_id: str) -> Any:
            if not authorized():
                return _error(401, "api.context.session_expired.app_error", "Invalid session")
            args = request.args
            with fake.lock:
                fake.list_requests.append({"channel_id": channel_id, **args})
                everything = sorted(fake.posts, key=lambda p: int(p["create_at"]))
            mine = [p for p in everything if p["channel_id"] == channel_id]
            if "since" in args:
                if {"after", "before", "page", "per_page"} & set(args):
                    return _error(400, "api.context.invalid_url_param.app_error", "since")
                since = int(args["since"])
                listed = [p for p in mine if int(p.get("update_at", p["create_at"])) > since]
                listed = listed[:1000]
            elif "after" in args:
                page, per_page = int(args.get("page", 0)), int(args.get("per_page", 60))
                if per_page > 200:
                    per_page = 200
                anchor = [p for p in everything if p["id"] == args["after"]]
                newer = [p for p in mine if anchor and p["create_at"] > anchor[0]["create_at"]]
                listed = newer[page * per_page : (page + 1) * per_page]
            else:
                return _error(400, "api.context.invalid_url_param.app_error", "after or since")
            order = [p["id"] for p in reversed(listed)]
            posts = {p["id"]: p for p in listed}
            for p in listed:  # the thread roots ride along, outside order
                root = next((r for r in everything if r["id"] == p.get("root_id")), None)
                if root is not None:
                    posts.setdefault(root["id"], root)
            return {
                "order": order,
                "posts": posts,
                "next_post_id": "",
                "prev_post_id": "",
                "has_next": False,
                "first_inaccessible_post_time": 0,
            }

        @app.post("/api/v4/posts")
        async def create_post() -> Any:
            if not authorized():
                return _error(401, "api.context.session_expired.app_error", "Invalid session")
            body = await request.get_json()
            with fake.lock:
                fake.post_requests.append(time.monotonic())
                limited, fake.rate_limit_posts_s = fake.rate_limit_posts_s, 0
                refused = fake.refuse_posts > 0
                fake.refuse_posts -= 1 if refused else 0
            if limited:
                response = _error(429, "api.context.rate_limited", "limit exceeded")
                response.headers.update(
                    {
                        "X-Ratelimit-Limit": "10",
                        "X-Ratelimit-Remaining": "0",
                        "X-Ratelimit-Reset": str(limited),
                    }
                )
                return response
            if refused:
                return _error(403, "api.context.permissions.app_error", "no permission")
            post = {
                "id": uuid.uuid4().hex[:26],
                "create_at": fake._stamp(),
                "user_id": BOT["id"],
                "channel_id": body["channel_id"],
                "root_id": body.get("root_id", ""),
                "message": body["message"],
                "props": body.get("props") or {},
                "type": "",
            }
            with fake.lock:
                fake.posts.append(post)
                fail = fake.fail_after_post > 0
                fake.fail_after_post -= 1 if fail else 0
            frame, sockets = fake._frame(
                "posted",
                {"channel_type": "O", "post": json.dumps(post), "sender_name": "@taskbot"},
                post["channel_id"],
            )
            for tx in sockets:  # the bot sees its own post, like every member
                try:
                    tx.send_nowait(frame)
                except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
                    pass
            if fail:  # created, but the caller cannot know
                return _error(500, "app.post.save.app_error", "internal error")
            return Response(json.dumps(post), status=201, content_type="application/json")

        @app.post("/api/v4/reactions")
        async def react() -> Any:
            if not authorized():
                return _error(401, "api.context.session_expired.app_error", "Invalid session")
            body = await request.get_json()
            with fake.lock:
                unavailable = fake.fail_reactions > 0
                fake.fail_reactions -= 1 if unavailable else 0
            if unavailable:
                return _error(503, "api.server.unavailable", "try again later")
            reaction = {
                "user_id": body["user_id"],
                "post_id": body["post_id"],
                "emoji_name": body["emoji_name"],
                "create_at": int(time.time() * 1000),
            }
            with fake.lock:
                key = (reaction["user_id"], reaction["post_id"], reaction["emoji_name"])
                known = [
                    r
                    for r in fake.reactions
                    if (r["user_id"], r["post_id"], r["emoji_name"]) == key
                ]
                if not known:
                    fake.reactions.append(reaction)
            return known[0] if known else reaction

        @app.websocket("/api/v4/websocket")
        async def socket() -> None:
            with fake.lock:
                fake.connections += 1
                held = fake.hold_sockets
            if held:  # the server is unreachable: the handshake is refused
                return
            challenge = json.loads(await websocket.receive())
            token = (challenge.get("data") or {}).get("token")
            if challenge.get("action") != "authentication_challenge" or token != TOKEN:
                error = {"id": "api.web_socket_router.not_authenticated.app_error"}
                reply = {"status": "FAIL", "seq_reply": challenge.get("seq"), "error": error}
                await websocket.send(json.dumps(reply))
                return
            await websocket.send(json.dumps({"status": "OK", "seq_reply": challenge["seq"]}))
            await websocket.send(
                json.dumps(
                    {
                        "event": "hello",
                        "data": {"server_version": "9.11.0.0.0"},
                        "broadcast": {"user_id": BOT["id"]},
                        "seq": 0,
                    }
                )
            )
            tx, rx = trio.open_memory_channel[str | None](64)
            with fake.lock:
                fake._sockets.append(tx)
                fake.authenticated += 1
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(_drain)
                    async for frame in rx:
                        if frame is None:
                            break
                        await websocket.send(frame)
                    nursery.cancel_scope.cancel()
            finally:
                with fake.lock:
                    fake._sockets.remove(tx)

        async def _drain() -> None:
            while True:
                await websocket.receive()  # pings and other client frames

        return app
