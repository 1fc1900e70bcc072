"""A fake Zulip server on 127.0.0.1: the REST endpoints the source calls, with
Zulip's bodies (``{"result": "success" | "error", "msg", "code"}``), HTTP Basic auth
(email + API key), form-encoded parameters (lists JSON-encoded), and event queues:
``POST /api/v1/register``, ``GET /api/v1/events`` (a long poll of up to one second,
then a ``heartbeat``; events up to ``last_event_id`` are dropped as acknowledged;
``BAD_EVENT_QUEUE_ID`` for an expired queue), ``GET /api/v1/messages`` (the bot's
history after an ``anchor``, ``num_before=0``, paged by ``num_after``, each message
with its ``flags``, as the server lists them), ``GET /api/v1/users/me``,
``POST /api/v1/messages`` (the sent message is an event too), and
``POST /api/v1/messages/{id}/reactions`` (``REACTION_ALREADY_EXISTS`` the second
time). Faults: expired queues, a send answered ``500`` after it was sent, refused or
rate-limited sends (``429`` with ``Retry-After``), failing event polls, and an outage
(every request ``503`` until it ends).
"""

from __future__ import annotations

import base64
import json
import threading
import time
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.e2e.fake_http import JsonHandler, LoopbackServer

EMAIL, API_KEY = "taskbot-bot@zulip.example.com", "zulip-test-key"
BOT = {"id": 9, "email": EMAIL, "full_name": "Task Bot"}
ALICE = {"id": 11, "email": "alice@zulip.example.com", "full_name": "Alice"}
STREAM_ID, STREAM = 3, "engineering"


