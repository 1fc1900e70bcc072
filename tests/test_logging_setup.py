"""The log stream: JSON lines written by one writer thread, off the event loop.

No sleeps: a stream whose ``write`` blocks on an Event the test controls stands for a
slow stderr reader; the test waits on Events the writer sets, never on time, and the
drop warnings' rate limit reads a clock the test sets.
"""

from __future__ import annotations

import io
import json
import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import trio

from taskplane.http.metrics import Metrics, PlaneStatistics
from taskplane.logging_setup import JsonFormatter, LogWriter, configure

WAIT_S = 10.0
"""Longest a test waits for the writer thread to reach a point (a hang, not a timing)."""


class GatedStream(io.StringIO):
    """A text stream whose writes wait until ``gate`` is set; ``entered`` is set once a
    write has begun (the writer thread holds a batch)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.entered = threading.Event()

    def write(self, text: str) -> int:
        self.entered.set()
        assert self.gate.wait(WAIT_S), "the test never opened the gate"
        return super().write(text)


def _events(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


@pytest.fixture
def logger() -> Iterator[logging.Logger]:
    """A logger of its own (not propagating), so the root logger is left alone."""
    log = logging.getLogger("taskplane.tests.logging_setup")
    log.propagate = False
    log.setLevel(logging.DEBUG)
    yield log
    for handler in log.handlers:
        handler.close()
    log.handlers.clear()
    log.propagate = True
    log.setLevel(logging.NOTSET)


def _writer(stream: io.StringIO, **kw: Any) -> LogWriter:
    writer = LogWriter(stream, **kw)
    writer.setFormatter(JsonFormatter())
    return writer


def test_a_line_keeps_its_fields_and_their_order(logger: logging.Logger) -> None:
    stream = io.StringIO()
    writer = _writer(stream)
    logger.addHandler(writer)
    logger.info(
        "%s %s %d",
        "POST",
        "/message:send",
        200,
        extra={"event": "http_request", "method": "POST", "status": 200, "taskId": None},
    )
    writer.close()
    (line,) = stream.getvalue().splitlines()
    assert list(json.loads(line)) == [
        "ts",
        "level",
        "logger",
        "event",
        "message",
        "method",
        "status",
        "taskId",
    ]
    assert line.endswith(
        '"level": "info", "logger": "taskplane.tests.logging_setup", "event": "http_request",'
        ' "message": "POST /message:send 200", "method": "POST", "status": 200, "taskId": null}'
    )


def test_a_full_queue_drops_records_and_counts_them(logger: logging.Logger) -> None:
    stream = GatedStream()
    writer = _writer(stream, capacity=4, batch_window_s=0)
    logger.addHandler(writer)
    logger.info("first", extra={"event": "first"})
    assert stream.entered.wait(WAIT_S)  # the writer holds "first", stuck in write
    for n in range(7):
        logger.info("queued %d", n, extra={"event": "queued"})
    figures = writer.statistics()
    assert (figures.queued, figures.dropped, figures.written) == (4, 3, 0)
    stream.gate.set()
    writer.close()
    events = _events(stream)
    assert [e["message"] for e in events[:5]] == ["first", *(f"queued {n}" for n in range(4))]
    assert events[5]["event"] == "log_records_dropped"
    assert events[5]["level"] == "warning"
    assert events[5]["dropped"] == 3
    assert events[5]["message"] == "3 log records dropped: the log queue was full (4 records)"
    assert len(events) == 6
    assert writer.statistics().dropped == 3


def test_close_writes_every_queued_record_without_waiting_for_the_batch_window(
    logger: logging.Logger,
) -> None:
    stream = io.StringIO()
    # A window far longer than the drain deadline: only skipping it writes anything.
    writer = _writer(stream, batch_window_s=3600.0, drain_deadline_s=WAIT_S)
    logger.addHandler(writer)
    for n in range(50):
        logger.info("line %d", n)
    logger.info("A2A server stopped", extra={"event": "a2a_server_stopped"})
    writer.close()
    events = _events(stream)
    assert [e["message"] for e in events] == [
        *(f"line {n}" for n in range(50)),
        events[-1]["message"],
    ]
    assert events[-1]["event"] == "a2a_server_stopped"
    assert writer.statistics() == type(writer.statistics())(queued=0, written=51, dropped=0)


def test_flush_returns_once_what_was_queued_is_written(logger: logging.Logger) -> None:
    stream = io.StringIO()
    writer = _writer(stream, batch_window_s=3600.0, drain_deadline_s=WAIT_S)
    logger.addHandler(writer)
    logger.info("before the flush")
    writer.flush()
    assert [e["message"] for e in _events(stream)] == ["before the flush"]
    writer.close()


def test_a_record_logged_after_close_is_still_written(logger: logging.Logger) -> None:
    stream = io.StringIO()
    writer = _writer(stream)
    logger.addHandler(writer)
    writer.close()
    logger.warning("late", extra={"event": "late"})
    assert [e["event"] for e in _events(stream)] == ["late"]


def test_drop_warnings_are_rate_limited_and_the_last_count_comes_at_close(
    logger: logging.Logger,
) -> None:
    now = [100.0]
    stream = GatedStream()
    writer = _writer(
        stream, capacity=1, batch_window_s=0, report_interval_s=10.0, clock=lambda: now[0]
    )
    logger.addHandler(writer)

    def overflow(count: int) -> None:
        """One record reaches the (blocked) writer, one waits, ``count`` are dropped."""
        stream.entered.clear()
        logger.info("taken")
        assert stream.entered.wait(WAIT_S)
        for _ in range(count + 1):
            logger.info("over")
        stream.gate.set()
        writer.flush()
        stream.gate.clear()

    overflow(2)  # the first warning is due at once: 2
    overflow(5)  # within 10 s of it: none
    now[0] += 10.0
    overflow(1)  # due again: the next batch carries the 5; the 1 waits
    now[0] += 1.0
    overflow(4)  # not due: the 1 and the 4 at close
    stream.gate.set()
    writer.close()
    warnings = [e["dropped"] for e in _events(stream) if e["event"] == "log_records_dropped"]
    assert warnings == [2, 5, 5]
    assert writer.statistics().dropped == 12


async def test_the_trio_thread_never_waits_for_a_slow_stream(logger: logging.Logger) -> None:
    stream = GatedStream()
    writer = _writer(stream, capacity=100, batch_window_s=0)
    logger.addHandler(writer)
    # Only a hang would fire this: it frees the writer so the test fails instead.
    watchdog = threading.Timer(WAIT_S, stream.gate.set)
    watchdog.start()
    try:
        logger.info("first")
        await trio.to_thread.run_sync(stream.entered.wait, WAIT_S)
        for n in range(1000):
            logger.info("record %d", n, extra={"event": "http_request", "status": 200})
            if n % 100 == 0:
                await trio.lowlevel.checkpoint()
        assert not stream.gate.is_set(), "the loop waited for the stream"
        figures = writer.statistics()
        assert (figures.queued, figures.dropped) == (100, 900)
    finally:
        watchdog.cancel()
        stream.gate.set()
        writer.close()
    assert writer.statistics().written == 101


def test_pytest_capture_and_the_writer_see_the_same_records(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """caplog attaches its own handler to the root logger; ours sits beside it."""
    stream = io.StringIO()
    writer = _writer(stream)
    root = logging.getLogger()
    root.addHandler(writer)
    try:
        with caplog.at_level(logging.INFO):
            logging.getLogger("taskplane.http").info(
                "GET /tasks 200", extra={"event": "http_request", "status": 200}
            )
    finally:
        root.removeHandler(writer)
        writer.close()
    (record,) = [r for r in caplog.records if getattr(r, "event", None) == "http_request"]
    assert getattr(record, "status", None) == 200
    assert [(e["event"], e["status"]) for e in _events(stream)] == [("http_request", 200)]


@pytest.fixture
def switches(monkeypatch: pytest.MonkeyPatch) -> None:
    """The logging module's process-wide switches, restored after the test."""
    for name in ("_srcfile", "logThreads", "logProcesses", "logMultiprocessing"):
        monkeypatch.setattr(logging, name, getattr(logging, name))


def test_configure_replaces_the_handlers_and_closes_its_previous_writer(
    logger: logging.Logger, switches: None
) -> None:
    first_stream, second_stream = io.StringIO(), io.StringIO()
    first = configure("INFO", first_stream, logger=logger)
    logger.info("to the first", extra={"event": "one"})
    second = configure("WARNING", second_stream, logger=logger)
    assert logger.handlers == [second]
    assert [e["event"] for e in _events(first_stream)] == ["one"]  # drained at replacement
    assert first.statistics().written == 1
    logger.info("below the level")
    logger.warning("kept", extra={"event": "two"})
    second.close()
    assert [e["event"] for e in _events(second_stream)] == ["two"]
    # Records no longer collect what no line shows.
    assert (logging._srcfile, logging.logThreads, logging.logProcesses) == (None, False, False)


def test_the_dropped_count_is_a_counter_in_metrics() -> None:
    text = Metrics().render(PlaneStatistics(log_records_dropped=3)).decode()
    assert "# TYPE taskplane_log_records_dropped_total counter" in text
    assert "taskplane_log_records_dropped_total 3.0" in text
