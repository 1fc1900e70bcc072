"""End to end: the official ``a2a-sdk`` 0.3.x Python client, unmodified, against the real
``taskplane serve`` with ``TASKPLANE_A2A_COMPAT=0.3``, over each of its transports (JSON-RPC,
its default, and the 0.3 HTTP+JSON binding at ``/v1/...``).

The 0.3 SDK cannot share a virtual environment with the 1.x SDK the suite pins, so the
client runs in its own: ``<pytest cache>/a2a-sdk-0.3/venv``, made on first use with
``python -m venv`` and ``pip install a2a-sdk==`` :data:`SDK_VERSION` (pip's ordinary
index and cache; later runs reuse it). Its scenarios (``sdk03_client/scenarios.py``) run
as a subprocess: the card, blocking and non-blocking sends, a direct reply, a stream,
get, cancel (then not cancelable), resubscribe, input-required then the answer. They
print one JSON line each; every scenario must pass.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.taskplane_proc import RunningServer, Spawner

pytestmark = pytest.mark.slow

SDK_VERSION = "0.3.26"
"""The exact ``a2a-sdk`` 0.3 release the scenarios run with."""
CLIENT = Path(__file__).parent / "sdk03_client" / "scenarios.py"
INSTALL_DEADLINE_S = 600.0
RUN_DEADLINE_S = 120.0
SCENARIOS = (
    "card_fetch",
    "blocking_send",
    "direct_reply",
    "non_blocking_send",
    "stream",
    "get",
    "cancel",
    "resubscribe",
    "input_required_then_answer",
)


def sdk03_python(cache: pytest.Cache) -> Path:
    """The interpreter of a virtual environment holding ``a2a-sdk==SDK_VERSION``."""
    venv = cache.mkdir(f"a2a-sdk-{SDK_VERSION}") / "venv"
    python = venv / "bin" / "python"
    marker = venv / "installed"
    if not marker.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", f"a2a-sdk=={SDK_VERSION}"],
            check=True,
            timeout=INSTALL_DEADLINE_S,
        )
        marker.write_text(SDK_VERSION)
    return python


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """The real server with 0.3 compatibility on; always stopped."""
    spawner = Spawner(tmp_path_factory.mktemp("sdk03-e2e"))
    try:
        yield spawner.serve(blocking_timeout_ms=20_000, env={"TASKPLANE_A2A_COMPAT": "0.3"})
    finally:
        spawner.close()


def test_card_keeps_its_v1_fields_beside_the_v03_ones(server: RunningServer) -> None:
    card = server.card
    assert card["protocolVersion"] == "0.3.0"
    assert card["preferredTransport"] == "JSONRPC"
    assert [i["protocolBinding"] for i in card["supportedInterfaces"]] == ["HTTP+JSON", "JSONRPC"]
    assert {i["protocolVersion"] for i in card["supportedInterfaces"]} == {"1.0"}


@pytest.mark.parametrize("transport", ["JSONRPC", "HTTP+JSON"])
def test_sdk03_client_runs_every_operation(
    server: RunningServer, request: pytest.FixtureRequest, transport: str
) -> None:
    assert request.config.cache is not None
    python = sdk03_python(request.config.cache)
    completed = subprocess.run(
        [str(python), str(CLIENT), server.url, server.token, transport],
        capture_output=True,
        text=True,
        timeout=RUN_DEADLINE_S,
        check=False,
    )
    results = [json.loads(line) for line in completed.stdout.splitlines() if line.startswith("{")]
    failures = [r for r in results if not r["ok"]]
    assert failures == [], (failures, completed.stderr[-2000:])
    assert [r["scenario"] for r in results] == list(SCENARIOS), completed.stderr[-2000:]
    assert completed.returncode == 0, completed.stderr[-2000:]
