"""A fake GitHub REST API on 127.0.0.1 for the notifications source.

It speaks the wire format the source uses, with bodies shaped like GitHub's
documented responses: ``GET /user``, ``GET /notifications`` (unread threads,
``Last-Modified`` / ``If-Modified-Since`` -> ``304``, ``X-Poll-Interval``),
``PATCH /notifications/threads/{id}`` (``205``), ``GET /repos/{o}/{r}/issues/comments/{id}``,
and ``GET``/``POST /repos/{o}/{r}/issues/{n}/comments`` (paginated with ``Link``).
Faults are armed per test: a refused POST, a POST whose connection drops after the
comment was created, a rate limit, failing PATCHes.
"""

from __future__ import annotations

import json
import threading
import time
from email.utils import formatdate
from typing import Any
from urllib.parse import parse_qs, urlsplit

import attrs

from tests.e2e.fake_http import JsonHandler, LoopbackServer

ACCOUNT = {"login": "taskplane-bot", "id": 4242, "node_id": "U_kgDOAAAQkg", "type": "User"}


@attrs.define
class State:
    base: str = ""
    token: str = "gh-test-token"
    threads: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    comments: dict[str, list[dict[str, Any]]] = attrs.field(factory=dict)
    comment_bodies: dict[int, dict[str, Any]] = attrs.field(factory=dict)
    last_modified: float = attrs.field(factory=time.time)
    next_id: int = 1000
    requests: list[tuple[float, str, str]] = attrs.field(factory=list)
    conditional: list[str | None] = attrs.field(factory=list)  # If-Modified-Since per poll
    poll_interval_s: int = 1
    refuse_posts: int = 0
    rate_limit_posts_s: int = 0
    drop_posts: int = 0
    fail_patches: bool = False
    rate_limit_for_s: float = 0.0
    lock: threading.Lock = attrs.field(factory=threading.Lock)


class FakeGitHub:
    """Start with :meth:`start`; ``url`` is the API base for ``GITHUB_API_URL``."""

    def __init__(self, token: str = "gh-test-token") -> None:
        self.state = State(token=token)
        handler = type("Handler", (_Handler,), {"state": self.state})
        self.http = LoopbackServer(handler)
        self.url = self.http.url
        self.state.base = self.url

    def start(self) -> FakeGitHub:
        self.http.start()
        return self

    def close(self) -> None:
        self.http.close()

    def notify(
        self, thread_id: str, repo: str, kind: str, number: int, *, comment: str | None = None
    ) -> None:
        """An unread notification thread (a new revision if it exists)."""
        s = self.state
        with s.lock:
            s.last_modified = max(time.time(), s.last_modified + 1)
            updated = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(s.last_modified))
            owner = repo.split("/")[0]
            segment = "pulls" if kind == "PullRequest" else "issues"
            latest = None
            if comment is not None:
                s.next_id += 1
                s.comment_bodies[s.next_id] = _comment(s, s.next_id, repo, number, comment, "alice")
                latest = f"{s.base}/repos/{repo}/issues/comments/{s.next_id}"
            s.threads[thread_id] = {
                "id": thread_id,
                "repository": {
                    "id": 1296269,
                    "node_id": "MDEwOlJlcG9zaXRvcnkxMjk2MjY5",
                    "name": repo.split("/")[1],
                    "full_name": repo,
                    "owner": {"login": owner, "id": 1, "type": "Organization"},
                    "private": False,
                    "html_url": f"https://github.com/{repo}",
                },
                "subject": {
                    "title": f"Subject {number}",
                    "url": f"{s.base}/repos/{repo}/{segment}/{number}",
                    "latest_comment_url": latest,
                    "type": kind,
                },
                "reason": "mention",
                "unread": True,
                "updated_at": updated,
                "last_read_at": None,
                "url": f"{s.base}/notifications/threads/{thread_id}",
                "subscription_url": f"{s.base}/notifications/threads/{thread_id}/subscription",
            }

    def comments_on(self, repo: str, number: int) -> list[dict[str, Any]]:
        with self.state.lock:
            return list(self.state.comments.get(f"{repo}#{number}", []))

    def requests(self, method: str, prefix: str) -> list[float]:
        with self.state.lock:
            return [t for t, m, p in self.state.requests if m == method and p.startswith(prefix)]


def _comment(s: State, cid: int, repo: str, number: int, body: str, login: str) -> dict[str, Any]:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {
        "id": cid,
        "node_id": f"IC_{cid}",
        "url": f"{s.base}/repos/{repo}/issues/comments/{cid}",
        "html_url": f"https://github.com/{repo}/issues/{number}#issuecomment-{cid}",
        "body": body,
        "user": {"login": login, "id": 4242 if login == ACCOUNT["login"] else 7, "type": "User"},
        "created_at": now,
        "updated_at": now,
        "issue_url": f"{s.base}/repos/{repo}/issues/{number}",
        "author_association": "NONE",
    }


