"""A fake Forgejo (Gitea API v1) on 127.0.0.1 for the notifications source.

Endpoints, with Forgejo's body shapes: ``GET /api/v1/user``, ``GET
/api/v1/notifications`` (``status-types``, ``since``, ``page``/``limit``,
``X-Total-Count``), ``PATCH /api/v1/notifications/threads/{id}?to-status=read``
(``205`` with the thread, ``404`` for an unknown one), ``GET
/api/v1/repos/{o}/{r}/issues/comments/{id}``, and ``GET``/``POST
/api/v1/repos/{o}/{r}/issues/{n}/comments``. Errors are ``{"message", "url"}``. The
forge's clock runs in its own time zone (``+08:00``), as a Forgejo server's does.
Faults: refused, rate-limited (``429``) or dropped comment posts, failing mark-reads,
a rate-limited notifications poll.
"""

from __future__ import annotations

import json
import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.e2e.fake_http import JsonHandler, LoopbackServer

TOKEN = "forgejo-test-token"
ACCOUNT = {"id": 7, "login": "taskbot", "full_name": "Task Bot", "email": "taskbot@forge.test"}
FORGE_ZONE = timezone(timedelta(hours=8))


class FakeForgejo:
    """Start with :meth:`start`; ``url`` is for ``FORGEJO_URL``."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.threads: dict[int, dict[str, Any]] = {}
        self.comments: dict[str, list[dict[str, Any]]] = {}
        self.comment_bodies: dict[int, dict[str, Any]] = {}
        self.requests: list[tuple[float, str, str]] = []
        self.sinces: list[str | None] = []
        self.clock = datetime.now(FORGE_ZONE).replace(microsecond=0)
        self.next_id = 500
        self.refuse_posts = 0
        self.drop_posts = 0
        self.rate_limit_posts_s = 0
        self.rate_limit_polls_s = 0
        self.fail_patches = False
        handler = type("Handler", (_Handler,), {"fake": self})
        self.http = LoopbackServer(handler)
        self.url = self.http.url

    def start(self) -> FakeForgejo:
        self.http.start()
        return self

    def close(self) -> None:
        self.http.close()

    # ---- test controls -------------------------------------------------------------

    def notify(
        self, thread_id: int, repo: str, kind: str, number: int, *, comment: str | None = None
    ) -> str:
        """An unread notification thread (a new revision if it exists); returns its
        ``updated_at``."""
        with self.lock:
            self.clock += timedelta(seconds=1)
            updated = self.clock.isoformat()
            api = f"{self.url}/api/v1/repos/{repo}"
            segment = "pulls" if kind == "Pull" else "issues"
            latest = None
            if comment is not None:
                self.next_id += 1
                self.comment_bodies[self.next_id] = _comment(self.next_id, comment, "alice")
                latest = f"{api}/issues/comments/{self.next_id}"
            owner, name = repo.split("/")
            self.threads[thread_id] = {
                "id": thread_id,
                "repository": {
                    "id": 3,
                    "owner": {"id": 2, "login": owner, "username": owner},
                    "name": name,
                    "full_name": repo,
                    "private": False,
                    "html_url": f"{self.url}/{repo}",
                },
                "subject": {
                    "title": f"Subject {number}",
                    "url": f"{api}/{segment}/{number}",
                    "latest_comment_url": latest,
                    "html_url": f"{self.url}/{repo}/{segment}/{number}",
                    "latest_comment_html_url": None,
                    "type": kind,
                    "state": "open",
                },
                "unread": True,
                "pinned": False,
                "updated_at": updated,
                "url": f"{self.url}/api/v1/notifications/threads/{thread_id}",
            }
            return updated

    def comments_on(self, repo: str, number: int) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.comments.get(f"{repo}#{number}", []))

    def calls(self, method: str, prefix: str) -> list[float]:
        with self.lock:
            return [t for t, m, p in self.requests if m == method and p.startswith(prefix)]

    def unread(self) -> list[int]:
        with self.lock:
            return [i for i, t in self.threads.items() if t["unread"]]


def _comment(cid: int, body: str, login: str) -> dict[str, Any]:
    now = datetime.now(FORGE_ZONE).replace(microsecond=0).isoformat()
    user_id = ACCOUNT["id"] if login == ACCOUNT["login"] else 9
    return {
        "id": cid,
        "html_url": f"https://forge.test/comment/{cid}",
        "user": {"id": user_id, "login": login, "username": login},
        "body": body,
        "created_at": now,
        "updated_at": now,
    }


class _Handler(JsonHandler):
    fake: FakeForgejo

    def content_type(self, status: int) -> str:
        return "application/json;charset=utf-8"

    def _error(self, status: int, message: str, **headers: str) -> None:
        self._send(status, {"message": message, "url": f"{self.fake.url}/api/swagger"}, headers)

    def _route(self, method: str) -> None:
        fake = self.fake
        url = urlsplit(self.path)
        path, query = url.path, {k: v[0] for k, v in parse_qs(url.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        payload = json.loads(self.rfile.read(length)) if length else None
        with fake.lock:
            fake.requests.append((time.monotonic(), method, path))
        if self.headers.get("Authorization") != f"token {TOKEN}":
            return self._error(401, "token is required")
        if path == "/api/v1/user" and method == "GET":
            return self._send(200, {**ACCOUNT, "is_admin": False, "language": "en-US"})
        if path == "/api/v1/notifications" and method == "GET":
            return self._notifications(query)
        if path.startswith("/api/v1/notifications/threads/") and method == "PATCH":
            return self._mark_read(int(path.rsplit("/", 1)[1]), query)
        parts = path.removeprefix("/api/v1/").split("/")
        if len(parts) == 5 and parts[0] == "repos" and parts[3:5] == ["issues", "comments"]:
            return self._error(404, "not found")  # the list of all comments: unused
        if len(parts) == 6 and parts[0] == "repos" and parts[3:5] == ["issues", "comments"]:
            with fake.lock:
                comment = fake.comment_bodies.get(int(parts[5]))
            return self._send(200, comment) if comment else self._error(404, "comment not found")
        if (
            len(parts) == 6
            and parts[0] == "repos"
            and parts[3] == "issues"
            and parts[5] == "comments"
        ):
            key = f"{parts[1]}/{parts[2]}#{int(parts[4])}"
            if method == "POST":
                return self._post_comment(key, payload)
            return self._list_comments(key, query)
        return self._error(404, "not found")

    def _notifications(self, query: dict[str, str]) -> None:
        fake = self.fake
        with fake.lock:
            fake.sinces.append(query.get("since"))
            limited, fake.rate_limit_polls_s = fake.rate_limit_polls_s, 0
            since = query.get("since")
            cutoff = datetime.fromisoformat(since.replace("Z", "+00:00")) if since else None
            threads = sorted(
                (
                    t
                    for t in fake.threads.values()
                    if t["unread"]
                    and (cutoff is None or datetime.fromisoformat(t["updated_at"]) > cutoff)
                ),
                key=lambda t: t["updated_at"],
                reverse=True,
            )
        if limited:
            return self._error(429, "rate limit exceeded", **{"Retry-After": str(limited)})
        limit, page = int(query.get("limit", "50")), int(query.get("page", "1"))
        chunk = threads[(page - 1) * limit : page * limit]
        return self._send(200, chunk, {"X-Total-Count": str(len(threads))})

    def _mark_read(self, thread_id: int, query: dict[str, str]) -> None:
        fake = self.fake
        if fake.fail_patches:
            return self._error(500, "internal server error")
        with fake.lock:
            thread = fake.threads.get(thread_id)
            if thread is not None and query.get("to-status") == "read":
                thread["unread"] = False
        if thread is None:
            return self._error(404, "notification thread not found")
        return self._send(205, thread)

    def _post_comment(self, key: str, payload: Any) -> None:
        fake = self.fake
        with fake.lock:
            limited, fake.rate_limit_posts_s = fake.rate_limit_posts_s, 0
            refused = fake.refuse_posts > 0
            fake.refuse_posts -= 1 if refused else 0
        if limited:
            return self._error(429, "rate limit exceeded", **{"Retry-After": str(limited)})
        if refused:
            return self._error(403, "user does not have permission to comment")
        with fake.lock:
            fake.next_id += 1
            comment = _comment(fake.next_id, payload["body"], ACCOUNT["login"])
            fake.comments.setdefault(key, []).append(comment)
            drop = fake.drop_posts > 0
            fake.drop_posts -= 1 if drop else 0
        if drop:  # created, the caller never hears about it
            self.close_connection = True
            self.connection.shutdown(2)
            return None
        return self._send(201, comment)

    def _list_comments(self, key: str, query: dict[str, str]) -> None:
        limit, page = int(query.get("limit", "50")), int(query.get("page", "1"))
        with self.fake.lock:
            every = list(self.fake.comments.get(key, []))
        return self._send(200, every[(page - 1) * limit : page * limit])

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    def do_PATCH(self) -> None:
        self._route("PATCH")
