"""The relay's inbox against hostile entries: anything that is not a regular file, a
file over the size limit, a Message over the per-message limit or JSON nested too
deep is set aside into ``malformed/`` with ``source.evidence``, never followed, never
lost, and the next valid file is still taken (one bad entry never stops the source)."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import attrs
import pytest

from taskplane.actors.native import Recovery
from taskplane.actors.outbound import Reconcile, Send
from taskplane.model.limits import MAX_MESSAGE_BYTES
from taskplane.sources.base import Event
from taskplane.sources.relay import MALFORMED, MAX_FILE_BYTES, RelaySource
from taskplane.sources.relay_spool import NotARegularFile, move_aside, read_entry


@attrs.define
class FakeContext:
    """Records what the relay asks of the plane; ``ingest`` applies the same bound
    the runtime's context does."""

    events: list[Event] = attrs.field(factory=list)
    evidence_records: list[tuple[str, dict[str, object]]] = attrs.field(factory=list)

    async def ingest(self, event: Event) -> str:
        self.events.append(event)
        return f"task-{len(self.events)}"

    async def evidence(self, classification: str, record: dict[str, object]) -> None:
        self.evidence_records.append((classification, record))

    async def deliver(
        self,
        task_id: str,
        operation_id: str,
        payload: str,
        send: Send,
        *,
        recovery: Recovery = "idempotent",
        reconcile: Reconcile | None = None,
    ) -> str:
        raise AssertionError("the relay acknowledges nothing")

    async def load_checkpoint(self, principal: str) -> object:
        return None

    async def save_checkpoint(self, principal: str, value: object) -> None:
        raise AssertionError("the relay keeps no checkpoint")


def valid(message_id: str, text: str = "hello") -> bytes:
    body = {"from": "agent-a", "conversationId": "c", "messageId": message_id, "text": text}
    return json.dumps(body).encode()


@pytest.fixture
def spool(tmp_path: Path) -> Path:
    path = tmp_path / "spool"
    path.mkdir()
    (path / MALFORMED).mkdir()
    (tmp_path / "outbox").mkdir()
    return path


def relay(spool: Path) -> RelaySource:
    return RelaySource(spool, spool.parent / "outbox")


def lexists(path: Path) -> bool:
    """Whether the entry exists, without following a symbolic link."""
    return os.path.lexists(path)


def make_fifo(path: Path) -> None:
    os.mkfifo(path)


def make_socket(path: Path) -> None:
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))
    sock.close()


@pytest.mark.parametrize(
    ("make", "kind"),
    [
        (lambda p: p.mkdir(), "a directory"),
        (lambda p: p.symlink_to("/etc/hostname"), "a symbolic link"),
        (lambda p: p.symlink_to(p.parent / "target.txt"), "a symbolic link"),
        (make_fifo, "a fifo"),
        (make_socket, "a socket"),
    ],
    ids=["directory", "symlink-outside", "symlink-to-valid-file", "fifo", "socket"],
)
async def test_an_entry_that_is_not_a_regular_file_is_set_aside_and_the_next_is_taken(
    spool: Path, make: object, kind: str
) -> None:
    (spool / "target.txt").write_bytes(valid("m-target"))
    assert callable(make)
    make(spool / "a.json")
    (spool / "b.json").write_bytes(valid("m-1"))
    ctx = FakeContext()
    source = relay(spool)
    assert await source.scan(ctx) is False
    assert await source.scan(ctx) is False  # nothing left behind to retry
    assert [e.identity for e in ctx.events] == [("m-1",)]  # never read through the link
    ((classification, record),) = ctx.evidence_records
    assert classification == "malformed" and record["file"] == "a.json"
    assert kind in str(record["error"])
    assert not lexists(spool / "a.json")
    assert lexists(spool / MALFORMED / "a.json")  # the entry itself, not lost
    assert (spool / "target.txt").exists()  # what a link named is untouched


async def test_a_file_over_the_size_limit_is_set_aside_unread(spool: Path) -> None:
    (spool / "big.json").write_bytes(b" " * MAX_FILE_BYTES + valid("m-big"))
    ctx = FakeContext()
    await relay(spool).scan(ctx)
    assert ctx.events == []
    ((classification, record),) = ctx.evidence_records
    assert classification == "malformed"
    assert f"exceeds the limit of {MAX_FILE_BYTES} bytes" in str(record["error"])
    assert (spool / MALFORMED / "big.json").exists()


def test_reading_never_reads_more_than_the_limit_plus_one(tmp_path: Path) -> None:
    path = tmp_path / "f.json"
    path.write_bytes(b"x" * 11)
    with pytest.raises(NotARegularFile, match="exceeds the limit of 10 bytes"):
        read_entry(path, 10)
    assert read_entry(path, 11) == b"x" * 11


async def test_a_message_over_the_per_message_limit_is_set_aside(spool: Path) -> None:
    # 2,000,000 characters fit in no Message (the A2A limit), though under the file cap
    # when the text is short enough: test both sides of the message limit.
    (spool / "a.json").write_bytes(valid("m-1", "é" * (MAX_MESSAGE_BYTES // 2)))
    (spool / "b.json").write_bytes(valid("m-2", "x" * (MAX_MESSAGE_BYTES - 100)))
    ctx = FakeContext()
    await relay(spool).scan(ctx)
    assert [e.identity for e in ctx.events] == [("m-2",)]
    ((classification, record),) = ctx.evidence_records
    assert classification == "malformed" and record["file"] == "a.json"
    assert f"exceeds the limit of {MAX_MESSAGE_BYTES} bytes per message" in str(record["error"])


async def test_json_nested_too_deep_is_set_aside(spool: Path) -> None:
    (spool / "a.json").write_bytes(b"[" * 200_000 + b"]" * 200_000)
    (spool / "b.json").write_bytes(valid("m-1"))
    ctx = FakeContext()
    await relay(spool).scan(ctx)
    assert [e.identity for e in ctx.events] == [("m-1",)]
    assert [c for c, _ in ctx.evidence_records] == ["malformed"]


async def test_setting_aside_never_replaces_an_earlier_entry(spool: Path) -> None:
    ctx = FakeContext()
    source = relay(spool)
    for n in range(3):
        (spool / "bad.json").write_text(f'{{"n": {n}}}')
        await source.scan(ctx)
    kept = sorted(p.name for p in (spool / MALFORMED).iterdir())
    assert kept == ["bad.json", "bad.json.1", "bad.json.2"]
    assert len(ctx.evidence_records) == 3


def test_move_aside_moves_a_symlink_itself(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_text("kept")
    (tmp_path / "aside").mkdir()
    (tmp_path / "link.json").symlink_to(target)
    moved = move_aside(tmp_path / "link.json", tmp_path / "aside")
    assert moved.is_symlink() and target.read_text() == "kept"


async def test_an_entry_that_cannot_be_set_aside_is_reported_once_and_skipped(
    spool: Path,
) -> None:
    (spool / MALFORMED).rmdir()
    (spool / MALFORMED).write_text("not a directory")  # every move fails
    (spool / "a.json").mkdir()
    (spool / "b.json").write_bytes(valid("m-1"))
    ctx = FakeContext()
    source = relay(spool)
    await source.scan(ctx)
    await source.scan(ctx)
    assert [e.identity for e in ctx.events] == [("m-1",)]
    assert len(ctx.evidence_records) == 1  # not again at each scan
