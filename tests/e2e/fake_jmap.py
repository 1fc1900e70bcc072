"""A fake JMAP mail server on 127.0.0.1 (RFC 8620 core, RFC 8621 mail and submission).

:class:`MailModel` is the server's state and method semantics, without transport (the
unit tests drive it through ``httpx.MockTransport``); :class:`FakeJmap` serves it over
HTTP: ``GET /.well-known/jmap`` (the session object, HTTP Basic or bearer auth, ``401``
otherwise), ``POST /api/`` (``methodCalls`` -> ``methodResponses``, result references
``#ids``, method errors as ``["error", {"type": ...}, callId]``), and the push
EventSource ``GET /eventsource/?types=&closeafter=&ping=`` (``text/event-stream``,
``event: state`` with a ``StateChange`` object, ``event: ping``).

Methods: ``Mailbox/get``, ``Identity/get``, ``Email/get`` (``requestTooLarge`` over
``maxObjectsInGet``, ``header:<name>:asText`` properties, ``bodyValues`` truncated at
``maxBodyValueBytes``), ``Email/changes`` (``maxChanges``, ``hasMoreChanges``,
``cannotCalculateChanges`` for a forgotten state), ``Email/query`` (``inMailbox``,
``header``, ``notKeyword``, ``AND``), ``Email/set`` (create), ``EmailSubmission/set``
(create, ``onSuccessUpdateEmail`` with its implicit ``Email/set`` response).
Faults armed per test: a ``429`` with ``Retry-After``, refused submissions
(``notCreated``), a submission whose connection drops after it was sent, an
``Email/get`` held until released, dropped EventSource streams.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from typing import Any
from urllib.parse import urlsplit

import attrs

from tests.e2e.fake_http import JsonHandler, LoopbackServer

ACCOUNT = "A13824"
USERNAME, PASSWORD, TOKEN = "bot@example.com", "correct horse", "jmap-test-token"
INBOX, DRAFTS, SENT, ARCHIVE = "mb-inbox", "mb-drafts", "mb-sent", "mb-archive"
IDENTITY = {"id": "id-bot", "name": "Task Bot", "email": USERNAME, "replyTo": None}
MAILBOXES = [
    {"id": INBOX, "name": "Inbox", "role": "inbox", "parentId": None},
    {"id": DRAFTS, "name": "Drafts", "role": "drafts", "parentId": None},
    {"id": SENT, "name": "Sent", "role": "sent", "parentId": None},
    {"id": ARCHIVE, "name": "Archive", "role": "archive", "parentId": None},
]


class MethodError(Exception):
    def __init__(self, kind: str, description: str = "") -> None:
        super().__init__(kind)
        self.kind, self.description = kind, description


@attrs.define
class MailModel:
    """The account's mail and the methods' semantics (thread-safe)."""

    max_objects_in_get: int = 2
    emails: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    headers: dict[str, dict[str, str]] = attrs.field(factory=dict)  # email ID -> headers
    log: list[tuple[int, str, str]] = attrs.field(factory=list)  # (state, kind, email ID)
    state: int = 1
    forgotten_below: int = 0
    submissions: list[dict[str, Any]] = attrs.field(factory=list)
    calls: list[tuple[str, dict[str, Any]]] = attrs.field(factory=list)
    refuse_submissions: int = 0
    next_id: int = 0
    lock: threading.RLock = attrs.field(factory=threading.RLock)
    changed: threading.Condition = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.changed = threading.Condition(self.lock)

    # ---- test controls -------------------------------------------------------------

    def deliver(
        self,
        subject: str,
        body: str,
        *,
        sender: str = "alice@example.org",
        mailbox: str = INBOX,
        message_id: str | None = None,
    ) -> str:
        """A message arrives in ``mailbox``; returns its email ID."""
        with self.lock:
            email_id = self._new_id("M")
            self.emails[email_id] = {
                "id": email_id,
                "blobId": f"B{email_id}",
                "threadId": f"T{email_id}",
                "mailboxIds": {mailbox: True},
                "keywords": {},
                "from": [{"name": "Alice", "email": sender}],
                "to": [{"name": None, "email": USERNAME}],
                "replyTo": None,
                "subject": subject,
                "receivedAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "messageId": [message_id or f"{email_id}@example.org"],
                "references": None,
                "inReplyTo": None,
                "textBody": [{"partId": "1", "type": "text/plain"}],
                "bodyValues": {"1": {"value": body, "isEncodingProblem": False}},
            }
            self._bump("created", email_id)
            return email_id

    def move(self, email_id: str, mailbox: str) -> None:
        with self.lock:
            self.emails[email_id]["mailboxIds"] = {mailbox: True}
            self._bump("updated", email_id)

    def forget_changes(self) -> None:
        """States before now can no longer be calculated from."""
        with self.lock:
            self.forgotten_below = self.state

    def sent(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.submissions)

    def method_calls(self, name: str) -> list[dict[str, Any]]:
        with self.lock:
            return [args for n, args in self.calls if n == name]

    # ---- the API -----------------------------------------------------------------

    def session(self, base: str) -> dict[str, Any]:
        mail_caps = {
            "maxMailboxesPerEmail": None,
            "maxMailboxDepth": 10,
            "maxSizeMailboxName": 490,
            "maxSizeAttachmentsPerEmail": 50_000_000,
            "emailQuerySortOptions": ["receivedAt", "from", "to", "subject", "size"],
            "mayCreateTopLevelMailbox": True,
        }
        return {
            "capabilities": {
                "urn:ietf:params:jmap:core": {
                    "maxSizeUpload": 50_000_000,
                    "maxConcurrentUpload": 4,
                    "maxSizeRequest": 10_000_000,
                    "maxConcurrentRequests": 4,
                    "maxCallsInRequest": 16,
                    "maxObjectsInGet": self.max_objects_in_get,
                    "maxObjectsInSet": 500,
                    "collationAlgorithms": ["i;ascii-numeric", "i;ascii-casemap"],
                },
                "urn:ietf:params:jmap:mail": {},
                "urn:ietf:params:jmap:submission": {},
            },
            "accounts": {
                ACCOUNT: {
                    "name": USERNAME,
                    "isPersonal": True,
                    "isReadOnly": False,
                    "accountCapabilities": {
                        "urn:ietf:params:jmap:mail": mail_caps,
                        "urn:ietf:params:jmap:submission": {
                            "maxDelayedSend": 0,
                            "submissionExtensions": {},
                        },
                    },
                }
            },
            "primaryAccounts": {
                "urn:ietf:params:jmap:mail": ACCOUNT,
                "urn:ietf:params:jmap:submission": ACCOUNT,
            },
            "username": USERNAME,
            "apiUrl": f"{base}/api/",
            "downloadUrl": f"{base}/download/{{accountId}}/{{blobId}}/{{name}}?accept={{type}}",
            "uploadUrl": f"{base}/upload/{{accountId}}/",
            "eventSourceUrl": f"{base}/eventsource/?types={{types}}&closeafter={{closeafter}}"
            "&ping={ping}",
            "state": "s1",
        }

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        """One JMAP request object -> the response object."""
        responses: list[list[Any]] = []
        created_ids: dict[str, str] = {}
        with self.lock:
            for name, arguments, call_id in request["methodCalls"]:
                self.calls.append((name, arguments))
                try:
                    arguments = self._resolve(arguments, responses)
                    for answer in self._method(name, arguments, created_ids):
                        responses.append([answer[0], answer[1], call_id])
                except MethodError as exc:
                    error = {"type": exc.kind}
                    if exc.description:
                        error["description"] = exc.description
                    responses.append(["error", error, call_id])
        return {"methodResponses": responses, "sessionState": "s1"}

    def _resolve(self, arguments: dict[str, Any], responses: list[list[Any]]) -> dict[str, Any]:
        out = dict(arguments)
        for key in [k for k in arguments if k.startswith("#")]:
            ref = arguments[key]
            source = next((r for r in responses if r[2] == ref["resultOf"]), None)
            if source is None or source[0] != ref["name"] or ref["path"] != "/ids":
                raise MethodError("invalidResultReference")
            out[key[1:]] = source[1]["ids"]
            del out[key]
        return out

    def _method(
        self, name: str, args: dict[str, Any], created_ids: dict[str, str]
    ) -> list[tuple[str, dict[str, Any]]]:
        if args.get("accountId") != ACCOUNT:
            raise MethodError("accountNotFound")
        if name == "Mailbox/get":
            return [(name, {"accountId": ACCOUNT, "state": "m1", "list": MAILBOXES})]
        if name == "Identity/get":
            return [(name, {"accountId": ACCOUNT, "state": "i1", "list": [IDENTITY]})]
        if name == "Email/get":
            return [(name, self._get(args))]
        if name == "Email/changes":
            return [(name, self._changes(args))]
        if name == "Email/query":
            return [(name, self._query(args))]
        if name == "Email/set":
            return [(name, self._set(args, created_ids))]
        if name == "EmailSubmission/set":
            return self._submit(args, created_ids)
        raise MethodError("unknownMethod")

    def _get(self, args: dict[str, Any]) -> dict[str, Any]:
        ids = args.get("ids")
        if ids is None:
            ids = list(self.emails)
        if len(ids) > self.max_objects_in_get:
            raise MethodError("requestTooLarge", f"at most {self.max_objects_in_get} ids")
        properties = args.get("properties")
        limit = args.get("maxBodyValueBytes") or 0
        found, missing = [], []
        for email_id in ids:
            email = self.emails.get(email_id)
            if email is None:
                missing.append(email_id)
                continue
            out: dict[str, Any] = {}
            for prop in properties or [*email, "bodyValues"]:
                if prop.startswith("header:"):
                    header = prop.split(":")[1]
                    out[prop] = self.headers.get(email_id, {}).get(header.lower())
                elif prop == "bodyValues":
                    if args.get("fetchTextBodyValues"):
                        out[prop] = {
                            k: _truncated(v, limit) for k, v in email["bodyValues"].items()
                        }
                    else:
                        out[prop] = {}
                else:
                    out[prop] = email.get(prop)
            out["id"] = email_id
            found.append(out)
        return {"accountId": ACCOUNT, "state": str(self.state), "list": found, "notFound": missing}

    def _changes(self, args: dict[str, Any]) -> dict[str, Any]:
        since = int(str(args["sinceState"]))
        if since < self.forgotten_below or since > self.state:
            raise MethodError("cannotCalculateChanges")
        pending = [e for e in self.log if e[0] > since]
        limit = int(args.get("maxChanges") or 256)
        taken, rest = pending[:limit], pending[limit:]
        new_state = taken[-1][0] if taken and rest else self.state
        created = [i for _, k, i in taken if k == "created"]
        updated = [i for _, k, i in taken if k == "updated" and i not in created]
        destroyed = [i for _, k, i in taken if k == "destroyed"]
        return {
            "accountId": ACCOUNT,
            "oldState": str(since),
            "newState": str(new_state),
            "hasMoreChanges": bool(rest),
            "created": list(dict.fromkeys(created)),
            "updated": list(dict.fromkeys(updated)),
            "destroyed": destroyed,
        }

    def _query(self, args: dict[str, Any]) -> dict[str, Any]:
        matches = [e for e in self.emails.values() if self._matches(e, args.get("filter") or {})]
        if args.get("sort"):
            matches.sort(key=lambda e: (e["receivedAt"], e["id"]), reverse=True)
        limit = args.get("limit")
        ids = [e["id"] for e in matches][: limit if limit is not None else None]
        return {
            "accountId": ACCOUNT,
            "queryState": str(self.state),
            "canCalculateChanges": False,
            "position": 0,
            "ids": ids,
            "total": len(matches),
        }

    def _matches(self, email: dict[str, Any], condition: dict[str, Any]) -> bool:
        if condition.get("operator") == "AND":
            return all(self._matches(email, c) for c in condition["conditions"])
        if "inMailbox" in condition and not email["mailboxIds"].get(condition["inMailbox"]):
            return False
        if "notKeyword" in condition and email["keywords"].get(condition["notKeyword"]):
            return False
        if "header" in condition:
            name, value = condition["header"]
            if self.headers.get(email["id"], {}).get(name.lower()) != value:
                return False
        return True

    def _set(self, args: dict[str, Any], created_ids: dict[str, str]) -> dict[str, Any]:
        created: dict[str, Any] = {}
        for key, spec in (args.get("create") or {}).items():
            email_id = self._new_id("D")
            headers = {
                p.split(":")[1].lower(): v for p, v in spec.items() if p.startswith("header:")
            }
            parent = next(
                (
                    e
                    for e in self.emails.values()
                    if e["messageId"][0] in (spec.get("inReplyTo") or [])
                ),
                None,
            )
            thread = parent["threadId"] if parent else f"T{email_id}"
            values = spec.get("bodyValues") or {}
            self.emails[email_id] = {
                "id": email_id,
                "blobId": f"B{email_id}",
                "threadId": thread,
                "mailboxIds": dict(spec.get("mailboxIds") or {}),
                "keywords": dict(spec.get("keywords") or {}),
                "from": spec.get("from"),
                "to": spec.get("to"),
                "replyTo": None,
                "subject": spec.get("subject"),
                "receivedAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "messageId": [f"{email_id}@example.com"],
                "references": spec.get("references"),
                "inReplyTo": spec.get("inReplyTo"),
                "textBody": spec.get("textBody"),
                "bodyValues": {k: {"value": v["value"]} for k, v in values.items()},
            }
            self.headers[email_id] = headers
            self._bump("created", email_id)
            created_ids[key] = email_id
            created[key] = {"id": email_id, "blobId": f"B{email_id}", "threadId": thread}
        return {
            "accountId": ACCOUNT,
            "oldState": str(self.state - len(created)),
            "newState": str(self.state),
            "created": created,
            "notCreated": {},
        }

    def _submit(
        self, args: dict[str, Any], created_ids: dict[str, str]
    ) -> list[tuple[str, dict[str, Any]]]:
        created: dict[str, Any] = {}
        not_created: dict[str, Any] = {}
        updated: dict[str, Any] = {}
        for key, spec in (args.get("create") or {}).items():
            email_id = spec["emailId"]
            if email_id.startswith("#"):
                email_id = created_ids.get(email_id[1:], email_id)
            email = self.emails.get(email_id)
            if email is None or spec.get("identityId") != IDENTITY["id"]:
                not_created[key] = {"type": "invalidProperties", "properties": ["emailId"]}
                continue
            if self.refuse_submissions > 0:
                self.refuse_submissions -= 1
                not_created[key] = {
                    "type": "forbiddenToSend",
                    "description": "sending is paused for this account",
                }
                continue
            self.submissions.append(
                {
                    "emailId": email_id,
                    "to": email["to"],
                    "subject": email["subject"],
                    "inReplyTo": email["inReplyTo"],
                    "text": "".join(v["value"] for v in email["bodyValues"].values()),
                    "deliveryId": self.headers.get(email_id, {}).get("x-ai-outfitter-delivery-id"),
                }
            )
            created[key] = {"id": f"S{len(self.submissions)}", "undoStatus": "final"}
            patch = (args.get("onSuccessUpdateEmail") or {}).get(f"#{key}")
            if patch:
                for path, value in patch.items():
                    field, name = path.split("/", 1)
                    if value is None:
                        email[field].pop(name, None)
                    else:
                        email[field][name] = value
                self._bump("updated", email_id)
                updated[email_id] = None
        answers: list[tuple[str, dict[str, Any]]] = [
            (
                "EmailSubmission/set",
                {"accountId": ACCOUNT, "created": created, "notCreated": not_created},
            )
        ]
        if updated:
            answers.append(("Email/set", {"accountId": ACCOUNT, "updated": updated}))
        return answers

    def _new_id(self, prefix: str) -> str:
        self.next_id += 1
        return f"{prefix}{self.next_id:04d}"

    def _bump(self, kind: str, email_id: str) -> None:
        self.state += 1
        self.log.append((self.state, kind, email_id))
        self.changed.notify_all()


def _truncated(value: dict[str, Any], limit: int) -> dict[str, Any]:
    text = str(value["value"])
    if limit and len(text.encode()) > limit:
        return {
            **value,
            "value": text.encode()[:limit].decode(errors="ignore"),
            "isTruncated": True,
        }
    return {**value, "isTruncated": False}


def authorized(header: str | None) -> bool:
    """HTTP Basic with the account's password, or the bearer token."""
    basic = "Basic " + base64.b64encode(f"{USERNAME}:{PASSWORD}".encode()).decode()
    return header in (basic, f"Bearer {TOKEN}")


