"""End to end: the ``taskplane`` command line as a real process.

``serve`` configuration errors, the store-root lock between two processes, the
``quickstart`` first run (credentials file, printed curl line that works), store file
modes, and shutdown on SIGTERM/SIGINT followed by a restart on the same store.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import signal
import stat
import subprocess
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.taskplane_proc import (
    EXIT_DEADLINE_S,
    RunningServer,
    Spawner,
    free_port,
)

pytestmark = pytest.mark.slow

HTTP_TIMEOUT_S = 30.0
SHUTDOWN_SIGNALS = [
    pytest.param(signal.SIGTERM, id="SIGTERM"),
    pytest.param(signal.SIGINT, id="SIGINT"),
]


def send_text(server: RunningServer, text: str, **configuration: Any) -> dict[str, Any]:
    """``POST /message:send`` (blocking unless told otherwise); the Task JSON."""
    body: dict[str, Any] = {
        "message": {
            "messageId": f"cli-{uuid.uuid4()}",
            "role": "ROLE_USER",
            "parts": [{"text": text}],
        }
    }
    if configuration:
        body["configuration"] = configuration
    response = httpx.post(
        server.url + "/message:send",
        json=body,
        headers=server.auth_headers(),
        timeout=HTTP_TIMEOUT_S,
    )
    assert response.status_code == 200, response.text
    task: dict[str, Any] = response.json()["task"]
    return task


def get_task(server: RunningServer, task_id: str) -> httpx.Response:
    return httpx.get(
        f"{server.url}/tasks/{task_id}", headers=server.auth_headers(), timeout=HTTP_TIMEOUT_S
    )


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def assert_no_traceback(output: str) -> None:
    assert "Traceback" not in output, output


# --- configuration errors ---------------------------------------------------------------


def test_serve_without_credentials_path_exits_naming_the_variable(
    spawn: Spawner, tmp_path: Path
) -> None:
    env = spawn.env(
        A2A_SERVER="1",
        A2A_HOST="127.0.0.1",
        A2A_PORT=str(free_port()),
        CHANNELS_TASK_STORE_PATH=str(tmp_path / "store"),
    )
    process = spawn.start(("serve",), env)
    code = process.wait_exit()
    assert code != 0, process.describe()
    assert "A2A_CREDENTIALS_PATH" in process.stderr(), process.describe()
    assert_no_traceback(process.stderr())


def test_second_server_on_the_same_store_fails_naming_root_and_pid(
    spawn: Spawner, tmp_path: Path
) -> None:
    store = tmp_path / "shared-store"
    first = spawn.serve(store=store)
    task = send_text(first, "before the second server")

    second = spawn.start(
        ("serve",),
        spawn.env(
            A2A_SERVER="1",
            A2A_CREDENTIALS_PATH=str(first.credentials),
            A2A_HOST="127.0.0.1",
            A2A_PORT=str(free_port()),
            CHANNELS_TASK_STORE_PATH=str(store),
        ),
    )
    code = second.wait_exit()
    message = second.stderr()
    assert code != 0, second.describe()
    assert str(store) in message, second.describe()
    assert re.search(rf"\bpid {first.process.pid}\b", message), second.describe()
    assert_no_traceback(message)

    # The first server is unaffected.
    assert first.process.returncode is None, first.process.describe()
    assert get_task(first, task["id"]).json()["status"]["state"] == "TASK_STATE_COMPLETED"


# --- quickstart -------------------------------------------------------------------------


def _printed_curl(output: str) -> str:
    """The ``curl ...`` command printed by quickstart, continuation lines joined."""
    lines = output.splitlines()
    for index, line in enumerate(lines):
        if line.strip().startswith("curl "):
            command = line.strip()
            while command.endswith("\\") and index + 1 < len(lines):
                index += 1
                command = command[:-1] + " " + lines[index].strip()
            return command
    raise AssertionError(f"no curl line in the quickstart output:\n{output}")


def _run_curl(argv: list[str]) -> dict[str, Any]:
    """Run the printed curl command, or replay it with httpx when curl is missing."""
    if shutil.which(argv[0]) is not None:
        done = subprocess.run(argv, capture_output=True, timeout=HTTP_TIMEOUT_S, check=False)
        assert done.returncode == 0, done
        result: dict[str, Any] = json.loads(done.stdout)
        return result
    headers: dict[str, str] = {}
    data: str | None = None
    url = ""
    args = iter(argv[1:])
    for arg in args:
        if arg == "-H":
            name, _, value = next(args).partition(":")
            headers[name.strip()] = value.strip()
        elif arg == "-d":
            data = next(args)
        elif not arg.startswith("-"):
            url = arg
    assert data is not None and url, argv
    response = httpx.post(url, content=data, headers=headers, timeout=HTTP_TIMEOUT_S)
    replayed: dict[str, Any] = response.json()
    return replayed


def test_quickstart_creates_credentials_and_prints_a_working_curl(
    spawn: Spawner, tmp_path: Path
) -> None:
    port = free_port()
    config_home = tmp_path / "fresh-config"
    assert not config_home.exists()
    process = spawn.start(
        ("quickstart",),
        spawn.env(
            XDG_CONFIG_HOME=str(config_home),
            A2A_HOST="127.0.0.1",
            A2A_PORT=str(port),
            CHANNELS_TASK_STORE_PATH=str(tmp_path / "store"),
        ),
    )
    url = f"http://127.0.0.1:{port}"
    process.wait_ready(url)

    credentials = config_home / "taskplane" / "credentials.json"
    assert credentials.is_file(), process.describe()
    assert mode(credentials) == 0o600, oct(mode(credentials))
    entries = json.loads(credentials.read_text())["credentials"]
    assert len(entries) == 1, entries
    token = entries[0]["token"]

    output = process.stdout() + process.stderr()
    assert url in output, output
    assert token in output, output
    command = _printed_curl(output)
    argv = shlex.split(command)
    assert argv[0] == "curl" and f"Bearer {token}" in command, command
    assert any(arg.startswith(url + "/") for arg in argv), command

    reply = _run_curl(argv)
    assert reply["task"]["status"]["state"] == "TASK_STATE_COMPLETED", reply


# --- the store on disk ------------------------------------------------------------------


def test_store_directory_is_0700_and_its_files_0600(spawn: Spawner, tmp_path: Path) -> None:
    store = tmp_path / "new-store"
    server = spawn.serve(store=store, umask=0o022)
    send_text(server, "write something")

    assert mode(store) == 0o700, oct(mode(store))
    database = store / "taskplane.sqlite3"
    assert database.is_file(), sorted(p.name for p in store.iterdir())
    assert mode(database) == 0o600, oct(mode(database))
    for path in sorted(store.rglob("*")):
        expected = 0o700 if path.is_dir() else 0o600
        assert mode(path) == expected, f"{path}: {oct(mode(path))}"


# --- shutdown and restart ---------------------------------------------------------------


@pytest.mark.parametrize("sig", SHUTDOWN_SIGNALS)
def test_signal_shuts_down_cleanly(spawn: Spawner, sig: signal.Signals) -> None:
    server = spawn.serve()
    send_text(server, f"before {sig.name}")
    code = server.process.signal_and_wait(sig, deadline_s=EXIT_DEADLINE_S)
    assert code == 0, f"exit status {code} after {sig.name}\n{server.process.describe()}"
    assert_no_traceback(server.process.stderr())


@pytest.mark.parametrize("sig", SHUTDOWN_SIGNALS)
def test_restart_on_the_same_store_serves_the_earlier_task(
    spawn: Spawner, tmp_path: Path, sig: signal.Signals
) -> None:
    store = tmp_path / "durable-store"
    first = spawn.serve(store=store)
    task = send_text(first, "remember me")
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", task
    first.process.signal_and_wait(sig, deadline_s=EXIT_DEADLINE_S)

    second = spawn.serve(store=store)
    response = get_task(second, task["id"])
    assert response.status_code == 200, response.text
    again = response.json()
    assert again["id"] == task["id"]
    assert again["contextId"] == task["contextId"]
    assert again["status"]["state"] == "TASK_STATE_COMPLETED"
    assert again["artifacts"] == task["artifacts"]
    assert again["history"] == task["history"]
