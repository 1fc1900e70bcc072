"""Structured JSON log lines on stderr (one object per line, ``event`` field).

Every line is named: taskplane's own records carry their ``event`` (``http_request``,
``task_state_changed``, ``a2a_wake_failed``, ...; listed in ``docs/configuration.md``),
and a library's record is named after its logger. Any ``extra={...}`` keys are
included as fields. Nothing logged here carries a request body, a header value or a
bearer token.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

_STANDARD = frozenset(vars(logging.makeLogRecord({})).keys()) | {"message", "asctime"}


def _event_of(record: logging.LogRecord) -> str:
    """The event name of a record logged without one (a library's own lines): its
    logger's name, dots as underscores (``hypercorn.error`` -> ``hypercorn_error``)."""
    return record.name.replace(".", "_")


class JsonFormatter(logging.Formatter):
    """Formats a record as ``{"ts", "level", "logger", "event", "message", ...extra}``."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": getattr(record, "event", None) or _event_of(record),
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and key not in line:
                line[key] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def configure(level: str) -> None:
    """Send every log record to stderr as JSON at ``level`` (``INFO``, ``DEBUG``, ...)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
