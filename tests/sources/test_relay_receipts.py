"""The relay's receipts (``RELAY_RECEIPTS_DIR``): ``handled`` after acceptance and before
the inbox file goes, ``replied`` with the reply, never moved back, and a failed receipt
keeps the inbox file for the next scan."""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import pytest

from taskplane.actors.native import Delivery
from taskplane.actors.outbound import DeliveryFailed, Send
from taskplane.model.enums import TaskState
from taskplane.model.types import Task, TaskStatus
from taskplane.scope import Scope
from taskplane.sources.base import Event, Result
from taskplane.sources.relay import MALFORMED, RelaySource, receipt_name
from taskplane.sources.relay_spool import write_receipt


@attrs.define
class Context:
    events: list[Event] = attrs.field(factory=list)
    operations: list[str] = attrs.field(factory=list)
    fail: int = 0

    async def ingest(self, event: Event) -> str:
        self.events.append(event)
        return "task-1"

    async def evidence(self, classification: str, record: dict[str, object]) -> None:
        raise AssertionError(classification)

    async def deliver(
        self, task_id: str, operation_id: str, payload: str, send: Send, **kw: object
    ) -> str:
        self.operations.append(operation_id)
        if self.fail:
            self.fail -= 1
            raise DeliveryFailed("disk full")
        return await send()

    async def load_checkpoint(self, principal: str) -> object:
        return None

    async def save_checkpoint(self, principal: str, value: object) -> None:
        raise AssertionError("no checkpoint")


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path, Path]:
    spool, outbox, receipts = tmp_path / "spool", tmp_path / "outbox", tmp_path / "receipts"
    for d in (spool, outbox, receipts, spool / MALFORMED):
        d.mkdir()
    return spool, outbox, receipts


def drop(spool: Path, message_id: str) -> Path:
    path = spool / f"{message_id}.json"
    body = {"from": "agent-a", "conversationId": "c", "messageId": message_id, "text": "hi"}
    path.write_text(json.dumps(body))
    return path


def read(receipts: Path, message_id: str) -> dict[str, object]:
    name = receipt_name({"from": "agent-a", "messageId": message_id})
    value: dict[str, object] = json.loads((receipts / name).read_text())
    return value


async def test_handled_is_written_before_the_inbox_file_goes_then_replied(
    dirs: tuple[Path, Path, Path],
) -> None:
    spool, outbox, receipts = dirs
    relay = RelaySource(spool, outbox, receipts=receipts)
    ctx = Context(fail=1)
    path = drop(spool, "m-1")
    assert await relay.scan(ctx) is True  # the receipt failed: the file stays
    assert path.exists() and list(receipts.iterdir()) == []
    assert await relay.scan(ctx) is False
    assert not path.exists() and ctx.operations == ["handled:m-1", "handled:m-1"]
    assert read(receipts, "m-1") == {
        "from": "agent-a",
        "conversationId": "c",
        "messageId": "m-1",
        "state": "handled",
        "taskId": "task-1",
    }
    task = Task(
        id="task-1", context_id="ctx", status=TaskStatus(state=TaskState.TASK_STATE_COMPLETED)
    )
    delivery = Delivery("task-1", "relay", "reply:x", "d" * 64, "idempotent")
    locator = dict(ctx.events[0].locator)
    response = await relay.sender(Result(task, Scope("", "p"), "done", locator, delivery)).send()
    receipt = read(receipts, "m-1")
    assert receipt["state"] == "replied" and receipt["responseId"] == response
    assert receipt["taskState"] == "TASK_STATE_COMPLETED"
    assert (outbox / f"{response}.json").exists()


def test_a_receipt_never_moves_back(tmp_path: Path) -> None:
    write_receipt(tmp_path, "r.json", {"state": "replied", "responseId": "x"})
    write_receipt(tmp_path, "r.json", {"state": "handled"})
    assert json.loads((tmp_path / "r.json").read_text())["state"] == "replied"
    write_receipt(tmp_path, "s.json", {"state": "handled"})
    write_receipt(tmp_path, "s.json", {"state": "replied"})
    assert json.loads((tmp_path / "s.json").read_text())["state"] == "replied"


def test_receipt_names_are_file_safe_and_per_sender_and_message() -> None:
    name = receipt_name({"from": "a/../b", "messageId": "m 1"})
    assert name.startswith("receipt-") and name.endswith(".json") and "/" not in name
    assert name != receipt_name({"from": "other", "messageId": "m 1"})
