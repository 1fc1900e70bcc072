"""The real ``taskplane`` process, for the end-to-end tests.

Every process is started as ``<venv python> -m taskplane <command>`` from the repository
root, with a scrubbed environment (no inherited ``A2A_*``, ``CHANNELS_*``,
``TASKPLANE_*``, XDG or native-source variables), its stdout/stderr in files under the test's
temporary directory, and is always stopped at teardown: SIGTERM, then SIGKILL after a
bounded grace period. Every wait here has a deadline; readiness is "the public Agent
Card answers", polled.
"""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import attrs
import httpx

REPO_ROOT = Path(__file__).resolve().parents[2]
CARD_PATH = "/.well-known/agent-card.json"
READY_DEADLINE_S = 30.0
"""Upper bound for a process to answer its Agent Card (imports, store open, bind)."""
STOP_GRACE_S = 10.0
"""How long a stop waits after SIGTERM (or the given signal) before SIGKILL."""
EXIT_DEADLINE_S = 30.0
"""Upper bound for a process that is expected to exit on its own."""
POLL_INTERVAL_S = 0.05
_SCRUBBED_PREFIXES = (
    "A2A_",
    "CHANNELS_",
    "TASKPLANE_",
    "XDG_",
    "OUTFITTER_",
    "RELAY_",
    "GITHUB_",
    "SLACK_",
    "JMAP_",
    "MATTERMOST_",
    "ZULIP_",
    "FORGEJO_",
)


