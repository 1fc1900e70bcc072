"""One supervised child program: started once, restarted whenever it exits.

The ``subprocess`` runtime's agent program (``A2A_AGENT_COMMAND``), and each MCP
server run over stdio (``A2A_AGENT_MCP_CONFIG``). Its stdout is read as JSON-RPC
lines and handed to ``on_message`` (a line over 16 MiB is dropped and logged,
``agent_protocol_error``); its stderr goes to the log line by line (``agent_stderr``),
at most :data:`STDERR_LINES_PER_S` a second, the rest counted in one summary line per
second (``agent_stderr_suppressed``); when it exits, ``on_exit`` is told (the runtime
fails the turns that were open) and it is started again after a backoff:
:data:`RESTART_MIN_S`, doubling per quick exit up to :data:`RESTART_MAX_S`, back to
the minimum after it has run :data:`STABLE_S`. Design rule: "supervised; restarted if it exits".
"""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import trio

from taskplane.backoff import backoff
from taskplane.bridge.jsonrpc import MAX_LINE_BYTES, LineSplitter, encode_line, parse_line
from taskplane.errors import ProviderUnavailable
from taskplane.settings import child_environment

log = logging.getLogger("taskplane.bridge.agent")

RESTART_MIN_S = 0.1
RESTART_MAX_S = 5.0
STABLE_S = 10.0
RESTART_WAIT_S = 10.0
"""How long a turn or a triage waits for a restarting program before giving up
(:class:`AgentUnavailable`)."""
STOP_GRACE_S = 2.0
"""After stdin is closed at shutdown, seconds the program gets to exit before SIGKILL."""
MAX_STDERR_LINE = 4096
STDERR_LINES_PER_S = 100
"""Stderr lines of one program logged per second at most (a flood is counted instead)."""


class AgentUnavailable(ProviderUnavailable):
    """The agent program is not running (it exited and is being restarted), or it
    stopped reading its stdin: the wake pauses as for an unavailable model provider
    (design rule "Provider failures are not Task failures")."""


