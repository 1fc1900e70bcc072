"""Structured JSON log lines on stderr (one object per line, ``event`` field), written
off the event loop.

Every line is named: taskplane's own records carry their ``event`` (``http_request``,
``task_state_changed``, ``a2a_wake_failed``, ...; listed in ``docs/configuration.md``),
and a library's record is named after its logger. Any ``extra={...}`` keys are
included as fields. Nothing logged here carries a request body, a header value or a
bearer token.

Logging must not slow the event loop, and nothing the network feeds is queued without
a bound: the logging call only makes its record and queues it (:class:`LogWriter`); one writer
thread formats the queued records and writes them in batches, one ``write`` per batch.
The queue is bounded (:data:`LOG_QUEUE_RECORDS`): while it is full, records are
dropped and counted, never waited for, and a ``log_records_dropped`` warning line
gives the count (at most one per :data:`LOG_DROP_REPORT_INTERVAL_S`). At exit the
writer drains the queue (bounded by :data:`LOG_DRAIN_DEADLINE_S`); an unclean exit
loses at most what is queued.

Since records are formatted later, on the writer thread, the values a call logs (its
arguments and ``extra`` fields) must not change after the call: strings, numbers,
``None`` and containers nobody mutates afterwards, as taskplane logs.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Final, TextIO

import attrs

_STANDARD = frozenset(vars(logging.makeLogRecord({})).keys()) | {"message", "asctime"}

SECRET_BEARING_LOGGERS: Final = ("trio-websocket",)
"""Library loggers whose DEBUG lines carry a credential, kept at INFO whatever the
level (rule "Secrets stay private at rest"): ``trio-websocket`` logs the URL it
connects to, and Slack's Socket Mode URL carries a one-time ticket."""

LOG_QUEUE_RECORDS = 10_000
"""Most records waiting for the writer thread, in records (at ~1.5 KB each, about 15 MB
at most); a record logged while this many wait is dropped and counted."""
LOG_BATCH_WINDOW_S = 0.02
"""Seconds the writer lets records gather after the first one arrives, so one ``write``
carries many lines; also how late a line may appear on a quiet server."""
LOG_DRAIN_DEADLINE_S = 2.0
"""Longest :meth:`LogWriter.flush` or :meth:`LogWriter.close` waits for the queued
records to be written, in seconds (a stuck stderr reader must not hang the exit)."""
LOG_DROP_REPORT_INTERVAL_S = 10.0
"""Fewest seconds between two ``log_records_dropped`` warning lines."""


LIBRARY_EVENTS = {"hypercorn.error": "http_server", "hypercorn.access": "http_access"}
"""Event names of library loggers whose own names mislead: hypercorn logs every notice,
informational ones included, on ``hypercorn.error``."""
QUIET_LIBRARIES = ("httpx", "httpx2", "httpcore", "httpcore2")
"""HTTP client libraries whose ``INFO`` lines (one per request the agent's model
client makes) are noise: they log from ``WARNING`` up, unless the level is ``DEBUG``."""


def _event_of(record: logging.LogRecord) -> str:
    """The event name of a record logged without one (a library's own lines): its
    logger's name, dots as underscores (``urllib3.connectionpool`` ->
    ``urllib3_connectionpool``), or its :data:`LIBRARY_EVENTS` name."""
    return LIBRARY_EVENTS.get(record.name) or record.name.replace(".", "_")


class JsonFormatter(logging.Formatter):
    """Formats a record as ``{"ts", "level", "logger", "event", "message", ...extra}``."""

    def __init__(self) -> None:
        super().__init__()
        self._encode = json.JSONEncoder(default=str).encode

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": getattr(record, "event", None) or _event_of(record),
            "message": record.getMessage(),
        }
        # A snapshot of the fields: another handler (a test's capture) may add its
        # own (``message``) on the logging thread while this runs on the writer's.
        for key, value in tuple(vars(record).items()):
            if key not in _STANDARD and key not in line:
                line[key] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return self._encode(line)