def _default_signal_dispositions() -> None:
    """In the child, before exec: SIGINT and SIGTERM back to their defaults.

    A process started from a non-interactive shell's background job (CI runners, tool
    harnesses) inherits SIGINT *ignored*, and Python then installs no KeyboardInterrupt
    handler; a user's server started from a terminal has the default disposition.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _child_setup(descriptor_limit: int | None) -> Callable[[], None]:
    """The child's setup before exec: default signal dispositions and, when given,
    ``RLIMIT_NOFILE`` set to ``descriptor_limit`` (soft and hard alike)."""

    def setup() -> None:
        _default_signal_dispositions()
        if descriptor_limit is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (descriptor_limit, descriptor_limit))

    return setup


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the tests know the URL
    before the process starts, and check the card advertises exactly it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def write_credentials(path: Path, entries: Sequence[tuple[str, str]]) -> Path:
    """Write an ``A2A_CREDENTIALS_PATH`` file with ``(token, principal)`` entries."""
    document = {"credentials": [{"token": t, "principal": p} for t, p in entries]}
    path.write_text(json.dumps(document))
    path.chmod(0o600)
    return path


def base_env(home: Path, **overrides: str) -> dict[str, str]:
    """The parent's environment without taskplane/XDG variables, HOME set to ``home``
    (so no default path can reach the real user's files), plus ``overrides``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_SCRUBBED_PREFIXES)}
    env["HOME"] = str(home)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(overrides)
    return env


class TaskplaneProcess:
    """One ``python -m taskplane ...`` child process with its output captured in files."""

    def __init__(
        self,
        args: Sequence[str],
        env: Mapping[str, str],
        log_dir: Path,
        name: str,
        umask: int = 0o022,
        descriptor_limit: int | None = None,
    ) -> None:
        log_dir.mkdir(parents=True, exist_ok=True)
        self.args = tuple(args)
        self.stdout_path = log_dir / f"{name}.stdout"
        self.stderr_path = log_dir / f"{name}.stderr"
        with self.stdout_path.open("wb") as out, self.stderr_path.open("wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "taskplane", *args],
                env=dict(env),
                cwd=REPO_ROOT,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                umask=umask,
                preexec_fn=_child_setup(descriptor_limit),
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def returncode(self) -> int | None:
        return self.proc.poll()

    def stdout(self) -> str:
        return self.stdout_path.read_text(errors="replace")

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def log_events(self) -> list[dict[str, object]]:
        """The JSON log lines on stderr (other lines are skipped)."""
        events = []
        for line in self.stderr().splitlines():
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                events.append(value)
        return events

    def describe(self) -> str:
        """Exit status and captured output, for assertion messages."""
        return (
            f"taskplane {' '.join(self.args)} (pid {self.pid}, exit {self.returncode})\n"
            f"--- stdout ---\n{self.stdout()}\n--- stderr ---\n{self.stderr()}"
        )

    def wait_ready(self, base_url: str, deadline_s: float = READY_DEADLINE_S) -> dict[str, object]:
        """Poll ``GET <base_url>/.well-known/agent-card.json`` until it answers 200.

        Returns the card. Fails (with the captured output) if the process exits first
        or the deadline passes.
        """
        deadline = time.monotonic() + deadline_s
        last_error = "no attempt"
        with httpx.Client(timeout=2.0) as client:
            while True:
                if self.returncode is not None:
                    raise AssertionError(f"exited before serving its card\n{self.describe()}")
                try:
                    response = client.get(base_url + CARD_PATH)
                except httpx.TransportError as exc:
                    last_error = repr(exc)
                else:
                    if response.status_code == 200:
                        card: dict[str, object] = response.json()
                        return card
                    last_error = f"HTTP {response.status_code}: {response.text[:200]}"
                if time.monotonic() >= deadline:
                    raise AssertionError(
                        f"the Agent Card did not answer within {deadline_s} s "
                        f"(last: {last_error})\n{self.describe()}"
                    )
                time.sleep(POLL_INTERVAL_S)

    def wait_exit(self, deadline_s: float = EXIT_DEADLINE_S) -> int:
        """Wait for the process to exit on its own; fail (and kill it) at the deadline."""
        try:
            return self.proc.wait(timeout=deadline_s)
        except subprocess.TimeoutExpired:
            self.stop()
            raise AssertionError(
                f"did not exit within {deadline_s} s; killed\n{self.describe()}"
            ) from None

    def signal_and_wait(self, sig: int, deadline_s: float = STOP_GRACE_S) -> int:
        """Send ``sig`` and wait for the exit; fail (and kill it) at the deadline."""
        if self.returncode is None:
            self.proc.send_signal(sig)
        return self.wait_exit(deadline_s)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after :data:`STOP_GRACE_S`; idempotent, never raises."""
        if self.proc.poll() is not None:
            return
        try:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=STOP_GRACE_S)
        except ProcessLookupError:
            pass


@attrs.frozen
class RunningServer:
    """A ``taskplane serve`` process that answered its Agent Card.

    Attributes:
        url: ``http://127.0.0.1:<port>`` (also the card's interface URL).
        token, principal: the one credential in its credentials file.
        store: its ``CHANNELS_TASK_STORE_PATH``.
        credentials: its ``A2A_CREDENTIALS_PATH``.
        process: the child process.
        card: the Agent Card JSON it served.
    """

    url: str
    token: str
    principal: str
    store: Path
    credentials: Path
    process: TaskplaneProcess
    card: dict[str, object]

    def auth_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}", "A2A-Version": "1.0"}


class Spawner:
    """Starts taskplane processes under ``root`` and stops all of them in :meth:`close`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.home = root / "home"
        self.home.mkdir(parents=True, exist_ok=True)
        self.processes: list[TaskplaneProcess] = []
        self._count = 0

    def start(
        self,
        args: Sequence[str],
        env: Mapping[str, str],
        umask: int = 0o022,
        descriptor_limit: int | None = None,
    ) -> TaskplaneProcess:
        """Start ``python -m taskplane <args>`` with exactly ``env`` (and, when given,
        ``RLIMIT_NOFILE`` = ``descriptor_limit``); does not wait."""
        self._count += 1
        name = f"{self._count:02d}-" + re.sub(r"[^A-Za-z0-9_.-]+", "_", "-".join(args))[:60]
        process = TaskplaneProcess(
            args, env, self.root / "logs", name, umask=umask, descriptor_limit=descriptor_limit
        )
        self.processes.append(process)
        return process

    def env(self, **overrides: str) -> dict[str, str]:
        """:func:`base_env` with this spawner's HOME and XDG dirs under ``root``."""
        defaults = {
            "XDG_CONFIG_HOME": str(self.root / "xdg-config"),
            "XDG_DATA_HOME": str(self.root / "xdg-data"),
        }
        return base_env(self.home, **{**defaults, **overrides})

    def serve(
        self,
        *,
        store: Path | None = None,
        port: int | None = None,
        token: str = "e2e-token-0123456789abcdef",
        principal: str = "e2e",
        blocking_timeout_ms: int | None = None,
        umask: int = 0o022,
        extra_env: Mapping[str, str] | None = None,
        env: Mapping[str, str] | None = None,
        descriptor_limit: int | None = None,
    ) -> RunningServer:
        """``taskplane serve`` with the A2A listener on a free port; waits for its card.

        ``env``: more variables for the process (e.g. the agent runtime's).
        ``descriptor_limit``: its ``RLIMIT_NOFILE``, soft and hard.
        """
        self._count += 1
        port = port if port is not None else free_port()
        store = store if store is not None else self.root / f"store-{self._count}"
        credentials = write_credentials(
            self.root / f"credentials-{self._count}.json", [(token, principal)]
        )
        overrides = {
            "A2A_SERVER": "1",
            "A2A_CREDENTIALS_PATH": str(credentials),
            "A2A_HOST": "127.0.0.1",
            "A2A_PORT": str(port),
            "CHANNELS_TASK_STORE_PATH": str(store),
        }
        if blocking_timeout_ms is not None:
            overrides["A2A_BLOCKING_TIMEOUT_MS"] = str(blocking_timeout_ms)
        overrides.update(extra_env or {})
        overrides.update(env or {})
        process = self.start(
            ("serve",), self.env(**overrides), umask=umask, descriptor_limit=descriptor_limit
        )
        url = f"http://127.0.0.1:{port}"
        card = process.wait_ready(url)
        return RunningServer(url, token, principal, store, credentials, process, card)

    def close(self) -> None:
        """Stop every process started here (SIGTERM, then SIGKILL)."""
        for process in reversed(self.processes):
            process.stop()