@attrs.define
class Faults:
    rate_limit_s: int = 0  # the next API request answers 429 with this Retry-After
    limited_at: float = 0.0  # when it did
    drop_submissions: int = 0  # perform the submission, then drop the connection
    hold: set[str] = attrs.field(factory=set)  # content Email/get of these waits for release
    released: threading.Event = attrs.field(factory=threading.Event)
    stream_generation: int = 0  # bumping it ends every open EventSource stream
    streams_opened: int = 0
    api_times: list[float] = attrs.field(factory=list)


class FakeJmap:
    """Start with :meth:`start`; ``session_url`` is for ``JMAP_SESSION_URL``."""

    def __init__(self, model: MailModel | None = None) -> None:
        self.model = model or MailModel()
        self.faults = Faults()
        handler = type("Handler", (_Handler,), {"fake": self})
        self.http = LoopbackServer(handler)
        self.url = self.http.url
        self.session_url = f"{self.url}/.well-known/jmap"
        self.closed = False

    def start(self) -> FakeJmap:
        self.http.start()
        return self

    def close(self) -> None:
        self.closed = True
        self.drop_streams()
        self.faults.released.set()
        self.http.close()

    def drop_streams(self) -> None:
        with self.model.lock:
            self.faults.stream_generation += 1
            self.model.changed.notify_all()


