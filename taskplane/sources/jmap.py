"""JMAP email (conformance matrix, "JMAP email" row; RFC 8620 and RFC 8621).

At start the session resource (``JMAP_SESSION_URL``, HTTP Basic with
``JMAP_USERNAME``/``JMAP_PASSWORD`` or a bearer ``JMAP_TOKEN``) names the primary mail
account, its ``maxObjectsInGet``, the API and the push EventSource; ``Mailbox/get``
finds the ``inbox``, ``drafts`` and ``sent`` roles and ``Identity/get`` the sending
identity. A failure there is a start failure.

Intake: ``Email/changes`` from the stored state, whenever the EventSource announces
a new ``Email`` state (and every ``poll_s`` seconds, and after every reconnect).
Created and updated IDs are read in ``maxObjectsInGet`` chunks (membership only);
a message now in the ``inbox`` mailbox, not a draft and not one of our own replies
is read alone (one bounded ``Email/get``) and accepted: identity account ID + email
ID, conversation thread ID. Others are counted as non-work in the checkpoint. The
checkpoint (account ID, ``Email`` state, counters) advances only after every ID of a
page was accepted or set aside. ``cannotCalculateChanges``: ``resync`` evidence, the
current state, and the newest ``RESYNC_LIMIT`` inbox IDs (``Email/query``) taken
again (duplicates are harmless). With no checkpoint the source starts at the current
state: mail already in the inbox is not work. There is no provider acknowledgement.

The result is a reply to the sender (``Reply-To``, else ``From``): ``Email/set``
creates it in Drafts with the header ``X-AI-Outfitter-Delivery-ID``, and
``EmailSubmission/set`` sends it, moving it to Sent. Recovery ``lookup``: an
``Email/query`` on that header, drafts excluded, finds a sent reply again; a draft
left by a failed submission is submitted again instead of a second one created.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import httpx
import trio

from taskplane.actors.native import Recovery
from taskplane.actors.outbound import ProviderRejected
from taskplane.backoff import backoff
from taskplane.errors import Refused, TaskplaneError
from taskplane.model.limits import MAX_MESSAGE_BYTES
from taskplane.model.types import Part
from taskplane.settings import JmapSettings
from taskplane.sources.base import Event, Result, Sender, SourceContext
from taskplane.sources.identity import MAX_NATIVE_VALUE, source_identifier
from taskplane.sources.jmap_api import (
    TIMEOUT_S,
    JmapApi,
    JmapMethodError,
    JmapRateLimited,
    JmapRejected,
    JmapUnavailable,
    auth_headers,
    chunks,
)
from taskplane.sources.jmap_reply import (
    DELIVERY_HEADER,
    Connection,
    connect,
    find_replies,
    reply_email,
    submit,
)
from taskplane.sources.rate_limit import held_poll_wait

log = logging.getLogger("taskplane.sources.jmap")

NAME = "jmap"
MAX_CHANGES = 256
"""``maxChanges`` of one ``Email/changes`` page."""
RESYNC_LIMIT = 100
"""Inbox IDs taken again after ``cannotCalculateChanges`` (newest first)."""
POLL_S = 300.0
"""Seconds between two syncs when no push arrives."""
RETRY_FIRST_S = 1.0
RETRY_CAP_S = 60.0
STABLE_S = 60.0
"""An EventSource stream up this long (seconds) restarts the reconnect backoff."""
MEMBERSHIP = ("id", "threadId", "mailboxIds", "keywords", f"header:{DELIVERY_HEADER}:asText")
CONTENT = (
    "id",
    "threadId",
    "mailboxIds",
    "from",
    "to",
    "replyTo",
    "subject",
    "receivedAt",
    "messageId",
    "references",
    "textBody",
    "bodyValues",
)


class _Held(Exception):
    """An item could not be accepted yet: the checkpoint stays, retry later."""


def retry_later(exc: BaseException) -> bool:
    """The email source's one provider-error decision: ``True`` holds the item and
    the checkpoint for a later retry (the provider is unavailable or rate limits, or
    the plane answered anything but :class:`~taskplane.errors.Refused`); ``False`` is
    a permanent outcome (the item is set aside with
    evidence and the checkpoint advances; a provider refusal outside an item stops
    the source, which its supervisor restarts)."""
    if isinstance(exc, JmapUnavailable | JmapRateLimited | _Held):
        return True
    if isinstance(exc, Refused):
        return False
    return isinstance(exc, TaskplaneError)  # transient, or a fault of the plane


@attrs.define(eq=False)
class JmapSource:
    """The JMAP email source; see the module docstring."""

    session_url: str
    username: str | None = None
    password: str | None = attrs.field(default=None, repr=False)
    token: str | None = attrs.field(default=None, repr=False)
    poll_s: float = POLL_S
    max_changes: int = MAX_CHANGES
    name: str = NAME
    recovery: Recovery = "lookup"
    supports_anchors: bool = False
    _conn: Connection | None = None

    @classmethod
    def from_settings(cls, settings: JmapSettings) -> JmapSource:
        """The source ``settings`` describe: ``JMAP_SESSION_URL`` and either
        ``JMAP_TOKEN`` or ``JMAP_USERNAME`` with ``JMAP_PASSWORD``.

        Raises:
            ValueError: the URL or the credential is missing (the message names them).
        """
        has_password = bool(settings.username and settings.password)
        if not settings.session_url or not (settings.token or has_password):
            raise ValueError(
                "the jmap source needs JMAP_SESSION_URL and JMAP_TOKEN,"
                " or JMAP_USERNAME and JMAP_PASSWORD"
            )
        return cls(
            session_url=settings.session_url,
            username=settings.username,
            password=settings.password,
            token=settings.token,
        )

    async def run(
        self, ctx: SourceContext, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Read the session, mailboxes and identity (a failure is a start failure),
        then sync on every push until cancelled."""
        async with httpx.AsyncClient(timeout=TIMEOUT_S) as client:
            api = JmapApi(client, auth_headers(self.username, self.password, self.token))
            session = await api.session(self.session_url)
            conn = await connect(api, session)
            user = self.username or session.username or session.account_id
            principal = source_identifier("jmap", self.session_url, user)
            self._conn = conn
            wake_tx, wake_rx = trio.open_memory_channel[None](1)
            task_status.started()
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._listen, conn, wake_tx)
                    await self._sync_loop(ctx, conn, principal, wake_rx)
            finally:
                self._conn = None

    async def _listen(self, conn: Connection, wake: trio.MemorySendChannel[None]) -> None:
        """Nudge the sync on every new ``Email`` state and every (re)connection;
        reconnect a dropped EventSource with backoff."""
        delays = backoff(RETRY_FIRST_S, RETRY_CAP_S)
        while True:
            opened = None
            limit_s = 0.0
            try:
                async for states in conn.api.state_changes(conn.session):
                    opened = trio.current_time() if opened is None else opened
                    if not states or "Email" in states:
                        _nudge(wake)
                reason = "the server closed the stream"
            except (JmapUnavailable, JmapRejected) as exc:
                reason = str(exc)
                if isinstance(exc, JmapRateLimited):
                    limit_s = exc.wait_s
            if opened is not None and trio.current_time() - opened >= STABLE_S:
                delays = backoff(RETRY_FIRST_S, RETRY_CAP_S)  # it was up long enough
            delay = max(next(delays), limit_s)
            log.warning(
                "jmap EventSource lost (%s); reconnecting in %.0f s",
                reason,
                delay,
                extra={"event": "source_reconnecting", "source": self.name},
            )
            _nudge(wake)
            await trio.sleep(delay)

    async def _sync_loop(
        self,
        ctx: SourceContext,
        conn: Connection,
        principal: str,
        wake: trio.MemoryReceiveChannel[None],
    ) -> None:
        delays = backoff(RETRY_FIRST_S, RETRY_CAP_S)
        while True:
            try:
                await self.sync(ctx, conn, principal)
            except Exception as exc:
                if not retry_later(exc):
                    raise
                wait = held_poll_wait(
                    exc,
                    limited_wait=exc.wait_s if isinstance(exc, JmapRateLimited) else None,
                    delays=delays,
                    log=log,
                    what="jmap sync",
                    source=self.name,
                )
                await trio.sleep(wait)
                continue
            delays = backoff(RETRY_FIRST_S, RETRY_CAP_S)
            with trio.move_on_after(self.poll_s):
                await wake.receive()

    async def sync(self, ctx: SourceContext, conn: Connection, principal: str) -> None:
        """Take every change since the stored state, page by page.

        Raises:
            JmapUnavailable, JmapRateLimited, _Held: retry later (the checkpoint
                holds); anything else is a failure of the source.
        """
        account = conn.session.account_id
        checkpoint = Checkpoint.of(await ctx.load_checkpoint(principal), account)
        if checkpoint.state is None:
            state = await _current_state(conn)
            await ctx.save_checkpoint(principal, attrs.evolve(checkpoint, state=state).value())
            return
        while True:
            arguments = {"accountId": account, "sinceState": checkpoint.state}
            try:
                answers = await conn.api.call(
                    conn.session,
                    [("Email/changes", {**arguments, "maxChanges": self.max_changes}, "c")],
                )
            except JmapMethodError as exc:
                if exc.type != "cannotCalculateChanges":
                    raise
                await self._resync(ctx, conn, principal, checkpoint)
                return
            changes = answers["c"]
            ids = list(dict.fromkeys([*changes.get("created", ()), *changes.get("updated", ())]))
            checkpoint = await self._take_ids(ctx, conn, principal, ids, checkpoint)
            checkpoint = attrs.evolve(checkpoint, state=str(changes["newState"]))
            await ctx.save_checkpoint(principal, checkpoint.value())
            if not changes.get("hasMoreChanges"):
                return

    async def _resync(
        self, ctx: SourceContext, conn: Connection, principal: str, checkpoint: Checkpoint
    ) -> None:
        account = conn.session.account_id
        await ctx.evidence("resync", {"accountId": account, "sinceState": checkpoint.state})
        log.warning(
            "jmap cannot calculate changes since %s; resynchronising",
            checkpoint.state,
            extra={"event": "source_resync", "source": self.name},
        )
        state = await _current_state(conn)
        query = {
            "accountId": account,
            "filter": {"inMailbox": conn.mailboxes.inbox},
            "sort": [{"property": "receivedAt", "isAscending": False}],
            "limit": RESYNC_LIMIT,
        }
        answers = await conn.api.call(conn.session, [("Email/query", query, "q")])
        ids = [str(i) for i in answers["q"].get("ids", ())][:RESYNC_LIMIT]
        checkpoint = await self._take_ids(ctx, conn, principal, ids[::-1], checkpoint)
        await ctx.save_checkpoint(principal, attrs.evolve(checkpoint, state=state).value())

    async def _take_ids(
        self,
        ctx: SourceContext,
        conn: Connection,
        principal: str,
        ids: Sequence[str],
        checkpoint: Checkpoint,
    ) -> Checkpoint:
        """Accept or count each of ``ids`` in order; the checkpoint with the counts."""
        counters = dict(checkpoint.non_work)
        account = conn.session.account_id
        for chunk in chunks(ids, conn.session.max_objects_in_get):
            get = {"accountId": account, "ids": chunk, "properties": list(MEMBERSHIP)}
            answers = await conn.api.call(conn.session, [("Email/get", get, "m")])
            for email in answers["m"].get("list", ()):
                kind = classify(email, conn.mailboxes.inbox)
                if kind != "work":
                    counters[kind] = counters.get(kind, 0) + 1
                    continue
                await self._take(ctx, conn, principal, str(email["id"]))
        return attrs.evolve(checkpoint, non_work=counters)

    async def _take(
        self, ctx: SourceContext, conn: Connection, principal: str, email_id: str
    ) -> None:
        """Accept one inbox message, or set it aside with evidence.

        Raises:
            _Held, JmapUnavailable, JmapRateLimited: retry later.
        """
        account = conn.session.account_id
        get = {
            "accountId": account,
            "ids": [email_id],
            "properties": list(CONTENT),
            "fetchTextBodyValues": True,
            "maxBodyValueBytes": MAX_MESSAGE_BYTES,
        }
        record = {"accountId": account, "emailId": email_id}
        try:
            answers = await conn.api.call(conn.session, [("Email/get", get, "e")])
        except JmapMethodError as exc:  # this message is refused, not the account
            await ctx.evidence("refused", {**record, "error": str(exc)})
            return
        found = answers["e"].get("list", ())
        if not found:
            return  # destroyed meanwhile
        try:
            event = email_event(principal, account, found[0])
        except ValueError as exc:
            await ctx.evidence("malformed", {**record, "error": str(exc)})
            return
        try:
            await ctx.ingest(event)
        except Exception as exc:
            if retry_later(exc):
                raise _Held(f"email {email_id} not accepted yet: {exc}") from exc
            if not isinstance(exc, TaskplaneError):
                raise
            await ctx.evidence("refused", {**record, "error": str(exc)})

    def sender(self, result: Result) -> Sender:
        """A reply to the sender through ``EmailSubmission/set``; lookup by the
        delivery ID header."""
        locator = result.locator
        delivery_id = result.delivery.delivery_id

        def connected() -> Connection:
            conn = self._conn
            if conn is None:
                raise ProviderRejected("the jmap source is not connected")
            if locator.get("accountId") != conn.session.account_id:
                raise ProviderRejected("the email's account is not the session's mail account")
            return conn

        async def send() -> str:
            conn = connected()
            found = await find_replies(conn.api, conn.session, delivery_id)
            sent = [email_id for email_id, draft in found if not draft]
            if sent:
                return sent[0]
            drafts = [email_id for email_id, draft in found if draft]
            email = reply_email(conn.identity, conn.mailboxes, locator, result.text, delivery_id)
            return await submit(conn, email, drafts[0] if drafts else None)

        async def reconcile() -> str | None:
            conn = connected()
            found = await find_replies(conn.api, conn.session, delivery_id)
            return next((email_id for email_id, draft in found if not draft), None)

        return Sender(send=send, reconcile=reconcile)


