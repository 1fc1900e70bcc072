"""A throwaway PostgreSQL cluster for the tests, started from the installed binaries.

:func:`start_cluster` runs ``initdb`` into a fresh temporary directory and starts the
server on a unix socket in that directory only (``listen_addresses`` empty: no TCP
port, so no clash with anything else on the machine), with trust authentication
for the ``postgres`` superuser. PostgreSQL refuses to run as root, so when the tests
run as root, ``initdb`` and ``pg_ctl`` run as the ``postgres`` OS user (which
Debian's ``postgresql`` package creates) on a directory chowned to it.

Durability settings are the server's defaults (``fsync``, ``synchronous_commit``
on): the tests exercise real commits. Only ``initdb --no-sync`` is used, which skips
syncing the freshly created cluster files to disk: a cluster deleted at the end of
the run needs no crash safety for its bootstrap, and it saves about a second.

The binaries are found with ``pg_config --bindir``, else under Debian's
``/usr/lib/postgresql/<version>/bin``, else on ``PATH``. Missing binaries are a
failure, never a skip: install ``postgresql`` (``.ci/run`` does).
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs
import psycopg

INSTALL_HINT = (
    "PostgreSQL's server binaries (initdb, pg_ctl) were not found: install the "
    "'postgresql' package (Debian: apt-get install -y postgresql); .ci/run does this"
)
PORT = 5432  # only names the socket file, inside the cluster's private directory


def find_bindir() -> Path | None:
    """The directory holding ``initdb`` and ``pg_ctl``, or ``None``."""
    candidates: list[str] = []
    pg_config = shutil.which("pg_config")
    if pg_config is not None:
        found = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=False)
        if found.returncode == 0:
            candidates.append(found.stdout.strip())
    candidates += sorted(
        glob.glob("/usr/lib/postgresql/*/bin"),
        key=lambda p: int(p.split("/")[-2]) if p.split("/")[-2].isdigit() else 0,
        reverse=True,
    )
    initdb = shutil.which("initdb")
    if initdb is not None:
        candidates.append(str(Path(initdb).resolve().parent))
    for candidate in candidates:
        if (Path(candidate) / "initdb").is_file() and (Path(candidate) / "pg_ctl").is_file():
            return Path(candidate)
    return None


@attrs.frozen
class Cluster:
    """A running throwaway cluster: its directory, socket directory and start time."""

    root: Path
    bindir: Path
    started_in_s: float

    @property
    def socket_dir(self) -> Path:
        return self.root / "socket"

    def url(self, database: str = "postgres") -> str:
        """A libpq URL of ``database`` over the cluster's unix socket."""
        return f"postgresql://postgres@/{database}?host={self.socket_dir}&port={PORT}"

    @contextmanager
    def stopped(self) -> Iterator[None]:
        """The server stopped as by a crash (``-m immediate``) for the block, then
        started again on the same data (crash recovery replays its WAL)."""
        log = self.root / "server.log"
        pg_ctl = str(self.bindir / "pg_ctl")
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute("CHECKPOINT")  # so recovery has little WAL to replay
        _run([pg_ctl, "stop", "-m", "immediate", "-D", str(self.root / "data")], log)
        try:
            yield
        finally:
            _run([pg_ctl, "start", "-w", "-D", str(self.root / "data"), "-l", str(log)], log)

    def fresh_store_url(self) -> str:
        """The URL of a new, empty schema of the cluster's database: every session
        opened with it works in that schema only (``search_path``). A schema per
        test keeps tests independent at a fraction of a database's cost
        (``CREATE DATABASE`` copies a template through the WAL)."""
        name = "t_" + uuid.uuid4().hex[:16]
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{name}"')
        return self.url() + f"&options=-csearch_path%3D{name}"


def _as_postgres() -> dict[str, Any]:
    """subprocess arguments that run a command as the ``postgres`` user when root."""
    if os.geteuid() != 0:
        return {}
    return {"user": "postgres", "group": "postgres", "extra_groups": []}


def _run(args: list[str], log: Path) -> None:
    with log.open("ab") as out:
        done = subprocess.run(
            args, stdout=out, stderr=subprocess.STDOUT, check=False, **_as_postgres()
        )
    if done.returncode != 0:
        tail = log.read_text(errors="replace")[-2000:]
        raise RuntimeError(f"{' '.join(args)} failed ({done.returncode}):\n{tail}")


@contextmanager
def start_cluster() -> Iterator[Cluster]:
    """Start a throwaway cluster; stop it (:func:`stop_immediately`) and delete it on
    exit.

    Raises:
        RuntimeError: :data:`INSTALL_HINT` when the binaries are missing, or the
            output of the failing ``initdb`` / ``pg_ctl``.
    """
    bindir = find_bindir()
    if bindir is None:
        raise RuntimeError(INSTALL_HINT)
    started = time.perf_counter()
    root = Path(tempfile.mkdtemp(prefix="taskplane-pg-"))
    data, socket, log = root / "data", root / "socket", root / "server.log"
    socket.mkdir()
    log.touch()
    if os.geteuid() == 0:
        for path in (root, socket, log):
            shutil.chown(path, "postgres", "postgres")
    try:
        _run(
            [
                str(bindir / "initdb"),
                "--no-sync",
                "--auth=trust",
                "-U",
                "postgres",
                "-E",
                "UTF8",
                "--locale=C",
                "-D",
                str(data),
            ],
            log,
        )
        with (data / "postgresql.conf").open("a") as conf:
            conf.write(
                f"listen_addresses = ''\nunix_socket_directories = '{socket}'\nport = {PORT}\n"
            )
        _run([str(bindir / "pg_ctl"), "start", "-w", "-D", str(data), "-l", str(log)], log)
        try:
            yield Cluster(root, bindir, time.perf_counter() - started)
        finally:
            stop_immediately(data)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def stop_immediately(data: Path, *, deadline_s: float = 30.0) -> None:
    """Stop the server of ``data`` as ``pg_ctl stop -m immediate`` does (``SIGQUIT`` to
    the postmaster) and wait until it is gone, without starting a process: the
    session's cluster stops during the last test's teardown, which may be a quick
    test's (where starting a process is refused).

    Raises:
        RuntimeError: the postmaster still runs after ``deadline_s``.
    """
    try:
        pid = int((data / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return  # not running
    try:
        os.kill(pid, signal.SIGQUIT)
    except ProcessLookupError:
        return
    until = time.monotonic() + deadline_s
    while time.monotonic() < until:
        # As pg_ctl does: the postmaster removes its pid file as it exits (the process
        # itself is not our child, and may linger as a zombie until its parent reaps it).
        if not (data / "postmaster.pid").exists():
            return
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.01)  # a process that is not our child: poll with a deadline
    raise RuntimeError(f"the PostgreSQL server (pid {pid}) did not stop in {deadline_s} s")
