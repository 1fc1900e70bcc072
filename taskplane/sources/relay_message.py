"""The agent relay's message shapes, shared by both transports (conformance matrix,
"Agent relay" row): the inbox message, the reply, and the receipts.

An inbox message is ``{"from", "conversationId", "messageId", "parts" | "text",
"replyTo"?}``, whether it came as a spool file or in a relay server's page. A reply
is ``{"from", "to", "conversationId", "messageId", "inReplyTo", "taskId", "state",
"text"}``; its ``messageId`` is the response ID, ``response-`` + the delivery ID's
hash, so it is stable over the delivery (recovery ``idempotent``: a transport given
the same response ID twice keeps one). A receipt (``RELAY_RECEIPTS_DIR``) is the
message's durable state, ``handled`` then ``replied``, never moved back.

Identity: principal ``agent:`` + h(from); dedupe key ``event:`` + h(messageId);
conversation key ``conversation:`` + h(conversationId).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import trio

from taskplane.errors import TaskplaneError
from taskplane.model.codec import decode
from taskplane.model.limits import check_parts_size
from taskplane.model.types import Part
from taskplane.sources.base import Event, Result, SourceContext
from taskplane.sources.identity import native_value, source_identifier
from taskplane.sources.relay_page import message_problem
from taskplane.sources.relay_spool import write_receipt


class RelayConfigError(ValueError):
    """A relay setting is missing, contradictory or names an unusable directory."""


FIELDS = frozenset({"from", "conversationId", "messageId", "parts", "text", "replyTo"})
"""The fields an inbox message may have: any other makes a spool file malformed, and
is ignored in a relay server's page (a server may add fields within version 1)."""


def parse_event(raw: bytes) -> Event:
    """The :class:`Event` of one inbox message's JSON bytes (a spool file).

    Raises:
        ValueError, RecursionError, InvalidRequest: not a JSON object of the
            documented shape.
        PayloadTooLarge: its parts are over ``MAX_MESSAGE_BYTES`` (as an A2A send).
    """
    return parse_message(json.loads(raw))


def parse_message(doc: Any, *, ignore_unknown: bool = False) -> Event:
    """The :class:`Event` of one decoded inbox message (never one nested deeper than
    64 or holding a lone surrogate: see
    :func:`~taskplane.sources.relay_page.message_problem`); a field not in :data:`FIELDS`
    is malformed unless ``ignore_unknown`` (a relay server's page), and the known ones
    are checked as strictly either way.

    Raises:
        ValueError, InvalidRequest: not an object of the documented shape.
        PayloadTooLarge: its parts are over ``MAX_MESSAGE_BYTES`` (as an A2A send).
    """
    if not isinstance(doc, dict):
        raise ValueError("an inbox message must be a JSON object")
    problem = message_problem(doc)
    if problem:
        raise ValueError(problem)
    unknown = set(doc) - FIELDS
    if unknown and not ignore_unknown:
        raise ValueError(f"unknown fields: {', '.join(sorted(unknown))}")
    sender = native_value(doc.get("from"), "from")
    conversation = native_value(doc.get("conversationId"), "conversationId")
    message_id = native_value(doc.get("messageId"), "messageId")
    reply_to = doc.get("replyTo")
    if reply_to is not None:
        reply_to = native_value(reply_to, "replyTo")
    if ("parts" in doc) == ("text" in doc):
        raise ValueError('an inbox message needs exactly one of "parts" and "text"')
    if "text" in doc:
        if not isinstance(doc["text"], str) or not doc["text"].strip():
            raise ValueError('"text" must be a non-empty string')
        parts: tuple[Part, ...] = (Part(text=doc["text"]),)
    else:
        if not isinstance(doc["parts"], list) or not doc["parts"]:
            raise ValueError('"parts" must be a non-empty array of A2A Parts')
        parts = tuple(decode(p, Part, path=f"parts[{i}]") for i, p in enumerate(doc["parts"]))
    check_parts_size(parts)
    locator = {"from": sender, "conversationId": conversation, "messageId": message_id}
    return Event(
        principal=source_identifier("agent", sender),
        identity=(message_id,),
        conversation=(conversation,),
        parts=parts,
        locator=locator,
        reply_to=reply_to,
    )


def response_id(result: Result) -> str:
    """The stable response ID of ``result``'s delivery: ``response-`` + its hash."""
    return "response-" + result.delivery.delivery_id.removeprefix("delivery-")


def reply(result: Result, sender: str) -> dict[str, str]:
    """The reply of ``result`` as ``sender`` (the transport's own agent name)."""
    return {
        "from": sender,
        "to": result.locator.get("from", ""),
        "conversationId": result.locator.get("conversationId", ""),
        "messageId": response_id(result),
        "inReplyTo": result.locator.get("messageId", ""),
        "taskId": result.task.id,
        "state": result.state.name,
        "text": result.text,
    }


def receipt_name(locator: Mapping[str, str]) -> str:
    """The receipt file of the message ``locator`` names:
    ``receipt-`` + h(from, messageId) + ``.json``."""
    return (
        source_identifier("receipt", locator["from"], locator["messageId"]).replace(":", "-")
        + ".json"
    )


async def write_replied(receipts: Path | None, result: Result, answer: Mapping[str, str]) -> None:
    """The ``replied`` receipt of the message ``result`` answers with the reply
    ``answer`` (nothing without a receipts directory or a message ID).

    Raises:
        OSError: the receipt could not be written (the delivery is then retried).
    """
    if receipts is None or not result.locator.get("messageId"):
        return
    record: dict[str, object] = {
        "from": answer["to"],
        "conversationId": answer["conversationId"],
        "messageId": answer["inReplyTo"],
        "state": "replied",
        "taskId": result.task.id,
        "taskState": result.state.name,
        "responseId": answer["messageId"],
    }
    await trio.to_thread.run_sync(write_receipt, receipts, receipt_name(result.locator), record)


async def record_handled(
    ctx: SourceContext,
    receipts: Path | None,
    task_id: str,
    event: Event,
    *,
    log: logging.Logger,
    source: str,
) -> bool:
    """The ``handled`` receipt of the accepted ``event`` (operation
    ``handled:<messageId>``, ``idempotent``, through the per-delivery serializer);
    ``True`` without a receipts directory, ``False`` (logged as ``source_ack_failed``)
    if it could not be written: the caller keeps the message for another try."""
    if receipts is None:
        return True
    record: dict[str, object] = {**event.locator, "state": "handled", "taskId": task_id}
    name = receipt_name(event.locator)
    directory = receipts

    async def write() -> str:
        await trio.to_thread.run_sync(write_receipt, directory, name, record)
        return name

    message_id = event.locator["messageId"]
    try:
        await ctx.deliver(task_id, f"handled:{message_id}", json.dumps(record), write)
    except TaskplaneError as exc:
        log.warning(
            "the receipt of relay message %s was not written: %s",
            message_id,
            exc,
            extra={"event": "source_ack_failed", "source": source},
        )
        return False
    return True
