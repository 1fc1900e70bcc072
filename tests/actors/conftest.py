"""Fixtures for every actor test: INFO log records are captured (tests assert the
named log events the actors emit)."""

from __future__ import annotations

import logging

import pytest


@pytest.fixture(autouse=True)
def _info_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
