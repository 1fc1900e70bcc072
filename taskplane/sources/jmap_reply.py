"""The mail account the JMAP email source acts on, and its replies.

:func:`connect` finds the account's role mailboxes (``Mailbox/get``) and its sending
identity (``Identity/get``). A reply (:func:`reply_email`) is created in Drafts with
the header ``X-AI-Outfitter-Delivery-ID`` and sent by ``EmailSubmission/set`` in the
same request (:func:`submit`), which moves it to Sent; :func:`find_replies` finds the
emails carrying a delivery ID again with ``Email/query`` (recovery ``lookup``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from taskplane.sources.jmap_api import (
    JmapApi,
    JmapRejected,
    MethodCall,
    Session,
    method_error,
)

DELIVERY_HEADER = "X-AI-Outfitter-Delivery-ID"


@attrs.frozen
class Mailboxes:
    """The role mailboxes' IDs (``inbox`` required)."""

    inbox: str
    drafts: str | None = None
    sent: str | None = None


@attrs.frozen
class Identity:
    """The sending identity (``Identity/get``)."""

    id: str
    email: str
    name: str = ""


@attrs.frozen
class Connection:
    """A connected account: the API, its session, role mailboxes and identity."""

    api: JmapApi
    session: Session
    mailboxes: Mailboxes
    identity: Identity


def reply_email(
    identity: Identity,
    mailboxes: Mailboxes,
    locator: Mapping[str, str],
    text: str,
    delivery_id: str,
) -> dict[str, Any]:
    """The ``Email/set`` create object of the reply to ``locator``'s message: to its
    sender, ``Re:`` its subject, threaded (``In-Reply-To``, ``References``), in
    Drafts with ``$draft``, carrying the delivery ID header."""
    subject = locator.get("subject", "")
    if not subject.lower().startswith("re:"):
        subject = f"Re: {subject}".rstrip()
    parent = locator.get("messageId")
    references = locator.get("references", "").split()
    email: dict[str, Any] = {
        "mailboxIds": {mailboxes.drafts or mailboxes.inbox: True},
        "keywords": {"$draft": True, "$seen": True},
        "from": [{"name": identity.name, "email": identity.email}],
        "to": [{"email": locator["replyTo"]}],
        "subject": subject,
        f"header:{DELIVERY_HEADER}:asText": delivery_id,
        "bodyValues": {"body": {"value": text}},
        "textBody": [{"partId": "body", "type": "text/plain"}],
    }
    if parent:
        email["inReplyTo"] = [parent]
        email["references"] = [*references, parent]
    return email


async def find_replies(api: JmapApi, session: Session, delivery_id: str) -> list[tuple[str, bool]]:
    """Every email carrying ``delivery_id`` in the delivery header: ``(email ID,
    is a draft)``, by ``Email/query`` then ``Email/get`` of their keywords."""
    account = session.account_id
    calls: list[MethodCall] = [
        (
            "Email/query",
            {"accountId": account, "filter": {"header": [DELIVERY_HEADER, delivery_id]}},
            "q",
        ),
        (
            "Email/get",
            {
                "accountId": account,
                "#ids": {"resultOf": "q", "name": "Email/query", "path": "/ids"},
                "properties": ["id", "keywords"],
            },
            "g",
        ),
    ]
    answers = await api.call(session, calls)
    found = []
    for email in answers["g"].get("list", ()):
        keywords = email.get("keywords") if isinstance(email.get("keywords"), dict) else {}
        found.append((str(email["id"]), bool(keywords and keywords.get("$draft"))))
    return found


async def submit(conn: Connection, email: Mapping[str, Any], draft_id: str | None) -> str:
    """Create the reply (unless ``draft_id`` names one left by a failed submission)
    and submit it in the same request; returns the email ID.

    Raises:
        JmapRejected: the draft or the submission was refused (``notCreated``).
        JmapUnavailable: the outcome is unknown.
    """
    account = conn.session.account_id
    calls: list[MethodCall] = []
    if draft_id is None:
        calls.append(("Email/set", {"accountId": account, "create": {"reply": email}}, "e"))
    update: dict[str, Any] = {"keywords/$draft": None}
    boxes = conn.mailboxes
    if boxes.sent is not None and boxes.drafts is not None:
        update |= {f"mailboxIds/{boxes.drafts}": None, f"mailboxIds/{boxes.sent}": True}
    submission = {
        "accountId": account,
        "create": {"send": {"identityId": conn.identity.id, "emailId": draft_id or "#reply"}},
        "onSuccessUpdateEmail": {"#send": update},
    }
    calls.append(("EmailSubmission/set", submission, "s"))
    answers: dict[str, dict[str, Any]] = {}
    for name, arguments, call_id in await conn.api.call_raw(conn.session, calls):
        if name == "error":
            raise method_error(name, arguments)
        answers.setdefault(call_id, arguments)  # then the implicit Email/set of "s"
    if draft_id is None:
        created = (answers.get("e", {}).get("created") or {}).get("reply")
        if not isinstance(created, dict) or not isinstance(created.get("id"), str):
            refusal = (answers.get("e", {}).get("notCreated") or {}).get("reply")
            raise JmapRejected(f"Email/set refused the reply: {refusal}")
        draft_id = str(created["id"])
    if not (answers.get("s", {}).get("created") or {}).get("send"):
        refusal = (answers.get("s", {}).get("notCreated") or {}).get("send")
        raise JmapRejected(f"EmailSubmission/set refused the reply: {refusal}")
    return draft_id


async def connect(api: JmapApi, session: Session) -> Connection:
    """Connect to ``session``'s mail account: its role mailboxes and sending identity.

    Raises:
        JmapRejected: no ``inbox`` mailbox or no identity (a start failure).
    """
    account = session.account_id
    answers = await api.call(
        session,
        [
            ("Mailbox/get", {"accountId": account, "properties": ["id", "role"]}, "b"),
            ("Identity/get", {"accountId": account}, "i"),
        ],
    )
    roles = {
        str(m.get("role")): str(m["id"]) for m in answers["b"].get("list", ()) if m.get("role")
    }
    if "inbox" not in roles:
        raise JmapRejected("the mail account has no inbox mailbox")
    identities = [i for i in answers["i"].get("list", ()) if isinstance(i, dict)]
    if not identities:
        raise JmapRejected("the mail account has no sending identity")
    user = session.username.lower()
    chosen = next((i for i in identities if str(i.get("email", "")).lower() == user), None)
    chosen = chosen or identities[0]
    identity = Identity(
        str(chosen["id"]), str(chosen.get("email", "")), str(chosen.get("name", ""))
    )
    return Connection(
        api, session, Mailboxes(roles["inbox"], roles.get("drafts"), roles.get("sent")), identity
    )