class _Handler(JsonHandler):
    fake: FakeJmap

    def content_type(self, status: int) -> str:
        return "application/problem+json" if status >= 400 else "application/json"

    def _problem(self, status: int, kind: str, detail: str, **headers: str) -> None:
        self._send(status, {"type": kind, "status": status, "detail": detail}, headers)

    def _authorized(self) -> bool:
        if authorized(self.headers.get("Authorization")):
            return True
        self._problem(
            401,
            "about:blank",
            "authentication required",
            **{"WWW-Authenticate": 'Basic realm="jmap"'},
        )
        return False

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        if not self._authorized():
            return None
        if path == "/.well-known/jmap":
            return self._send(200, self.fake.model.session(self.fake.url))
        if path == "/eventsource/":
            return self._event_source()
        return self._problem(404, "about:blank", "not found")

    def do_POST(self) -> None:
        fake, faults = self.fake, self.fake.faults
        length = int(self.headers.get("Content-Length") or 0)
        request = json.loads(self.rfile.read(length)) if length else {}
        if not self._authorized():
            return None
        if urlsplit(self.path).path != "/api/":
            return self._problem(404, "about:blank", "not found")
        with fake.model.lock:
            faults.api_times.append(time.monotonic())
            limited, faults.rate_limit_s = faults.rate_limit_s, 0
        if limited:
            faults.limited_at = time.monotonic()
            return self._problem(
                429, "about:blank", "too many requests", **{"Retry-After": str(limited)}
            )
        if not isinstance(request.get("methodCalls"), list) or "using" not in request:
            return self._problem(400, "urn:ietf:params:jmap:error:notRequest", "not a request")
        held = {
            i
            for name, args, _ in request["methodCalls"]
            if name == "Email/get" and args.get("fetchTextBodyValues")
            for i in args.get("ids") or ()
        } & faults.hold
        if held:
            faults.released.wait(30)
        names = [name for name, _, _ in request["methodCalls"]]
        response = fake.model.handle(request)
        if "EmailSubmission/set" in names and faults.drop_submissions > 0:
            faults.drop_submissions -= 1
            self.close_connection = True
            self.connection.shutdown(2)  # sent, but the caller never hears about it
            return None
        return self._send(200, response)

    def _event_source(self) -> None:
        model, faults = self.fake.model, self.fake.faults
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        with model.lock:
            generation = faults.stream_generation
            faults.streams_opened += 1
            seen = model.state
        try:
            while not self.fake.closed:
                with model.lock:
                    model.changed.wait(timeout=1.0)
                    if faults.stream_generation != generation:
                        return None
                    state, changed = model.state, model.state != seen
                    seen = state
                if changed:
                    change = {"@type": "StateChange", "changed": {ACCOUNT: {"Email": str(state)}}}
                    frame = f"event: state\nid: {state}\ndata: {json.dumps(change)}\n\n"
                else:
                    frame = 'event: ping\ndata: {"interval": 1}\n\n'
                self.wfile.write(frame.encode())
                self.wfile.flush()
        except OSError:
            return None
        return None
