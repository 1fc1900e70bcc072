"""Library log lines: the HTTP server's informational lines are named ``http_server``
(not ``hypercorn_error``), and the HTTP client libraries' info line per model call is not
logged unless the level is DEBUG."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from taskplane.logging_setup import QUIET_LIBRARIES, configure


@pytest.fixture
def logger(monkeypatch: pytest.MonkeyPatch) -> Iterator[logging.Logger]:
    for name in ("_srcfile", "logThreads", "logProcesses", "logMultiprocessing"):
        monkeypatch.setattr(logging, name, getattr(logging, name))
    levels = {name: logging.getLogger(name).level for name in QUIET_LIBRARIES}
    log = logging.getLogger("taskplane.tests.library_logs")
    log.propagate = False
    yield log
    for handler in log.handlers:
        handler.close()
    log.handlers.clear()
    log.propagate = True
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)


def _lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_the_http_servers_info_lines_are_http_server(logger: logging.Logger) -> None:
    stream = io.StringIO()
    writer = configure("INFO", stream, logger=logger)
    record = logging.makeLogRecord(
        {
            "name": "hypercorn.error",
            "levelno": logging.INFO,
            "levelname": "INFO",
            "msg": "Running on http://127.0.0.1:8788 (CTRL + C to quit)",
        }
    )
    logger.handle(record)
    writer.close()
    (line,) = _lines(stream)
    assert (line["event"], line["level"]) == ("http_server", "info")


@pytest.mark.parametrize(("level", "shown"), [("INFO", False), ("DEBUG", True)])
def test_the_http_clients_info_lines_show_only_at_debug(
    logger: logging.Logger, level: str, shown: bool
) -> None:
    configure(level, io.StringIO(), logger=logger).close()
    for name in QUIET_LIBRARIES:
        assert logging.getLogger(name).isEnabledFor(logging.INFO) is shown
        assert logging.getLogger(name).isEnabledFor(logging.WARNING)
