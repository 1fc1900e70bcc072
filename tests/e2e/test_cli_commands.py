"""End to end: every ``taskplane`` command as a real process on a real SQLite store.

``serve`` with flags only (no ``A2A_*`` variable: it listens by default), flags over
variables, the startup errors that must name their setting, the banner on stdout,
``credentials``, ``card``, and the ``tasks``/``store`` commands against a store a
real server wrote (and their refusal while that server holds the store's lock).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import sqlite3
import stat
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
from click.testing import CliRunner

from taskplane.cli import main
from taskplane.cli.options import FLAG_VARIABLES
from tests.e2e._support import send_text
from tests.e2e.taskplane_proc import (
    EXIT_DEADLINE_S,
    POLL_INTERVAL_S,
    READY_DEADLINE_S,
    REPO_ROOT,
    Spawner,
    TaskplaneProcess,
    free_port,
)

pytestmark = pytest.mark.slow

HTTP_TIMEOUT_S = 30.0


@attrs.frozen
class Done:
    code: int
    stdout: str
    stderr: str


def cli(spawn: Spawner, *args: str, **env: str) -> Done:
    """Run ``python -m taskplane <args>`` to completion (scrubbed env plus ``env``)."""
    process = spawn.start(args, spawn.env(**env))
    code = process.wait_exit()
    return Done(code, process.stdout(), process.stderr())


def cli_in_process(spawn: Spawner, *args: str, **env: str) -> Done:
    """Run ``taskplane <args>`` in this process (click's ``CliRunner``) under exactly the
    environment :func:`cli` gives its process: for an offline command that a test needs
    as a step, not as its subject (:func:`cli` keeps the process boundary)."""
    wanted = spawn.env(**env)
    overlay: dict[str, str | None] = {k: None for k in os.environ if k not in wanted}
    overlay.update(wanted)
    result = CliRunner(env=overlay).invoke(main, list(args), catch_exceptions=False)
    return Done(result.exit_code, result.stdout, result.stderr)


def add_credential(spawn: Spawner, path: Path, principal: str) -> str:
    """``taskplane credentials add`` as a process; returns the new token."""
    done = cli(spawn, "credentials", "add", principal, "--credentials", str(path))
    assert done.code == 0, done
    return done.stdout.strip()


def given_credential(spawn: Spawner, path: Path, principal: str) -> str:
    """What :func:`add_credential` does, in this process: a credential a test needs
    before its subject runs."""
    done = cli_in_process(spawn, "credentials", "add", principal, "--credentials", str(path))
    assert done.code == 0, done
    return done.stdout.strip()


def wait_banner(process: TaskplaneProcess) -> str:
    """The endpoint URL from the banner on stdout, once it is printed."""
    deadline = time.monotonic() + READY_DEADLINE_S
    while True:
        match = re.search(r"A2A endpoint : (\S+)", process.stdout())
        if match:
            return match.group(1)
        if process.returncode is not None:
            raise AssertionError(f"exited before its banner\n{process.describe()}")
        if time.monotonic() >= deadline:
            raise AssertionError(f"no banner within {READY_DEADLINE_S} s\n{process.describe()}")
        time.sleep(POLL_INTERVAL_S)


def send(url: str, token: str, text: str) -> dict[str, Any]:
    response = httpx.post(
        url + "/message:send",
        json={
            "message": {
                "messageId": str(uuid.uuid4()),
                "role": "ROLE_USER",
                "parts": [{"text": text}],
            }
        },
        headers={"Authorization": f"Bearer {token}"},
        timeout=HTTP_TIMEOUT_S,
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def one_line_error(done: Done, *needles: str) -> None:
    assert done.code != 0, done
    assert "Traceback" not in done.stderr, done.stderr
    for needle in needles:
        assert needle in done.stderr, done


# --- serve -------------------------------------------------------------------------------


def test_serve_with_only_a_credentials_file_listens_and_prints_the_banner_on_stdout(
    spawn: Spawner, tmp_path: Path
) -> None:
    credentials = tmp_path / "creds" / "credentials.json"
    token = given_credential(spawn, credentials, "alice")
    process = spawn.start(("serve", "--port", "0", "--credentials", str(credentials)), spawn.env())
    url = wait_banner(process)
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+", url) and not url.endswith(":0"), url
    process.wait_ready(url)
    reply = send(url, token, "hello")
    assert reply["task"]["status"]["state"] == "TASK_STATE_COMPLETED", reply

    stdout = process.stdout()
    default_store = tmp_path / "xdg-data" / "outfitter" / "channels" / "task-plane"
    assert f"store        : {default_store}" in stdout, stdout
    assert f"console      : {url}/console/  (a web page; sign in with the token)" in stdout
    assert '"event"' not in stdout, stdout  # no log line on stdout
    for line in process.stderr().splitlines():
        assert json.loads(line)["event"], line  # nothing but JSON logs on stderr
    assert token not in stdout, "an existing token is not shown, only the command"
    printed = re.search(r"token +: printed by: (.+)", stdout)
    assert printed, stdout
    shown = subprocess.run(
        ["sh", "-c", printed.group(1)],
        capture_output=True,
        text=True,
        check=False,
        timeout=EXIT_DEADLINE_S,
        env=spawn.env(),
        cwd=REPO_ROOT,
    )
    assert shown.stdout.strip() == token, shown


def test_flags_win_over_their_variables(spawn: Spawner, tmp_path: Path) -> None:
    credentials = tmp_path / "credentials.json"
    token = given_credential(spawn, credentials, "alice")
    env_port, flag_port = free_port(), free_port()
    process = spawn.start(
        ("serve", "--port", str(flag_port), "--store", str(tmp_path / "flag-store")),
        spawn.env(
            A2A_PORT=str(env_port),
            A2A_CREDENTIALS_PATH=str(credentials),
            CHANNELS_TASK_STORE_PATH=str(tmp_path / "env-store"),
            TASKPLANE_LOG_LEVEL="ERROR",
        ),
    )
    url = f"http://127.0.0.1:{flag_port}"
    card = process.wait_ready(url)
    assert card["supportedInterfaces"][0]["url"] == url  # type: ignore[index]
    send(url, token, "hello")
    assert (tmp_path / "flag-store" / "taskplane.sqlite3").is_file()
    assert not (tmp_path / "env-store").exists()
    assert process.stderr() == ""  # TASKPLANE_LOG_LEVEL=ERROR applies (no flag given)


def test_a2a_server_off_runs_the_plane_without_a_listener(spawn: Spawner, tmp_path: Path) -> None:
    port = free_port()
    process = spawn.start(
        ("serve", "--port", str(port), "--store", str(tmp_path / "store")),
        spawn.env(A2A_SERVER="0"),
    )
    deadline = time.monotonic() + READY_DEADLINE_S
    while '"channels_ready"' not in process.stderr():
        assert process.returncode is None, process.describe()
        assert time.monotonic() < deadline, process.describe()
        time.sleep(POLL_INTERVAL_S)
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=2):
        pass
    assert process.stdout() == ""


def test_store_compacted_logs_a_readable_message_and_the_counts_as_fields(
    spawn: Spawner, tmp_path: Path
) -> None:
    process = spawn.start(("serve", "--store", str(tmp_path / "store")), spawn.env(A2A_SERVER="0"))
    deadline = time.monotonic() + READY_DEADLINE_S
    while '"channels_ready"' not in process.stderr():
        assert process.returncode is None, process.describe()
        assert time.monotonic() < deadline, process.describe()
        time.sleep(POLL_INTERVAL_S)
    [line] = [e for e in process.log_events() if e["event"] == "store_compacted"]
    assert line["message"] == (
        "store compacted: 0 rows removed (tasks 0, journal 0, contexts 0, evidence 0, "
        "origins 0, reply_anchors 0, deliveries 0)"
    ), line
    assert line["tasks"] == 0 and line["deliveries"] == 0, line


@pytest.mark.parametrize(
    ("env", "flags", "needles"),
    [
        pytest.param({"A2A_SERVER": "yes please"}, (), ("A2A_SERVER='yes please'",), id="server"),
        pytest.param(
            {"A2A_AGENT_RUNTIME": "gpt"}, (), ("A2A_AGENT_RUNTIME='gpt'",), id="env-agent"
        ),
        pytest.param(
            {},
            ("--agent", "openai"),
            ("A2A_AGENT_MODEL",),
            id="agent",
        ),
        pytest.param(
            {"A2A_AGENT_CONCURRENCY": "0"},
            (),
            ("A2A_AGENT_CONCURRENCY='0'", "1 to 64"),
            id="env-concurrency",
        ),
        pytest.param(
            {"A2A_TURN_TIMEOUT_MS": "soon"},
            (),
            ("A2A_TURN_TIMEOUT_MS='soon'",),
            id="env-turn-timeout",
        ),
        pytest.param({}, ("--host", "a..b"), ("'a..b'", "A2A_HOST"), id="host"),
        pytest.param(
            {},
            ("--credentials", "/nonexistent/c.json"),
            ("A2A_CREDENTIALS_PATH", "credentials add"),
            id="no-credentials",
        ),
    ],
)
def test_startup_errors_name_the_setting_at_fault(
    spawn: Spawner,
    tmp_path: Path,
    env: dict[str, str],
    flags: tuple[str, ...],
    needles: tuple[str, ...],
) -> None:
    credentials = tmp_path / "credentials.json"
    given_credential(spawn, credentials, "alice")
    env = {"A2A_CREDENTIALS_PATH": str(credentials), **env}
    done = cli(spawn, "serve", "--port", "0", "--store", str(tmp_path / "store"), *flags, **env)
    one_line_error(done, *needles)
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


@pytest.mark.parametrize(
    ("flag", "value"), [("--agent-concurrency", "65"), ("--turn-timeout-ms", "-1")]
)
def test_out_of_range_turn_flags_are_refused_by_name(
    spawn: Spawner, tmp_path: Path, flag: str, value: str
) -> None:
    done = cli(spawn, "serve", "--port", "0", "--store", str(tmp_path / "store"), flag, value)
    assert done.code == 2, done
    assert f"Invalid value for '{flag}'" in done.stderr
    assert not (tmp_path / "store").exists()


def test_unwritable_store_root_names_the_store_setting(spawn: Spawner, tmp_path: Path) -> None:
    credentials = tmp_path / "credentials.json"
    given_credential(spawn, credentials, "alice")
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    done = cli(
        spawn,
        "serve",
        "--port",
        "0",
        "--credentials",
        str(credentials),
        CHANNELS_TASK_STORE_PATH=str(blocker / "store"),
    )
    one_line_error(done, str(blocker / "store"), "CHANNELS_TASK_STORE_PATH")
    assert done.code == 2


def test_busy_port_names_the_port_setting(spawn: Spawner, tmp_path: Path) -> None:
    credentials = tmp_path / "credentials.json"
    given_credential(spawn, credentials, "alice")
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        done = cli(
            spawn,
            "serve",
            "--port",
            str(port),
            "--credentials",
            str(credentials),
            "--store",
            str(tmp_path / "store"),
        )
    one_line_error(done, f"127.0.0.1:{port}", "A2A_PORT", "--port", "Address already in use")
    assert done.code == 2


@pytest.mark.parametrize(
    "command",
    [
        (),
        ("serve",),
        ("quickstart",),
        ("card",),
        ("tasks",),
        ("tasks", "list"),
        ("tasks", "show"),
        ("tasks", "export"),
        ("store",),
        ("store", "check"),
        ("store", "backup"),
        ("store", "compact"),
        ("store", "stats"),
        ("credentials",),
        ("credentials", "add"),
        ("credentials", "list"),
        ("credentials", "revoke"),
        ("credentials", "token"),
    ],
    ids=lambda c: "-".join(c) or "main",
)
def test_every_command_has_help(spawn: Spawner, command: tuple[str, ...]) -> None:
    done = cli(spawn, *command, "--help")
    assert done.code == 0, done
    assert "Usage: " in done.stdout and len(done.stdout.splitlines()) > 6, done.stdout
    if command in (("serve",), ("quickstart",)):
        flat = " ".join(done.stdout.split())
        for variable in FLAG_VARIABLES.values():
            assert variable in flat, variable


def test_quickstart_refuses_no_listen(spawn: Spawner) -> None:
    done = cli(spawn, "quickstart", "--no-listen")
    assert done.code == 2 and "quickstart always listens" in done.stderr, done


# --- credentials and card ----------------------------------------------------------------


def test_credentials_add_list_token_revoke(spawn: Spawner, tmp_path: Path) -> None:
    path = tmp_path / "new-dir" / "credentials.json"
    first = add_credential(spawn, path, "alice")
    second = add_credential(spawn, path, "alice")
    bob = add_credential(spawn, path, "bob")
    assert len({first, second, bob}) == 3 and len(first) >= 40
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700

    listed = cli(spawn, "credentials", "list", A2A_CREDENTIALS_PATH=str(path))
    assert listed.code == 0, listed
    for token in (first, second, bob):
        assert token not in listed.stdout + listed.stderr
    rows = [line.split() for line in listed.stdout.splitlines()[1:]]
    assert [r[0] for r in rows] == ["alice", "alice", "bob"], listed.stdout

    token = cli(spawn, "credentials", "token", "alice", A2A_CREDENTIALS_PATH=str(path))
    assert token.stdout.strip() == second, "the newest token of the principal"

    revoked = cli(
        spawn,
        "credentials",
        "revoke",
        "alice",
        "--fingerprint",
        rows[1][1],
        A2A_CREDENTIALS_PATH=str(path),
    )
    assert revoked.code == 0, revoked
    tokens = [e["token"] for e in json.loads(path.read_text())["credentials"]]
    assert tokens == [first, bob]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600

    assert cli(spawn, "credentials", "revoke", "alice", A2A_CREDENTIALS_PATH=str(path)).code == 0
    last = cli(spawn, "credentials", "revoke", "bob", A2A_CREDENTIALS_PATH=str(path))
    one_line_error(last, "without any credential")
    unknown = cli(spawn, "credentials", "revoke", "carol", A2A_CREDENTIALS_PATH=str(path))
    one_line_error(unknown, "no token of carol")
    bad = cli(spawn, "credentials", "add", "no spaces", A2A_CREDENTIALS_PATH=str(path))
    assert bad.code == 2 and "no spaces" in bad.stderr
    assert [e["token"] for e in json.loads(path.read_text())["credentials"]] == [bob]


def test_card_prints_the_agent_card_of_these_settings(spawn: Spawner) -> None:
    done = cli(
        spawn,
        "card",
        "--public-url",
        "https://agent.example/a2a",
        A2A_AGENT_NAME="reviewer",
        A2A_PORT="9999",
    )
    assert done.code == 0, done
    card = json.loads(done.stdout)
    assert card["name"] == "reviewer"
    assert card["supportedInterfaces"][0]["url"] == "https://agent.example/a2a"
    bad = cli(spawn, "card", "--public-url", "ftp://x")
    one_line_error(bad, "ftp://x")


# --- tasks and store ---------------------------------------------------------------------


@attrs.frozen
class Written:
    """A store written by a real server (now stopped) and what was sent to it."""

    store: Path
    alice: list[dict[str, Any]]
    bob: list[dict[str, Any]]


@pytest.fixture(scope="module")
def written_once(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Written]:
    """The store, written once per module by a real server (its tests only copy it)."""
    root = tmp_path_factory.mktemp("written")
    spawn = Spawner(root)
    try:
        credentials = root / "credentials.json"
        alice_token = given_credential(spawn, credentials, "alice")
        bob_token = given_credential(spawn, credentials, "bob")
        store = root / "store"
        process = spawn.start(
            ("serve", "--port", "0", "--credentials", str(credentials), "--store", str(store)),
            spawn.env(),
        )
        url = wait_banner(process)
        alice = [send(url, alice_token, t)["task"] for t in ("one", "two", "ask: colour?")]
        bob = [send(url, bob_token, "bob's")["task"]]

        held = cli(spawn, "tasks", "list", "--store", str(store))
        one_line_error(held, f"pid {process.pid}", "stop the server")
        assert cli(spawn, "store", "check", "--store", str(store)).code != 0

        assert process.signal_and_wait(15) == 0, process.describe()
        yield Written(store, alice, bob)
    finally:
        spawn.close()


@pytest.fixture
def written(written_once: Written, tmp_path: Path) -> Written:
    """A private copy of the store :func:`written_once` wrote: a test may change it."""
    store = tmp_path / "store"
    shutil.copytree(written_once.store, store)
    return Written(store, written_once.alice, written_once.bob)


def test_tasks_list_filters_by_principal_state_and_context(
    spawn: Spawner, written: Written
) -> None:
    def listed(*filters: str) -> list[dict[str, Any]]:
        done = cli(spawn, "tasks", "list", "--store", str(written.store), *filters)
        assert done.code == 0, done
        result: list[dict[str, Any]] = json.loads(done.stdout)
        return result

    everything = listed()
    assert len(everything) == 4
    assert {t["id"] for t in listed("--principal", "alice")} == {t["id"] for t in written.alice}
    waiting = listed("--state", "input_required")
    assert [t["id"] for t in waiting] == [written.alice[2]["id"]]
    assert waiting[0]["state"] == "TASK_STATE_INPUT_REQUIRED"
    bob = written.bob[0]
    assert [t["id"] for t in listed("--context", bob["contextId"])] == [bob["id"]]
    assert len(listed("--limit", "2")) == 2
    bad = cli(spawn, "tasks", "list", "--store", str(written.store), "--state", "sleepy")
    assert bad.code == 2 and "sleepy" in bad.stderr


def test_tasks_show_and_export_print_whole_tasks(
    spawn: Spawner, written: Written, tmp_path: Path
) -> None:
    task = written.alice[0]
    shown = cli(spawn, "tasks", "show", task["id"], "--store", str(written.store))
    assert shown.code == 0, shown
    record = json.loads(shown.stdout)
    assert record["principal"] == "alice"
    assert record["task"]["history"] == task["history"]
    assert record["task"]["artifacts"] == task["artifacts"]
    missing = cli(spawn, "tasks", "show", "nope", "--store", str(written.store))
    one_line_error(missing, "no Task nope")

    exported = cli(spawn, "tasks", "export", "--store", str(written.store), "--principal", "alice")
    lines = [json.loads(line) for line in exported.stdout.splitlines()]
    assert {r["task"]["id"] for r in lines} == {t["id"] for t in written.alice}
    out = tmp_path / "export.jsonl"
    to_file = cli(spawn, "tasks", "export", "--store", str(written.store), "-o", str(out))
    assert to_file.code == 0, to_file
    assert len(out.read_text().splitlines()) == 4
    assert stat.S_IMODE(out.stat().st_mode) == 0o600


def test_store_check_passes_then_finds_an_accepted_claim_without_its_task(
    spawn: Spawner, written: Written
) -> None:
    done = cli(spawn, "store", "check", "--store", str(written.store))
    assert (done.code, done.stdout.strip()) == (0, "ok"), done

    lost = written.alice[0]["id"]
    with sqlite3.connect(written.store / "taskplane.sqlite3") as conn:
        conn.execute("DELETE FROM tasks WHERE task_id = ?", (lost,))
    conn.close()
    broken = cli(spawn, "store", "check", "--store", str(written.store))
    assert broken.code == 1, broken
    assert re.search(rf"accepted claim without its Task: \S+ -> Task {lost}", broken.stdout)
    assert "origin of a missing Task: origin-" in broken.stdout


def test_store_backup_is_a_consistent_private_copy(
    spawn: Spawner, written: Written, tmp_path: Path
) -> None:
    target = tmp_path / "backups" / "copy.sqlite3"
    target.parent.mkdir()
    done = cli(spawn, "store", "backup", str(target), "--store", str(written.store))
    assert done.code == 0, done
    assert "backing up" in done.stderr and re.search(r"backed up \d+ pages", done.stderr)
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    with sqlite3.connect(target) as copy:
        assert copy.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert copy.execute("SELECT COUNT(*) FROM tasks").fetchone() == (4,)
    copy.close()
    again = cli(spawn, "store", "backup", str(target), "--store", str(written.store))
    one_line_error(again, str(target))


async def test_store_backup_works_while_the_server_runs_and_writes(
    spawn: Spawner, tmp_path: Path
) -> None:
    server = spawn.serve()
    for n in range(3):
        await send_text(server, f"before backup {n}")
    target = tmp_path / "online.sqlite3"
    done = cli(spawn, "store", "backup", str(target), "--store", str(server.store))
    assert done.code == 0, done
    assert re.search(r"backed up \d+ pages", done.stderr), done
    assert (await send_text(server, "after"))["status"]["state"] == "TASK_STATE_COMPLETED"
    with sqlite3.connect(target) as copy:
        assert copy.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert copy.execute("SELECT COUNT(*) FROM tasks").fetchone() == (3,)
    copy.close()
    assert server.process.returncode is None  # the server ran on throughout


@pytest.mark.parametrize("where", ["missing-dir/copy.sqlite3", "a-file/copy.sqlite3"])
def test_store_backup_names_the_destination_when_it_is_the_problem(
    spawn: Spawner, written: Written, tmp_path: Path, where: str
) -> None:
    (tmp_path / "a-file").write_text("not a directory")
    target = tmp_path / where
    done = cli(spawn, "store", "backup", str(target), "--store", str(written.store))
    one_line_error(done, f"cannot create the backup file {target}")
    assert "there is no store" not in done.stderr, done


def test_store_stats_and_compact_report_json(spawn: Spawner, written: Written) -> None:
    stats = cli(spawn, "store", "stats", "--store", str(written.store))
    assert stats.code == 0, stats
    report = json.loads(stats.stdout)
    assert report["schemaVersion"] >= 1
    assert report["rows"]["tasks"] == 4
    assert report["tasksByState"] == {"TASK_STATE_COMPLETED": 3, "TASK_STATE_INPUT_REQUIRED": 1}
    assert report["tasksByPrincipal"] == {"alice": 3, "bob": 1}

    compacted = cli(spawn, "store", "compact", "--store", str(written.store))
    assert compacted.code == 0, compacted
    result = json.loads(compacted.stdout)
    assert result["removed"]["tasks"] == 0  # everything is within the 30-day window
    assert result["bytesAfter"] <= result["bytesBefore"]


def test_store_commands_refuse_a_missing_store(spawn: Spawner, tmp_path: Path) -> None:
    done = cli(spawn, "store", "stats", "--store", str(tmp_path / "nothing-here"))
    one_line_error(done, "no store at", "CHANNELS_TASK_STORE_PATH")
    assert not (tmp_path / "nothing-here").exists()


# --- ./run -------------------------------------------------------------------------------


def test_run_script_is_posix_sh_and_prints_usage() -> None:
    script = REPO_ROOT / "run"
    assert script.read_text().startswith("#!/bin/sh\n")
    syntax = subprocess.run(["sh", "-n", str(script)], capture_output=True, check=False)
    assert syntax.returncode == 0, syntax
    usage = subprocess.run(
        ["sh", str(script), "nope"],
        capture_output=True,
        text=True,
        check=False,
        timeout=EXIT_DEADLINE_S,
    )
    assert usage.returncode == 2 and "usage: ./run serve" in usage.stderr, usage
    assert "sha256sum" not in script.read_text()


# --- quickstart on a later run -----------------------------------------------------------


def _expanded_curl(stdout: str, env: dict[str, str]) -> list[str]:
    """The banner's curl line as the shell expands it (``$(...)`` run), without curl:
    ``printf`` prints each expanded argument on its own line."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith("curl "))
    command = lines[start].strip()
    while command.endswith("\\"):
        start += 1
        command = command[:-1] + " " + lines[start].strip()
    expanded = subprocess.run(
        ["sh", "-c", "printf '%s\\n' " + command.removeprefix("curl ")],
        capture_output=True,
        text=True,
        check=True,
        timeout=EXIT_DEADLINE_S,
        env=env,
        cwd=REPO_ROOT,
    )
    return expanded.stdout.splitlines()


def test_quickstart_with_existing_credentials_prints_a_command_not_a_placeholder(
    spawn: Spawner, tmp_path: Path
) -> None:
    config_home = tmp_path / "config"
    credentials = config_home / "taskplane" / "credentials.json"
    token = given_credential(spawn, credentials, "local")
    env = spawn.env(XDG_CONFIG_HOME=str(config_home))
    process = spawn.start(("quickstart", "--port", "0", "--store", str(tmp_path / "store")), env)
    url = wait_banner(process)
    stdout = process.stdout()
    assert "<" not in stdout.split("Try it:")[0], stdout  # no placeholder in the table
    assert token not in stdout
    args = _expanded_curl(stdout, env)
    headers = dict(args[i + 1].split(": ", 1) for i, arg in enumerate(args) if arg == "-H")
    assert headers["Authorization"] == f"Bearer {token}"
    body = json.loads(args[args.index("-d") + 1])
    assert str(uuid.UUID(body["message"]["messageId"])) == body["message"]["messageId"]
    assert args[-1] == url + "/message:send"
    replies = [
        httpx.post(
            args[-1], content=args[args.index("-d") + 1], headers=headers, timeout=HTTP_TIMEOUT_S
        ).json()
        for args in (args, _expanded_curl(stdout, env))
    ]
    assert all(r["task"]["status"]["state"] == "TASK_STATE_COMPLETED" for r in replies)
    assert replies[0]["task"]["id"] != replies[1]["task"]["id"], "each rerun is new work"
