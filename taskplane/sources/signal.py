"""Signal through ``signal-cli`` in JSON-RPC mode (conformance matrix, "Signal" row).

The source runs ``SIGNAL_CLI -a SIGNAL_ACCOUNT jsonRpc`` as a child process and asks
it for its ``version``: a program that cannot be run, exits, or does not answer within
30 s is a start failure. Then every stdout line is handled in order, and the next line
is read only once the previous one's outcome is durable (Signal cannot refetch a
message, so the Task history is the inbox):

- a ``receive`` notification whose envelope carries a ``dataMessage`` with text, sent
  directly to the account or in a group mentioning it, is work: the whole envelope is
  committed into Task history (``ingest``) before the next line is read;
- receipts, typing indicators, sync messages (what the account sent from another
  device), messages without text and group messages that do not mention the account
  are non-work, folded into one durable counter per classification in the checkpoint;
- a line that is not a readable notification gets exact ``source.evidence``
  (``malformed``); a message the plane refuses permanently, ``refused``.

A transient failure (the agent's queue full, the store unavailable) retries the
retained envelope with backoff (1 s doubling to 30 s) while stdout stays unread. If
signal-cli exits, it is started again with the same backoff; a line it had written but
the source had not read yet is read by nobody, which is why nothing is read ahead.

Identity: principal ``signal:`` + h(account); the sender is its authenticated identity
(``sourceUuid``, else ``sourceNumber``); dedupe key ``event:`` + h(sender, the data
message's timestamp); conversation ``conversation:`` + h(sender) for a direct message,
h(sender, group ID) in a group. Ack: none.

The reply is one ``send`` to the sender (``recipient``) or the group (``groupId``),
quoting the exact message (``quoteTimestamp``, ``quoteAuthor``); its ``timestamp`` is
the provider response ID. Signal has no idempotency key and no sent-message lookup, so
the reply uses the ``ambiguous`` policy: a definite refusal (an error answer, or every
recipient refused) is retried; an unknown outcome (no answer, the process ended, a
network failure) is never sent again automatically.
"""

from __future__ import annotations

import logging
import subprocess
from collections import deque
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import attrs
import trio

from taskplane.actors.native import Recovery
from taskplane.actors.outbound import DeliveryFailed
from taskplane.backoff import backoff
from taskplane.errors import Refused, TaskplaneError
from taskplane.model.types import Part
from taskplane.settings import SignalSettings
from taskplane.sources.base import Event, Result, Sender, SourceContext, load_state
from taskplane.sources.identity import native_value, source_identifier
from taskplane.sources.retained import take_retained
from taskplane.sources.signal_rpc import (
    Notification,
    SignalGone,
    SignalRefused,
    SignalRpc,
    SignalUnknown,
)

log = logging.getLogger("taskplane.sources.signal")

NAME = "signal"
START_TIMEOUT_S = 30.0
RETRY_FIRST_S = 1.0
RETRY_CAP_S = 30.0
EXIT_GRACE_S = 5.0
"""How long an ended signal-cli's stderr is still read for the error message."""
STDERR_TAIL_LINES = 5
STDERR_LINE_CHARS = 500
MAX_EVIDENCE_LINE = 2048
"""The most characters of an unreadable line kept in its evidence."""


class SignalUnavailable(Exception):
    """signal-cli is not running right now (between two processes)."""


def retry_later(exc: BaseException) -> bool:
    """The Signal source's one provider-error decision: ``True`` keeps the retained
    envelope and retries it while stdout stays unread (the plane answered anything but
    :class:`~taskplane.errors.Refused`: its queue is full, the store is unavailable);
    ``False`` is a permanent outcome (the message is refused with evidence)."""
    if isinstance(exc, DeliveryFailed):
        return exc.__cause__ is None or retry_later(exc.__cause__)
    if isinstance(exc, SignalUnknown | SignalUnavailable):
        return True
    if isinstance(exc, Refused | SignalRefused):
        return False
    return isinstance(exc, TaskplaneError)  # transient, or a fault of the plane