class FakeZulip:
    """Start with :meth:`start`; ``url`` is for ``ZULIP_SITE``."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.queues: dict[str, list[dict[str, Any]]] = {}
        self.next_event: dict[str, int] = {}
        self.messages: dict[int, dict[str, Any]] = {}
        self.flags: dict[int, list[str]] = {}
        self.reads: list[dict[str, str]] = []
        self.outage = False
        self.refused_in_outage = 0
        self.sent: list[dict[str, Any]] = []
        self.reactions: set[tuple[int, int, str]] = set()
        self.reaction_calls = 0
        self.registered = 0
        self.polls: list[tuple[str, int]] = []
        self.send_times: list[float] = []
        self.refuse_sends = 0
        self.fail_after_send = 0
        self.rate_limit_sends_s = 0
        self.fail_polls = 0
        self.fail_reactions = False
        self._next_message = 100
        handler = type("Handler", (_Handler,), {"fake": self})
        self.http = LoopbackServer(handler)
        self.url = self.http.url

    def start(self) -> FakeZulip:
        self.http.start()
        return self

    def close(self) -> None:
        self.http.close()

    # ---- test controls -------------------------------------------------------------

    def say(self, content: str, *, topic: str = "deploys", mention: bool = True) -> int:
        """Alice posts to the stream (mentioning the bot unless told otherwise)."""
        text = f"@**{BOT['full_name']}** {content}" if mention else content
        return self._message(ALICE, "stream", text, topic=topic, mentioned=mention)

    def direct(self, content: str) -> int:
        """Alice sends the bot a direct message."""
        return self._message(ALICE, "private", content, mentioned=False)

    def expire_queues(self) -> None:
        with self.lock:
            self.queues.clear()

    def set_outage(self, down: bool) -> None:
        """While ``down``, every request (a waiting poll too) is answered ``503``."""
        with self.lock:
            self.outage = down
            self.changed.notify_all()

    def bot_messages(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.sent)

    # ---- the model -----------------------------------------------------------------

    def _message(
        self,
        sender: dict[str, Any],
        kind: str,
        content: str,
        *,
        topic: str = "",
        mentioned: bool,
        recipients: list[dict[str, Any]] | None = None,
    ) -> int:
        with self.lock:
            self._next_message += 1
            message_id = self._next_message
            message: dict[str, Any] = {
                "id": message_id,
                "sender_id": sender["id"],
                "sender_email": sender["email"],
                "sender_full_name": sender["full_name"],
                "type": kind,
                "content": content,
                "content_type": "text/x-markdown",
                "timestamp": int(time.time()),
                "client": "website",
                "is_me_message": False,
                "reactions": [],
                "avatar_url": None,
            }
            if kind == "stream":
                message |= {
                    "stream_id": STREAM_ID,
                    "display_recipient": STREAM,
                    "subject": topic,
                    "recipient_id": 20,
                }
            else:
                people = recipients or [ALICE, BOT]
                message |= {
                    "display_recipient": [
                        {"id": p["id"], "email": p["email"], "full_name": p["full_name"]}
                        for p in people
                    ],
                    "subject": "",
                    "recipient_id": 30,
                }
            self.messages[message_id] = message
            flags = ["mentioned"] if mentioned else []
            if sender["id"] == BOT["id"]:
                flags.append("read")
            self.flags[message_id] = flags
            for queue_id, events in self.queues.items():
                event_id = self.next_event[queue_id]
                self.next_event[queue_id] = event_id + 1
                events.append(
                    {"type": "message", "message": message, "flags": flags, "id": event_id}
                )
            self.changed.notify_all()
            return message_id


class _Handler(JsonHandler):
    fake: FakeZulip

    def _ok(self, **body: Any) -> None:
        self._send(200, {"result": "success", "msg": "", **body})

    def _error(self, status: int, code: str, msg: str, **extra: Any) -> None:
        self._send(status, {"result": "error", "msg": msg, "code": code, **extra})

    def _params(self) -> dict[str, str]:
        url = urlsplit(self.path)
        params = {k: v[0] for k, v in parse_qs(url.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            form = parse_qs(self.rfile.read(length).decode())
            params |= {k: v[0] for k, v in form.items()}
        return params

    def _authorized(self) -> bool:
        with self.fake.lock:
            down = self.fake.outage
            self.fake.refused_in_outage += 1 if down else 0
        if down:
            self._error(503, "INTERNAL_SERVER_ERROR", "Service unavailable")
            return False
        expected = "Basic " + base64.b64encode(f"{EMAIL}:{API_KEY}".encode()).decode()
        if self.headers.get("Authorization") == expected:
            return True
        self._error(401, "UNAUTHORIZED", "Invalid API key")
        return False

    def do_GET(self) -> None:
        params = self._params()
        if not self._authorized():
            return None
        path = urlsplit(self.path).path
        if path == "/api/v1/users/me":
            return self._ok(user_id=BOT["id"], email=EMAIL, full_name=BOT["full_name"], is_bot=True)
        if path == "/api/v1/events":
            return self._events(params)
        if path == "/api/v1/messages":
            return self._read_messages(params)
        return self._error(404, "BAD_REQUEST", "Not Found")

    def do_POST(self) -> None:
        params = self._params()
        if not self._authorized():
            return None
        fake = self.fake
        path = urlsplit(self.path).path
        if path == "/api/v1/register":
            with fake.lock:
                fake.registered += 1
                queue_id = f"1700000000:{fake.registered}"
                fake.queues[queue_id] = []
                fake.next_event[queue_id] = 0
            assert json.loads(params["event_types"]) == ["message"]
            with fake.lock:
                newest = max(fake.messages, default=-1)
            return self._ok(
                queue_id=queue_id, last_event_id=-1, max_message_id=newest, zulip_feature_level=300
            )
        if path == "/api/v1/messages":
            return self._send_message(params)
        parts = path.strip("/").split("/")
        if len(parts) == 5 and parts[2] == "messages" and parts[4] == "reactions":
            key = (BOT["id"], int(parts[3]), params["emoji_name"])
            with fake.lock:
                fake.reaction_calls += 1
                if fake.fail_reactions:
                    return self._error(503, "INTERNAL_SERVER_ERROR", "Service unavailable")
                known = key in fake.reactions
                fake.reactions.add(key)
            if known:
                return self._error(400, "REACTION_ALREADY_EXISTS", "Reaction already exists.")
            return self._ok()
        return self._error(404, "BAD_REQUEST", "Not Found")

    def _events(self, params: dict[str, str]) -> None:
        fake = self.fake
        queue_id, last = params.get("queue_id", ""), int(params.get("last_event_id", "-1"))
        deadline = time.monotonic() + 1.0
        with fake.lock:
            fake.polls.append((queue_id, last))
            if fake.fail_polls > 0:
                fake.fail_polls -= 1
                failing = True
            else:
                failing = False
            while not failing:
                events = fake.queues.get(queue_id)
                if events is None or fake.outage:
                    failing = fake.outage
                    break
                events[:] = [e for e in events if e["id"] > last]  # acknowledged
                if events or time.monotonic() >= deadline:
                    break
                fake.changed.wait(timeout=max(0.0, deadline - time.monotonic()))
            events = None if failing else fake.queues.get(queue_id)
            if events is not None and not events:
                heartbeat = {"type": "heartbeat", "id": fake.next_event[queue_id]}
                fake.next_event[queue_id] += 1
                events.append(heartbeat)
            found = list(events) if events is not None else None
        if failing:
            return self._error(503, "INTERNAL_SERVER_ERROR", "Service unavailable")
        if found is None:
            return self._error(
                400, "BAD_EVENT_QUEUE_ID", f"Bad event queue ID: {queue_id}", queue_id=queue_id
            )
        return self._ok(events=found, queue_id=queue_id)

    def _read_messages(self, params: dict[str, str]) -> None:
        """``GET /messages`` for a numeric ``anchor`` and ``num_before=0`` (what the
        source asks), over the bot's whole history (``narrow=[]``)."""
        fake = self.fake
        with fake.lock:
            fake.reads.append(dict(params))
        if json.loads(params.get("narrow", "[]")) != [] or params.get("num_before") != "0":
            return self._error(400, "BAD_REQUEST", "Unsupported query for this fake")
        anchor, num_after = int(params["anchor"]), int(params["num_after"])
        if num_after > 5000:
            return self._error(400, "BAD_REQUEST", "Too many messages requested (maximum 5000).")
        include = json.loads(params.get("include_anchor", "true"))
        with fake.lock:
            ids = sorted(i for i in fake.messages if i > anchor or (include and i == anchor))
            listed = [{**fake.messages[i], "flags": fake.flags[i]} for i in ids[:num_after]]
            found_anchor = anchor in fake.messages
        return self._ok(
            messages=listed,
            anchor=anchor,
            found_anchor=found_anchor,
            found_newest=len(ids) <= num_after,
            found_oldest=False,
            history_limited=False,
        )

    def _send_message(self, params: dict[str, str]) -> None:
        fake = self.fake
        with fake.lock:
            fake.send_times.append(time.monotonic())
            limited, fake.rate_limit_sends_s = fake.rate_limit_sends_s, 0
            refused = fake.refuse_sends > 0
            fake.refuse_sends -= 1 if refused else 0
        if limited:
            return self._send(
                429,
                {
                    "result": "error",
                    "msg": "API usage exceeded rate limit",
                    "code": "RATE_LIMIT_HIT",
                    "retry-after": float(limited),
                },
                {"Retry-After": str(limited), "X-RateLimit-Remaining": "0"},
            )
        if refused:
            return self._error(400, "BAD_REQUEST", "Not authorized to send to stream")
        kind = "stream" if params["type"] == "stream" else "private"
        if kind == "stream":
            message_id = fake._message(
                BOT, "stream", params["content"], topic=params["topic"], mentioned=False
            )
            record = {"type": "stream", "to": int(params["to"]), "topic": params["topic"]}
        else:
            to = json.loads(params["to"])
            people = [
                ALICE if p == ALICE["id"] else {"id": p, "email": "", "full_name": ""} for p in to
            ]
            message_id = fake._message(
                BOT, "private", params["content"], mentioned=False, recipients=[*people, BOT]
            )
            record = {"type": "direct", "to": to}
        with fake.lock:
            fake.sent.append({**record, "id": message_id, "content": params["content"]})
            fail = fake.fail_after_send > 0
            fake.fail_after_send -= 1 if fail else 0
        if fail:
            return self._error(500, "INTERNAL_SERVER_ERROR", "Internal server error")
        return self._ok(id=message_id)
