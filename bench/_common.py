"""Shared helpers for the taskplane benchmarks (not a test module; see bench/README.md).

Each benchmark script starts its own ``taskplane serve`` subprocess on a fresh store
in a temporary directory, bound to 127.0.0.1 on a free port, and stops it (SIGINT,
then SIGTERM, then SIGKILL, by its own pid only) when done. Orchestration here is
synchronous; the load itself runs under ``trio.run`` in each script.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"
TOKEN = "bench-token"
PRINCIPAL = "bench"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
TERMINAL_STATES = frozenset(
    {
        "TASK_STATE_COMPLETED",
        "TASK_STATE_FAILED",
        "TASK_STATE_CANCELED",
        "TASK_STATE_REJECTED",
    }
)


def default_python() -> str:
    venv = REPO / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def machine_info() -> str:
    """One line: date, cores, CPU model, Python, kernel, git revision."""
    cores = os.cpu_count()
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        usable = cores
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        rev = subprocess.run(
            ["git", "-C", str(REPO), "describe", "--always", "--dirty"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        rev = "?"
    now = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    try:
        load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        load = "?"
    return (
        f"machine: {now}; {cores} cores ({usable} usable), {model}; "
        f"python {platform.python_version()} ({platform.python_implementation()}); "
        f"{platform.system()} {platform.release()}; load avg {load}; taskplane {rev}"
    )


def filesystem_of(path: Path) -> str:
    """The filesystem type and mount point holding ``path`` (fsync cost depends on it)."""
    best = ("?", "")
    target = str(path.resolve())
    try:
        for line in Path("/proc/mounts").read_text().splitlines():
            fields = line.split()
            if len(fields) < 3:
                continue
            mount, fstype = fields[1], fields[2]
            if (target == mount or target.startswith(mount.rstrip("/") + "/")) and len(
                mount
            ) >= len(best[1]):
                best = (fstype, mount)
    except OSError:
        pass
    return f"{best[0]} at {best[1] or '?'}"


def fsync_probe(directory: Path, *, count: int = 50) -> str:
    """Median and worst latency of ``count`` 4 KiB write+fsync pairs in ``directory``.

    Printed with the figures: commit latency is bounded below by fsync, and on a
    shared machine it varies with the other tenants' I/O.
    """
    path = directory / ".fsync-probe"
    times: list[float] = []
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for _ in range(count):
            os.write(fd, b"x" * 4096)
            t0 = time.perf_counter()
            os.fsync(fd)
            times.append(time.perf_counter() - t0)
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    times.sort()
    return (
        f"fsync probe ({filesystem_of(directory)}): p50 {percentile(times, 50) * 1000:.2f} ms, "
        f"max {times[-1] * 1000:.2f} ms"
    )


def raise_fd_limit(want: int) -> tuple[int, int]:
    """Raise the soft RLIMIT_NOFILE towards ``want`` (capped by the hard limit).

    Children (the server) inherit it. Returns the (soft, hard) limits now in force.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of an already sorted sequence."""
    if not sorted_values:
        return float("nan")
    rank = max(1, min(len(sorted_values), round(q / 100 * len(sorted_values) + 0.5)))
    return sorted_values[rank - 1]


def message(text: str, *, task_id: str | None = None, prefix: str = "bench") -> dict[str, Any]:
    msg: dict[str, Any] = {
        "messageId": f"{prefix}-{uuid.uuid4().hex}",
        "role": "ROLE_USER",
        "parts": [{"text": text}],
    }
    if task_id is not None:
        msg["taskId"] = task_id
    return msg


def send_body(
    text: str, *, immediate: bool, task_id: str | None = None, prefix: str = "bench"
) -> dict[str, Any]:
    body: dict[str, Any] = {"message": message(text, task_id=task_id, prefix=prefix)}
    if immediate:
        body["configuration"] = {"returnImmediately": True}
    return body


def cpu_seconds_self() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Server:
    """One ``taskplane serve`` subprocess on ``store`` (created if missing).

    Args:
        workdir: a private directory for the credentials file and the server log.
        store: the store root (``CHANNELS_TASK_STORE_PATH``).
        group_commit: ``TASKPLANE_GROUP_COMMIT``.
        python: the interpreter running taskplane.
        extra_env: more environment variables for the server.
        cwd: the checkout whose ``taskplane`` package runs (default: this one).
    """

    def __init__(
        self,
        workdir: Path,
        store: Path,
        *,
        group_commit: bool = True,
        python: str | None = None,
        extra_env: dict[str, str] | None = None,
        label: str = "server",
        cwd: Path = REPO,
    ) -> None:
        self.cwd = cwd
        self.workdir = workdir
        self.store = store
        self.group_commit = group_commit
        self.python = python or default_python()
        self.extra_env = dict(extra_env or {})
        self.label = label
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = workdir / f"{label}.log"
        self.startup_s = float("nan")

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, *, ready_timeout_s: float = 120.0) -> Server:
        """Start the server and wait until the Agent Card answers (raises on failure)."""
        creds = self.workdir / "credentials.json"
        if not creds.exists():
            creds.write_text(
                json.dumps({"credentials": [{"token": TOKEN, "principal": PRINCIPAL}]})
            )
            creds.chmod(0o600)
        env = dict(os.environ)
        env.update(
            {
                "A2A_SERVER": "1",
                "A2A_CREDENTIALS_PATH": str(creds),
                "A2A_HOST": HOST,
                "CHANNELS_TASK_STORE_PATH": str(self.store),
                "TASKPLANE_GROUP_COMMIT": "1" if self.group_commit else "0",
                "TASKPLANE_LOG_LEVEL": "WARNING",
            }
        )
        env.update(self.extra_env)
        last_error = "?"
        for _attempt in range(3):  # the free port may be taken between probe and bind
            self.port = free_port()
            env["A2A_PORT"] = str(self.port)
            log = self.log_path.open("ab")
            started = time.monotonic()
            self.proc = subprocess.Popen(
                [self.python, "-m", "taskplane", "serve"],
                cwd=self.cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                # A shell's background job (``cmd &``) starts with SIGINT ignored and
                # Python keeps it ignored; restore it so SIGINT reaches the server.
                preexec_fn=_default_sigint,
            )
            log.close()
            deadline = started + ready_timeout_s
            with httpx.Client(timeout=2.0) as client:
                while time.monotonic() < deadline:
                    if self.proc.poll() is not None:
                        last_error = f"exited with {self.proc.returncode}"
                        break
                    try:
                        r = client.get(f"{self.base_url}/.well-known/agent-card.json")
                        if r.status_code == 200 and self.proc.poll() is None:
                            self.startup_s = time.monotonic() - started
                            return self
                    except httpx.HTTPError as exc:
                        last_error = type(exc).__name__
                    time.sleep(0.05)
                else:
                    self.stop()
                    raise RuntimeError(
                        f"{self.label}: not ready after {ready_timeout_s}s ({last_error}); "
                        f"see {self.log_path}"
                    )
            if "Address already in use" not in self.log_tail(2000):
                break
        raise RuntimeError(f"{self.label} failed to start ({last_error}): {self.log_tail()}")

    def rss_kib(self) -> dict[str, int]:
        """VmRSS / VmHWM / VmSize of the server process, in KiB."""
        out: dict[str, int] = {}
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM", "VmSize", "Threads"):
                out[key] = int(rest.split()[0])
        return out

    def cpu_seconds(self) -> float:
        """User + system CPU seconds the server process has used so far."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        return (int(fields[11]) + int(fields[12])) / ticks

    def fd_limit(self) -> str:
        for line in Path(f"/proc/{self.pid}/limits").read_text().splitlines():
            if line.startswith("Max open files"):
                parts = line.split()
                return f"{parts[3]}/{parts[4]}"
        return "?"

    def open_fds(self) -> int:
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, *, grace_s: float = 15.0) -> int | None:
        """Stop our own process: SIGINT, then SIGTERM, then SIGKILL. Returns its exit code."""
        proc = self.proc
        if proc is None:
            return None
        for sig, wait in ((signal.SIGINT, grace_s), (signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
            if proc.poll() is not None:
                break
            proc.send_signal(sig)
            try:
                proc.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                continue
        return proc.poll()

    def log_tail(self, chars: int = 1500) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return text[-chars:]

    def log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except OSError:
            return 0

    def log_problems(
        self, *, start: int = 0, end: int | None = None
    ) -> tuple[Counter[str], list[str]]:
        """Warning-and-up log records between byte offsets ``start`` and ``end``.

        Returns a count per ``level:event`` (JSON log lines) and the raw lines that
        are not JSON (tracebacks, ``print`` output), in order.
        """
        try:
            data = self.log_path.read_bytes()[start:end]
        except OSError:
            return Counter(), []
        events: Counter[str] = Counter()
        other: list[str] = []
        for line in data.decode(errors="replace").splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                if line.strip():
                    other.append(line)
                continue
            if not isinstance(record, dict):
                other.append(line)
                continue
            level = str(record.get("level", "?")).lower()
            if level in ("warning", "error", "critical"):
                events[f"{level}:{record.get('event') or record.get('message', '?')[:60]}"] += 1
        return events, other


class Workdir:
    """A temporary directory for one benchmark run, removed at exit unless ``keep``."""

    def __init__(self, parent: str | None, *, keep: bool = False, prefix: str = "tp-bench-"):
        self.path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
        self.keep = keep

    def __enter__(self) -> Path:
        return self.path

    def __exit__(self, *exc: object) -> None:
        if self.keep:
            print(f"kept {self.path}")
        else:
            shutil.rmtree(self.path, ignore_errors=True)


def report_server_log(
    server: Server, *, start: int = 0, end: int | None = None, what: str = "", show: int = 8
) -> Counter[str]:
    """Print the warning/error events (and non-JSON lines) of the log slice; return counts."""
    events, other = server.log_problems(start=start, end=end)
    label = f"{server.label} log{' ' + what if what else ''}"
    if not events and not other:
        print(f"  {label}: no warnings or errors")
        return events
    summary = ", ".join(f"{k} x{v}" for k, v in events.most_common())
    print(f"  {label}: {summary or 'no JSON warnings'}; {len(other)} non-JSON lines")
    for line in other[:show]:
        print(f"    | {line[:240]}")
    if len(other) > show:
        print(f"    | ... ({len(other) - show} more; last: {other[-1][:200]})")
    return events


_EXC_LINE = re.compile(r"^[A-Za-z_.]*(Error|Exception|Interrupt|Exit)\b(?!\s+Group)")


def stop_and_report(server: Server, *, start: int = 0) -> int | None:
    """Stop ``server``; print the run's log problems, then the shutdown's, apart."""
    mark = server.log_size()
    died = not server.alive()
    code = server.stop()
    if died:
        why = f"exit {code}"
        if code is not None and code < 0:
            why = f"killed by {signal.Signals(-code).name}, not sent by this script"
        print(f"  {server.label} HAD DIED before the end of the run ({why})")
    report_server_log(server, start=start, end=mark, what="during the run")
    events, other = server.log_problems(start=mark)
    how = f"exit code {code}"
    if other:
        names = [ln.strip(" |+") for ln in other if _EXC_LINE.match(ln.strip(" |+"))]
        last = names[-1] if names else other[-1].strip()
        how += f"; shutdown printed {len(other)} non-JSON lines ending in {last!r}"
    if events:
        how += "; " + ", ".join(f"{k} x{v}" for k, v in events.most_common())
    print(f"  {server.label} stopped (SIGINT): {how}")
    return code


def fmt_ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f}"