@attrs.frozen
class Envelope:
    """One received message, read.

    Attributes:
        sender: the authenticated sender identity (UUID, else number).
        timestamp: the data message's timestamp (ms since the epoch, as text).
        text: the message text (empty when it has none).
        group_id: the group's ID, or ``""`` for a direct message.
        sender_name: the sender's profile name (display only).
        mentions: the numbers and UUIDs the message mentions.
        kind: ``data``, ``sync``, ``receipt``, ``typing`` or ``other``.
    """

    sender: str
    timestamp: str
    text: str = ""
    group_id: str = ""
    sender_name: str = ""
    mentions: frozenset[str] = frozenset()
    kind: str = "data"


def parse_envelope(notification: Notification) -> Envelope | None:
    """The :class:`Envelope` of a ``receive`` notification; ``None`` for another
    method (nothing to record).

    Raises:
        ValueError: a ``receive`` notification without a readable envelope (no sender
            or no timestamp).
    """
    if notification.get("method") != "receive":
        return None
    params = notification.get("params")
    envelope = params.get("envelope") if isinstance(params, dict) else None
    if not isinstance(envelope, dict):
        raise ValueError("a receive notification needs params.envelope")
    sender = envelope.get("sourceUuid") or envelope.get("sourceNumber") or envelope.get("source")
    sender = native_value(sender, "the envelope's sourceUuid or sourceNumber")
    data = envelope.get("dataMessage")
    if not isinstance(data, dict):
        kind = next(
            (k for k in ("sync", "receipt", "typing") if f"{k}Message" in envelope), "other"
        )
        stamp = envelope.get("timestamp")
        return Envelope(sender, str(stamp) if isinstance(stamp, int) else "", kind=kind)
    stamp = data.get("timestamp", envelope.get("timestamp"))
    if not isinstance(stamp, int) or isinstance(stamp, bool) or stamp <= 0:
        raise ValueError("the data message has no timestamp")
    group = data.get("groupInfo")
    group_id = group.get("groupId") if isinstance(group, dict) else None
    mentions = data.get("mentions")
    mentioned = {
        str(value)
        for m in (mentions if isinstance(mentions, list) else ())
        if isinstance(m, dict)
        for value in (m.get("number"), m.get("uuid"))
        if isinstance(value, str) and value
    }
    message = data.get("message")
    return Envelope(
        sender=sender,
        timestamp=str(stamp),
        text=message if isinstance(message, str) else "",
        group_id=native_value(group_id, "groupInfo.groupId") if group_id is not None else "",
        sender_name=str(envelope.get("sourceName") or ""),
        mentions=frozenset(mentioned),
    )


def classify(envelope: Envelope, account: str) -> str:
    """``work``, or the non-work classification: ``sync``, ``receipt``, ``typing``,
    ``other``, ``own-message``, ``no-text`` or ``not-a-mention``."""
    if envelope.kind != "data":
        return envelope.kind
    if envelope.sender == account:
        return "own-message"
    if not envelope.text.strip():
        return "no-text"
    if envelope.group_id and account not in envelope.mentions:
        return "not-a-mention"
    return "work"


def envelope_event(principal: str, envelope: Envelope, raw: str) -> Event:
    """The :class:`Event` of a work message: what the agent reads, and the whole
    received line (``raw``) as a second part, so Task history holds the envelope."""
    where = "a group" if envelope.group_id else "a direct message"
    author = envelope.sender_name or envelope.sender
    locator = {"sender": envelope.sender, "timestamp": envelope.timestamp}
    if envelope.group_id:
        locator["groupId"] = envelope.group_id
    conversation = (envelope.sender, envelope.group_id) if envelope.group_id else (envelope.sender,)
    return Event(
        principal=principal,
        identity=(envelope.sender, envelope.timestamp),
        conversation=conversation,
        parts=(
            Part(text=f"Signal message from {author} in {where}:\n{envelope.text}"),
            Part(text=raw, media_type="application/json"),
        ),
        locator=locator,
    )