class _Handler(JsonHandler):
    state: State

    def content_type(self, status: int) -> str:
        return "application/json; charset=utf-8"

    def _route(self, method: str) -> None:
        s = self.state
        url = urlsplit(self.path)
        path, query = url.path, parse_qs(url.query)
        length = int(self.headers.get("Content-Length") or 0)
        payload = json.loads(self.rfile.read(length)) if length else None
        with s.lock:
            s.requests.append((time.monotonic(), method, path))
        if self.headers.get("Authorization") != f"Bearer {s.token}":
            return self._send(401, {"message": "Bad credentials"})
        if path == "/user" and method == "GET":
            return self._send(200, ACCOUNT)
        if path == "/notifications" and method == "GET":
            return self._notifications(query)
        if path.startswith("/notifications/threads/") and method == "PATCH":
            if s.fail_patches:
                return self._send(500, {"message": "Server Error"})
            with s.lock:
                s.threads.pop(path.rsplit("/", 1)[1], None)
                s.last_modified = max(time.time(), s.last_modified + 1)
            return self._send(205)
        parts = path.strip("/").split("/")
        if len(parts) == 6 and parts[0] == "repos" and parts[3:5] == ["issues", "comments"]:
            with s.lock:
                comment = s.comment_bodies.get(int(parts[5]))
            return (
                self._send(200, comment) if comment else self._send(404, {"message": "Not Found"})
            )
        if (
            len(parts) == 6
            and parts[0] == "repos"
            and parts[3] == "issues"
            and parts[5] == "comments"
        ):
            repo, number = f"{parts[1]}/{parts[2]}", int(parts[4])
            if method == "POST":
                return self._post_comment(repo, number, payload)
            return self._list_comments(repo, number, query)
        return self._send(404, {"message": "Not Found"})

    def _notifications(self, query: dict[str, list[str]]) -> None:
        s = self.state
        with s.lock:
            if s.rate_limit_for_s > 0:
                reset = int(time.time() + s.rate_limit_for_s)
                s.rate_limit_for_s = 0
                return self._send(
                    403,
                    {"message": "API rate limit exceeded"},
                    {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(reset)},
                )
            last_modified = formatdate(s.last_modified, usegmt=True)
            threads = [t for t in s.threads.values() if t["unread"]]
            s.conditional.append(self.headers.get("If-Modified-Since"))
        headers = {"Last-Modified": last_modified, "X-Poll-Interval": str(s.poll_interval_s)}
        if self.headers.get("If-Modified-Since") == last_modified:
            self.send_response(304)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None
        return self._send(200, threads, headers)

    def _post_comment(self, repo: str, number: int, payload: Any) -> None:
        s = self.state
        with s.lock:
            limited, s.rate_limit_posts_s = s.rate_limit_posts_s, 0
        if limited:
            return self._send(429, {"message": "slow down"}, {"Retry-After": str(limited)})
        with s.lock:
            if s.refuse_posts > 0:
                s.refuse_posts -= 1
                refused = True
            else:
                refused = False
                s.next_id += 1
                comment = _comment(s, s.next_id, repo, number, payload["body"], ACCOUNT["login"])
                s.comments.setdefault(f"{repo}#{number}", []).append(comment)
                drop = s.drop_posts > 0
                s.drop_posts -= 1 if drop else 0
        if refused:
            return self._send(422, {"message": "Validation Failed", "errors": []})
        if drop:  # the comment exists, the caller never hears about it
            self.close_connection = True
            self.connection.shutdown(2)
            return None
        return self._send(201, comment)

    def _list_comments(self, repo: str, number: int, query: dict[str, list[str]]) -> None:
        per_page = int(query.get("per_page", ["30"])[0])
        page = int(query.get("page", ["1"])[0])
        all_comments = self.comments_all(repo, number)
        chunk = all_comments[(page - 1) * per_page : page * per_page]
        headers = {}
        if page * per_page < len(all_comments):
            base = f"{self.state.base}/repos/{repo}/issues/{number}/comments"
            nxt = f"{base}?per_page={per_page}&page={page + 1}"
            headers["Link"] = f'<{nxt}>; rel="next"'
        return self._send(200, chunk, headers)

    def comments_all(self, repo: str, number: int) -> list[dict[str, Any]]:
        with self.state.lock:
            return list(self.state.comments.get(f"{repo}#{number}", []))

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    def do_PATCH(self) -> None:
        self._route("PATCH")
