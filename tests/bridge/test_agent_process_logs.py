"""What a child program's output costs the log: a protocol line over the limit is
dropped with one log line saying so, and a stderr flood becomes a bounded number of
records plus one summary per second (in process, virtual time)."""

from __future__ import annotations

import logging

import pytest
import trio
import trio.testing

from taskplane.bridge.agent_process import STDERR_LINES_PER_S, AgentProcess
from taskplane.bridge.jsonrpc import LineSplitter
from tests.support.virtual import events


def test_a_line_over_the_limit_is_dropped_and_reported_with_its_size() -> None:
    dropped: list[int] = []
    splitter = LineSplitter(limit=8, on_drop=dropped.append)
    lines = list(splitter.feed(b"short\n" + b"x" * 20 + b"\nok\n"))
    assert lines == [b"short", b"ok"]
    assert dropped == [20] and splitter.dropped == 1
    # Across chunks too: the line ends in a later chunk.
    assert list(splitter.feed(b"y" * 6)) == []
    assert list(splitter.feed(b"y" * 6 + b"\nfine\n")) == [b"fine"]
    assert dropped == [20, 12]


async def _messages(message: dict[str, object]) -> None:
    raise AssertionError("no message expected")


async def test_an_over_long_protocol_line_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    process = AgentProcess(("unused",), _messages, lambda reason: None)
    stream = trio.testing.MemoryReceiveStream()
    stream.put_data(b"z" * (17 * 1024 * 1024) + b"\n")
    stream.put_eof()
    with caplog.at_level(logging.WARNING):
        await process._read(stream)
    (record,) = events(caplog, "agent_protocol_error")
    assert record.bytes == 17 * 1024 * 1024  # type: ignore[attr-defined]
    assert "over the 16777216-byte limit" in record.getMessage()


async def test_a_stderr_flood_is_bounded_and_summarized(
    caplog: pytest.LogCaptureFixture, autojump_clock: trio.testing.MockClock
) -> None:
    process = AgentProcess(("unused",), _messages, lambda reason: None)
    stream = trio.testing.MemoryReceiveStream()
    stream.put_data(b"".join(b"line %d\n" % i for i in range(20_000)))
    stream.put_eof()
    with caplog.at_level(logging.INFO):
        await process._pump_stderr(stream)
    assert len(events(caplog, "agent_stderr")) == STDERR_LINES_PER_S
    (summary,) = events(caplog, "agent_stderr_suppressed")
    assert summary.lines == 20_000 - STDERR_LINES_PER_S  # type: ignore[attr-defined]


async def test_a_flood_is_summarized_at_the_end_of_its_second_even_if_the_program_goes_quiet(
    caplog: pytest.LogCaptureFixture, autojump_clock: trio.testing.MockClock
) -> None:
    process = AgentProcess(("unused",), _messages, lambda reason: None)
    stream = trio.testing.MemoryReceiveStream()
    stream.put_data(b"".join(b"line %d\n" % i for i in range(STDERR_LINES_PER_S + 50)))
    with caplog.at_level(logging.INFO):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(process._pump_stderr, stream)
            await trio.sleep(0.5)
            assert events(caplog, "agent_stderr_suppressed") == []  # the second is not over
            await trio.sleep(1.0)  # the program wrote nothing more, its stream stays open
            (summary,) = events(caplog, "agent_stderr_suppressed")
            assert summary.lines == 50  # type: ignore[attr-defined]
            nursery.cancel_scope.cancel()
    assert len(events(caplog, "agent_stderr_suppressed")) == 1
