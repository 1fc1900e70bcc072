"""End to end: the official A2A JavaScript SDK client (``@a2a-js/sdk``), unmodified, run
with the OS's Node.js against the real ``taskplane serve`` process, on both bindings.

The client and its scenarios live in ``tests/e2e/js_client`` (``scenarios.mjs``; the
SDK pinned by the committed ``package-lock.json``, installed there by ``npm ci``, which
``.ci/run`` runs when ``node_modules`` is missing). One run of ``scenarios.mjs`` per
binding drives the whole operation set: the card and the binding the client chose,
blocking and non-blocking sends, a direct reply, a stream, get (``historyLength``,
unknown Task), list, cancel (then not cancelable), subscribe (then a terminal Task),
input-required then the answer by ``taskId``, a duplicate and a conflict. It prints one
JSON line per scenario; every scenario must pass.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.taskplane_proc import RunningServer, Spawner

pytestmark = pytest.mark.slow

CLIENT_DIR = Path(__file__).parent / "js_client"
RUN_DEADLINE_S = 120.0
"""Upper bound for one binding's whole scenario run (it takes a few seconds)."""
SCENARIOS = (
    "card_and_binding",
    "blocking_send",
    "direct_reply",
    "non_blocking_send",
    "stream",
    "get_with_history_length",
    "list",
    "cancel",
    "subscribe",
    "input_required_then_answer",
    "duplicate_and_conflict",
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """The real server: free port, credentials file, store in a temp dir; always stopped."""
    spawner = Spawner(tmp_path_factory.mktemp("js-e2e"))
    try:
        yield spawner.serve(blocking_timeout_ms=20_000)
    finally:
        spawner.close()


def node() -> str:
    """The OS's Node.js, with the SDK installed beside the scenarios (else a clear failure)."""
    found = shutil.which("node")
    assert found is not None, "Node.js (>= 20) is needed: install the OS's nodejs package"
    sdk = CLIENT_DIR / "node_modules" / "@a2a-js" / "sdk"
    assert sdk.is_dir(), f"run `npm ci` in {CLIENT_DIR} first (.ci/run does)"
    return found


@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])
def test_js_sdk_client_runs_every_operation(server: RunningServer, binding: str) -> None:
    completed = subprocess.run(
        [node(), "scenarios.mjs", server.url, server.token, binding],
        cwd=CLIENT_DIR,
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