@attrs.frozen
class LogStatistics:
    """A reading of a :class:`LogWriter`.

    Attributes:
        queued: records waiting for the writer thread now.
        written: records written (or found unformattable) so far.
        dropped: records dropped so far because the queue was full.
    """

    queued: int
    written: int
    dropped: int


class LogWriter(logging.Handler):
    """A handler that queues records for one writer thread, which formats them with
    this handler's formatter and writes them to ``stream`` in batches.

    Args:
        stream: a text stream (``sys.stderr``); only the writer thread writes to it.
        capacity: most records waiting, in records (:data:`LOG_QUEUE_RECORDS`).
        batch_window_s: seconds records gather before a write (:data:`LOG_BATCH_WINDOW_S`).
        drain_deadline_s: longest :meth:`flush` or :meth:`close` waits, in seconds.
        report_interval_s: fewest seconds between two drop warnings.
        clock: seconds, monotonic (the drop warnings' rate limit).

    Concurrency: :meth:`emit` never waits on the stream or the writer thread: it holds
    a lock only to append to the queue (the writer holds it only to take the queue
    whole); when ``capacity`` records wait, the record is dropped and counted. A
    formatting or write error goes to :meth:`logging.Handler.handleError`, as for any
    handler; the writer thread keeps running. After :meth:`close`, records are written
    on the logging thread (nothing runs then that must not wait).
    """

    def __init__(
        self,
        stream: TextIO,
        *,
        capacity: int = LOG_QUEUE_RECORDS,
        batch_window_s: float = LOG_BATCH_WINDOW_S,
        drain_deadline_s: float = LOG_DRAIN_DEADLINE_S,
        report_interval_s: float = LOG_DROP_REPORT_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1 record, not {capacity}")
        self._stream = stream
        self._capacity = capacity
        self._hurry_at = capacity // 2
        self._batch_window_s = batch_window_s
        self._drain_deadline_s = drain_deadline_s
        self._report_interval_s = report_interval_s
        self._clock = clock
        self._queue_lock = threading.Lock()
        self._pending: list[logging.LogRecord] = []
        self._accepted = 0
        self._dropped = 0
        self._closing = False
        self._stopped = False
        self._stuck = False
        self._wake = threading.Event()  # records wait, or close: a batch is due
        self._now = threading.Event()  # flush, close, half full: skip the batch window
        self._written = 0
        self._written_changed = threading.Condition(threading.Lock())
        self._reported = 0
        self._next_report_at = clock()
        self._thread = threading.Thread(target=self._run, name="taskplane-log-writer", daemon=True)
        self._thread.start()

    def emit(self, record: logging.LogRecord) -> None:
        with self._queue_lock:
            if not self._stopped:
                waiting = len(self._pending)
                if waiting >= self._capacity:
                    self._dropped += 1
                    return
                self._pending.append(record)
                self._accepted += 1
                if waiting == 0:
                    self._wake.set()
                elif waiting == self._hurry_at:
                    self._now.set()
                return
        self._write([record], final=True)

    def statistics(self) -> LogStatistics:
        """The queue's current figures (no waiting)."""
        with self._queue_lock:
            return LogStatistics(
                queued=len(self._pending), written=self._written, dropped=self._dropped
            )

    def flush(self) -> None:
        """Wait until the records queued before this call are written, at most
        ``drain_deadline_s`` seconds (blocks the calling thread)."""
        with self._queue_lock:
            target = self._accepted
            self._now.set()
            self._wake.set()
        with self._written_changed:
            done = self._written_changed.wait_for(
                lambda: self._written >= target or not self._thread.is_alive(),
                self._drain_deadline_s,
            )
        self._stuck = self._stuck or not done

    def close(self) -> None:
        """Write what is queued, then stop the writer thread; waits at most
        ``drain_deadline_s`` seconds (none if a :meth:`flush` already gave up)."""
        with self._queue_lock:
            self._closing = True
            self._now.set()
            self._wake.set()
        if self._thread is not threading.current_thread():
            self._thread.join(0 if self._stuck else self._drain_deadline_s)
        super().close()

    def _run(self) -> None:
        while True:
            self._wake.wait(self._report_due_in())
            if not self._now.is_set():
                self._now.wait(self._batch_window_s)
            with self._queue_lock:
                batch, self._pending = self._pending, []
                through = self._accepted
                closing = self._closing
                if not closing:
                    self._wake.clear()
                    self._now.clear()
            self._write(batch, final=closing)
            with self._written_changed:
                self._written = through
                self._written_changed.notify_all()
            if closing:
                with self._queue_lock:
                    if not self._pending:
                        self._stopped = True
                        return

    def _write(self, batch: list[logging.LogRecord], *, final: bool) -> None:
        lines = []
        for record in batch:
            try:
                lines.append(self.format(record))
            except Exception:
                self.handleError(record)
        report = self._drop_report(final)
        if report is not None:
            try:
                lines.append(self.format(report))
            except Exception:
                self.handleError(report)
        if not lines:
            return
        try:
            self._stream.write("\n".join(lines) + "\n")
            self._stream.flush()
        except Exception:
            self.handleError(report or batch[-1])

    def _report_due_in(self) -> float | None:
        """Seconds until unreported drops are due a warning; ``None``: none wait."""
        if self._dropped == self._reported:
            return None
        return max(0.0, self._next_report_at - self._clock())

    def _drop_report(self, final: bool) -> logging.LogRecord | None:
        """The ``log_records_dropped`` warning, if drops wait and one is due."""
        dropped = self._dropped
        unreported = dropped - self._reported
        now = self._clock()
        if not unreported or (now < self._next_report_at and not final):
            return None
        self._reported = dropped
        self._next_report_at = now + self._report_interval_s
        record = logging.LogRecord(
            "taskplane",
            logging.WARNING,
            __file__,
            0,
            "%d log records dropped: the log queue was full (%d records)",
            (unreported, self._capacity),
            None,
        )
        record.__dict__.update(event="log_records_dropped", dropped=unreported)
        return record


def configure(
    level: str, stream: TextIO | None = None, *, logger: logging.Logger | None = None
) -> LogWriter:
    """Send every log record to ``stream`` (default: stderr) as JSON at ``level``
    (``INFO``, ``DEBUG``, ...) through a :class:`LogWriter`, which it returns (its
    :meth:`~LogWriter.statistics` count the dropped records).

    The loggers of :data:`SECRET_BEARING_LOGGERS` stay at ``INFO`` or above.
    ``logger`` (default: the root logger) has its handlers replaced; a previous
    :class:`LogWriter` is closed (its queue written first). Records stop collecting
    their caller, thread and process (``logging._srcfile``, ``logging.logThreads``,
    ...: process-wide switches), which no line shows; the :data:`QUIET_LIBRARIES`
    log from ``WARNING`` up unless ``level`` is ``DEBUG``. At interpreter exit ``logging.shutdown``
    flushes and closes the writer, so the last lines (``a2a_server_stopped``) are
    written.
    """
    # No line shows where a call was made from, nor its thread or process: skip
    # collecting them for every record (the logging HOWTO's "Optimization" section).
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    writer = LogWriter(stream if stream is not None else sys.stderr)
    writer.setFormatter(JsonFormatter())
    root = logger if logger is not None else logging.getLogger()
    replaced = root.handlers[:]
    root.handlers[:] = [writer]
    root.setLevel(level)
    for name in QUIET_LIBRARIES:
        logging.getLogger(name).setLevel(logging.DEBUG if level == "DEBUG" else logging.WARNING)
    for name in SECRET_BEARING_LOGGERS:
        library = logging.getLogger(name)
        library.setLevel(max(logging.INFO, root.level))
    for handler in replaced:
        if isinstance(handler, LogWriter):
            handler.close()
    return writer