@attrs.define(eq=False)
class SignalSource:
    """The Signal source; see the module docstring."""

    program: str
    account: str
    name: str = NAME
    recovery: Recovery = "ambiguous"
    supports_anchors: bool = False
    _rpc: SignalRpc | None = None

    @classmethod
    def from_settings(cls, settings: SignalSettings) -> SignalSource:
        """The source ``settings`` describe: ``SIGNAL_ACCOUNT`` (required) and
        ``SIGNAL_CLI`` (the program, ``signal-cli`` by default).

        Raises:
            ValueError: the account is not set.
        """
        if not settings.account:
            raise ValueError("the signal source needs SIGNAL_ACCOUNT")
        return cls(settings.program, settings.account)

    async def run(
        self, ctx: SourceContext, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Start signal-cli and ask its version (failures before ``started`` are start
        failures), then serve its lines, starting it again when it exits, until
        cancelled."""
        principal = source_identifier("signal", self.account)
        started = False
        delays = backoff(RETRY_FIRST_S, RETRY_CAP_S)

        def ready() -> None:
            nonlocal started, delays
            if not started:
                task_status.started()
                started = True
            delays = backoff(RETRY_FIRST_S, RETRY_CAP_S)

        while True:
            try:
                await self._session(ctx, principal, ready)
            except (SignalGone, SignalUnknown, SignalRefused, OSError) as exc:
                if not started:
                    raise
                delay = next(delays)
                log.warning(
                    "signal-cli stopped (%s); starting it again in %.0f s",
                    exc,
                    delay,
                    extra={"event": "source_reconnecting", "source": self.name},
                )
                await trio.sleep(delay)

    async def _session(self, ctx: SourceContext, principal: str, ready: Callable[[], None]) -> None:
        """One signal-cli process: until it exits (raises :class:`SignalGone`), or the
        version call fails (:class:`SignalUnknown`, :class:`SignalRefused`)."""
        command = [self.program, "-a", self.account, "jsonRpc"]
        gone: list[SignalGone] = []
        failed: Exception | None = None
        tail: deque[str] = deque(maxlen=STDERR_TAIL_LINES)
        stderr_done = trio.Event()
        async with trio.open_nursery() as nursery:
            process: trio.Process = await nursery.start(
                partial(
                    trio.run_process,
                    command,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    check=False,
                )
            )
            assert process.stdin is not None and process.stdout is not None
            assert process.stderr is not None
            rpc = SignalRpc(process.stdin, process.stdout)

            async def pump() -> None:
                try:
                    await rpc.serve(partial(self._handle, ctx, principal))
                except SignalGone as exc:
                    gone.append(exc)
                    with trio.move_on_after(EXIT_GRACE_S):
                        await stderr_done.wait()  # its last words, for the error
                finally:
                    nursery.cancel_scope.cancel()

            nursery.start_soon(_read_stderr, process.stderr, tail, stderr_done)
            nursery.start_soon(pump)
            try:
                with trio.fail_after(START_TIMEOUT_S):
                    await rpc.call("version", {})
            except (trio.TooSlowError, SignalUnknown, SignalRefused) as exc:
                failed = exc
                if not isinstance(exc, trio.TooSlowError):
                    with trio.move_on_after(EXIT_GRACE_S):
                        await stderr_done.wait()  # it may be exiting: its last words
                nursery.cancel_scope.cancel()
            else:
                self._rpc = rpc
                ready()
                try:
                    await trio.sleep_forever()
                finally:
                    self._rpc = None
        if gone:
            why = " | ".join(tail)
            raise SignalGone(f"{gone[0]}: {why}" if why else str(gone[0]))
        if isinstance(failed, trio.TooSlowError):
            raise SignalUnknown("signal-cli did not answer its version")
        raise failed if failed is not None else SignalGone("signal-cli exited")

    async def _handle(
        self, ctx: SourceContext, principal: str, message: Notification | None, line: bytes
    ) -> None:
        """One stdout line: its outcome durable before the next is read."""
        raw = line.decode("utf-8", "replace")
        if message is None:
            await ctx.evidence(
                "malformed", {"error": "not a JSON object", "line": raw[:MAX_EVIDENCE_LINE]}
            )
            return
        try:
            envelope = parse_envelope(message)
        except ValueError as exc:
            await ctx.evidence("malformed", {"error": str(exc), "line": raw[:MAX_EVIDENCE_LINE]})
            return
        if envelope is not None:
            await self._retained(ctx, principal, envelope, raw)

    async def _retained(
        self, ctx: SourceContext, principal: str, envelope: Envelope, raw: str
    ) -> None:
        """Take ``envelope`` until its outcome is durable, retrying a transient failure
        with backoff while stdout stays unread."""
        await take_retained(
            lambda: self.take(ctx, principal, envelope, raw),
            retry_later=retry_later,
            delays=backoff(RETRY_FIRST_S, RETRY_CAP_S),
            log=log,
            what=f"signal message {envelope.timestamp}",
            source=self.name,
        )

    async def take(self, ctx: SourceContext, principal: str, envelope: Envelope, raw: str) -> None:
        """Accept, count or refuse one envelope.

        Raises:
            an error :func:`retry_later` keeps: nothing durable changed for the
                envelope beyond what a retry repeats harmlessly (a duplicate).
        """
        kind = classify(envelope, self.account)
        if kind != "work":
            state = await load_state(ctx, principal)
            counters = dict(state.get("nonWork", {}))
            counters[kind] = counters.get(kind, 0) + 1
            await ctx.save_checkpoint(principal, {**state, "nonWork": counters})
            return
        try:
            await ctx.ingest(envelope_event(principal, envelope, raw))
        except TaskplaneError as exc:
            if retry_later(exc):
                raise
            await ctx.evidence(
                "refused",
                {"sender": envelope.sender, "timestamp": envelope.timestamp, "error": str(exc)},
            )

    def sender(self, result: Result) -> Sender:
        """One ``send`` to the sender or the group, quoting the exact message
        (``ambiguous`` policy)."""
        params = send_params(result.locator, result.text)

        async def send() -> str:
            if self._rpc is None:
                raise SignalRefused("signal-cli is not running")
            answer = await self._rpc.call("send", params)
            stamp = answer.get("timestamp") if isinstance(answer, dict) else None
            if stamp is None:
                raise SignalUnknown("signal-cli's send result has no timestamp")
            return str(stamp)

        return Sender(send=send)


async def _read_stderr(stream: trio.abc.ReceiveStream, tail: deque[str], done: trio.Event) -> None:
    """Keep the last lines signal-cli wrote on stderr (each at most
    ``STDERR_LINE_CHARS``) in ``tail``, logging each at debug level, until it closes
    (then ``done`` is set)."""
    try:
        await _stderr_lines(stream, tail)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    finally:
        done.set()


async def _stderr_lines(stream: trio.abc.ReceiveStream, tail: deque[str]) -> None:
    pending = b""
    while chunk := await stream.receive_some(65536):
        pending += chunk
        *lines, pending = pending.split(b"\n")
        pending = pending[-STDERR_LINE_CHARS:]
        for raw in lines:
            line = raw.decode("utf-8", "replace").strip()[:STDERR_LINE_CHARS]
            if line:
                tail.append(line)
                log.debug("signal-cli: %s", line, extra={"event": "signal_cli_stderr"})


def send_params(locator: Mapping[str, str], text: str) -> dict[str, Any]:
    """The ``send`` parameters of a reply to the item ``locator`` names."""
    params: dict[str, Any] = {
        "message": text,
        "quoteTimestamp": int(locator["timestamp"]),
        "quoteAuthor": locator["sender"],
    }
    if locator.get("groupId"):
        params["groupId"] = locator["groupId"]
    else:
        params["recipient"] = [locator["sender"]]
    return params