class AgentProcess:
    """Supervises ``command``.

    Args:
        command: program and arguments (no shell).
        on_message: awaited with each JSON-RPC object the program writes, in order.
        on_exit: called with a reason once the program has exited.
        env: variables added to the program's environment.
        kind: the log events' prefix and ``kind`` field (``agent``: the agent
            program; ``mcp``: an MCP server, whose ``name`` is logged as ``server``).
        name: what the log calls the program.
        fail_first: a first start that fails raises ``OSError`` (else it is logged
            and retried like a restart).
        restart_max_s: the restart backoff's cap, in seconds (:data:`RESTART_MAX_S`).
    """

    def __init__(
        self,
        command: Sequence[str],
        on_message: Callable[[dict[str, Any]], Awaitable[None]],
        on_exit: Callable[[str], None],
        *,
        env: Mapping[str, str] | None = None,
        kind: str = "agent",
        name: str = "agent program",
        fail_first: bool = True,
        restart_max_s: float = RESTART_MAX_S,
    ) -> None:
        self.command = tuple(command)
        self._restart_max_s = restart_max_s
        self._process: trio.Process | None = None
        self._env = dict(env) if env else None
        self._kind, self._name, self._fail_first = kind, name, fail_first
        self._on_message = on_message
        self._on_exit = on_exit
        self._stdin: trio.abc.SendStream | None = None
        self._write_lock = trio.StrictFIFOLock()
        self._up = trio.Event()

    @property
    def running(self) -> bool:
        return self._stdin is not None

    async def wait_running(self, timeout_s: float = RESTART_WAIT_S) -> None:
        """Return once a program is running (at once if one is; during a restart, when
        the next one has started).

        Raises:
            AgentUnavailable: none was running within ``timeout_s`` seconds.
        Cancellation: at any time.
        """
        with trio.move_on_after(timeout_s):
            while self._stdin is None:
                await self._up.wait()
            return
        raise AgentUnavailable(f"the agent program is restarting (not up within {timeout_s} s)")

    async def send(self, message: dict[str, Any]) -> None:
        """Write one message line to the program's stdin.

        Raises:
            AgentUnavailable: no program is running, or it stopped reading.
        """
        async with self._write_lock:
            stdin = self._stdin
            if stdin is None:
                raise AgentUnavailable("the agent program is not running")
            try:
                await stdin.send_all(encode_line(message))
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                raise AgentUnavailable("the agent program stopped reading its stdin") from exc

    def restart(self) -> None:
        """Kill the running program (one that hangs); it is started again as after an
        exit (``on_exit`` is told). Nothing happens if none is running."""
        process = self._process
        if process is not None and process.returncode is None:
            self._down()
            process.kill()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run and restart the program until cancelled (then it is stopped).

        ``task_status.started()`` once the first program is running.
        Raises:
            OSError: the first start failed (command not found, not executable).
        """
        delays = backoff(RESTART_MIN_S, self._restart_max_s)
        delay = next(delays)
        first, start_failures = True, 0
        env = child_environment(self._env) if self._env else None
        while True:
            try:
                process = await trio.lowlevel.open_process(
                    self.command,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    env=env,
                )
            except OSError as exc:
                if first and self._fail_first:
                    what = f"cannot start A2A_AGENT_COMMAND {self.command[0]!r}"
                    raise OSError(f"{what}: {exc}") from None
                start_failures += 1
                log.error(
                    "%s failed to start (%d times in a row; next try in %g s): %s",
                    self._name,
                    start_failures,
                    delay,
                    exc,
                    extra=self._extra("process_start_failed", failures=start_failures),
                )
                await trio.sleep(delay)
                delay = next(delays)
                continue
            started, start_failures = trio.current_time(), 0
            log.info(
                "%s started (pid %d)",
                self._name,
                process.pid,
                extra=self._extra("process_started", pid=process.pid),
            )
            code = await self._supervise(process, task_status if first else None)
            first = False
            reason = f"the {self._name} exited with code {code}"
            log.warning(reason, extra=self._extra("process_exited", code=code))
            self._on_exit(reason)
            if trio.current_time() - started >= STABLE_S:
                delays = backoff(RESTART_MIN_S, self._restart_max_s)  # it was stable: start over
            delay = next(delays)
            await trio.sleep(delay)

    def _extra(self, event: str, **fields: Any) -> dict[str, Any]:
        """Log record fields: ``event`` prefixed with the kind; an MCP server's name."""
        extra = {"event": f"{self._kind}_{event}", **fields}
        if self._kind != "agent":
            extra["server"] = self._name
        return extra

    async def _supervise(
        self, process: trio.Process, task_status: trio.TaskStatus[None] | None
    ) -> int:
        assert process.stdin and process.stdout and process.stderr
        self._process = process
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._read, process.stdout)
                nursery.start_soon(self._pump_stderr, process.stderr)
                self._stdin = process.stdin
                self._up.set()
                if task_status is not None:
                    task_status.started()
                code = await process.wait()
                self._down()
                # Let the readers drain what the program wrote before it exited.
                nursery.cancel_scope.deadline = trio.current_time() + 1.0
            return code
        finally:
            self._down()
            self._process = None
            with trio.CancelScope(shield=True):
                await _stop(process)

    def _down(self) -> None:
        self._stdin = None
        if self._up.is_set():
            self._up = trio.Event()

    async def _read(self, stdout: trio.abc.ReceiveStream) -> None:
        def dropped(size: int) -> None:
            log.warning(
                "%s wrote a line of %d bytes, over the %d-byte limit; dropped",
                self._name,
                size,
                MAX_LINE_BYTES,
                extra=self._extra("protocol_error", bytes=size),
            )

        splitter = LineSplitter(on_drop=dropped)
        async for chunk in stdout:
            for line in splitter.feed(chunk):
                if not line.strip():
                    continue
                try:
                    message = parse_line(line)
                except ValueError as exc:
                    log.warning(
                        "%s wrote an invalid line: %s",
                        self._name,
                        exc,
                        extra=self._extra("protocol_error"),
                    )
                    continue
                await self._on_message(message)

    async def _pump_stderr(self, stderr: trio.abc.ReceiveStream) -> None:
        """Log stderr lines, at most :data:`STDERR_LINES_PER_S` a second; the others
        are counted and reported at the end of their second (a timer on trio's clock,
        so a program that goes quiet after a flood is still reported)."""
        splitter = LineSplitter(limit=MAX_STDERR_LINE)
        flood = _Flood(trio.current_time())
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._report_floods, flood)
            try:
                async for chunk in stderr:
                    for line in splitter.feed(chunk):
                        now = trio.current_time()
                        if now - flood.window >= 1.0:
                            self._report_suppressed(flood.restart(now))
                        if flood.logged >= STDERR_LINES_PER_S:
                            flood.suppress()
                            continue
                        flood.logged += 1
                        text = line.decode("utf-8", "replace")
                        log.info("%s: %s", self._kind, text, extra=self._extra("stderr"))
            finally:
                self._report_suppressed(flood.restart(trio.current_time()))
                nursery.cancel_scope.cancel()

    async def _report_floods(self, flood: _Flood) -> None:
        """At the end of each second with suppressed lines, report their count."""
        while True:
            await flood.flooding.wait()
            await trio.sleep_until(flood.window + 1.0)
            now = trio.current_time()
            if now - flood.window >= 1.0:
                self._report_suppressed(flood.restart(now))

    def _report_suppressed(self, count: int) -> None:
        if count:
            log.warning(
                "%s wrote %d more stderr lines within a second; not logged",
                self._name,
                count,
                extra=self._extra("stderr_suppressed", lines=count),
            )


class _Flood:
    """One program's stderr window: lines logged and suppressed since ``window``."""

    def __init__(self, now: float) -> None:
        self.window, self.logged, self.suppressed = now, 0, 0
        self.flooding = trio.Event()
        """Set once a line of the window was suppressed."""

    def suppress(self) -> None:
        self.suppressed += 1
        self.flooding.set()

    def restart(self, now: float) -> int:
        """Start a new window at ``now``; the old one's suppressed count."""
        count = self.suppressed
        self.window, self.logged, self.suppressed = now, 0, 0
        if self.flooding.is_set():
            self.flooding = trio.Event()
        return count


async def _stop(process: trio.Process) -> None:
    """Close stdin, give the program :data:`STOP_GRACE_S` to exit, then SIGKILL."""
    if process.returncode is not None:
        return
    if process.stdin is not None:
        await process.stdin.aclose()
    with trio.move_on_after(STOP_GRACE_S):
        await process.wait()
        return
    process.kill()
    await process.wait()