@attrs.frozen
class Checkpoint:
    """The stored position: the mail account, its ``Email`` state (``None``: none
    yet) and the non-work counters (classification to count)."""

    account_id: str
    state: str | None = None
    non_work: Mapping[str, int] = attrs.field(factory=dict)

    @classmethod
    def of(cls, value: object, account_id: str) -> Checkpoint:
        """The checkpoint in a stored JSON value (another account's is none)."""
        if not isinstance(value, dict) or value.get("accountId") != account_id:
            return cls(account_id)
        state = value.get("emailState")
        counters = value.get("nonWork")
        non_work = (
            {str(k): int(v) for k, v in counters.items() if isinstance(v, int)}
            if isinstance(counters, dict)
            else {}
        )
        return cls(account_id, state if isinstance(state, str) else None, non_work)

    def value(self) -> dict[str, object]:
        """The JSON value stored."""
        return {"accountId": self.account_id, "emailState": self.state, "nonWork": self.non_work}


def classify(email: Mapping[str, Any], inbox: str) -> str:
    """``work`` for a message now in the ``inbox`` mailbox; else the non-work
    classification: ``draft``, ``own-reply`` (it carries the delivery header) or
    ``not-in-inbox``."""
    mailboxes = email.get("mailboxIds")
    keywords = email.get("keywords")
    if isinstance(keywords, dict) and keywords.get("$draft"):
        return "draft"
    if email.get(f"header:{DELIVERY_HEADER}:asText"):
        return "own-reply"
    if not isinstance(mailboxes, dict) or not mailboxes.get(inbox):
        return "not-in-inbox"
    return "work"


def email_event(principal: str, account_id: str, email: Mapping[str, Any]) -> Event:
    """The :class:`Event` of one inbox message (``Email/get`` with ``CONTENT``).

    Raises:
        ValueError: no ID, thread or sender, or a body the server truncated (over
            ``MAX_MESSAGE_BYTES``): the message is set aside.
    """
    email_id, thread_id = email.get("id"), email.get("threadId")
    if not isinstance(email_id, str) or not email_id or not isinstance(thread_id, str):
        raise ValueError("the email has no id or threadId")
    sender = _first_address(email.get("replyTo")) or _first_address(email.get("from"))
    if sender is None:
        raise ValueError("the email has no sender address")
    values = email.get("bodyValues") if isinstance(email.get("bodyValues"), dict) else {}
    assert isinstance(values, dict)
    body: list[str] = []
    for part in email.get("textBody") or ():
        value = values.get(part.get("partId")) if isinstance(part, dict) else None
        if not isinstance(value, dict):
            continue
        if value.get("isTruncated"):
            raise ValueError(f"the body is over the limit of {MAX_MESSAGE_BYTES} bytes")
        body.append(str(value.get("value", "")))
    author = _first_address(email.get("from")) or sender
    subject = str(email.get("subject") or "")
    header = f"Email from {_display(email.get('from')) or author}\nSubject: {subject}"
    message_ids = [str(m) for m in email.get("messageId") or ()]
    references = [str(r) for r in email.get("references") or ()]
    locator = {
        "accountId": account_id,
        "emailId": email_id,
        "threadId": thread_id,
        "replyTo": sender,
        "subject": subject,
        "messageId": message_ids[0] if message_ids else "",
        "references": " ".join(references),
    }
    return Event(
        principal=principal,
        identity=(account_id, email_id),
        conversation=(thread_id,),
        parts=(Part(text=header + "\n\n" + "\n".join(body)),),
        locator={k: v[:MAX_NATIVE_VALUE] for k, v in locator.items() if v},
    )


async def _current_state(conn: Connection) -> str:
    """The account's current ``Email`` state (an ``Email/get`` of no IDs)."""
    get = {"accountId": conn.session.account_id, "ids": []}
    answers = await conn.api.call(conn.session, [("Email/get", get, "s")])
    return str(answers["s"]["state"])


def _nudge(wake: trio.MemorySendChannel[None]) -> None:
    try:
        wake.send_nowait(None)
    except trio.WouldBlock:
        pass  # a sync is already due


def _first_address(value: object) -> str | None:
    if isinstance(value, list) and value and isinstance(value[0], dict):
        email = value[0].get("email")
        return email if isinstance(email, str) and email else None
    return None


def _display(value: object) -> str:
    if isinstance(value, list) and value and isinstance(value[0], dict):
        name, email = value[0].get("name"), value[0].get("email")
        return f"{name} <{email}>" if name else str(email or "")
    return ""
