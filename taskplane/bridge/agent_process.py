"""One supervised agent program: started once, restarted whenever it exits.

The ``subprocess`` runtime's child (``A2A_AGENT_COMMAND``). Its stdout is read as
JSON-RPC lines and handed to ``on_message``; its stderr goes to the log line by line
(``agent_stderr``); when it exits, ``on_exit`` is told (the runtime fails the turns
that were open) and it is started again after a backoff: :data:`RESTART_MIN_S`,
doubling per quick exit up to :data:`RESTART_MAX_S`, back to the minimum after it
has run :data:`STABLE_S`. Design rule: "supervised; restarted if it exits".
"""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import trio

from taskplane.backoff import backoff
from taskplane.bridge.jsonrpc import LineSplitter, encode_line, parse_line
from taskplane.errors import ProviderUnavailable

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
    """

    def __init__(
        self,
        command: Sequence[str],
        on_message: Callable[[dict[str, Any]], Awaitable[None]],
        on_exit: Callable[[str], None],
    ) -> None:
        self.command = tuple(command)
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

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run and restart the program until cancelled (then it is stopped).

        ``task_status.started()`` once the first program is running.
        Raises:
            OSError: the first start failed (command not found, not executable).
        """
        delays = backoff(RESTART_MIN_S, RESTART_MAX_S)
        delay = next(delays)
        first = True
        while True:
            try:
                process = await trio.lowlevel.open_process(
                    self.command,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                )
            except OSError as exc:
                if first:
                    what = f"cannot start A2A_AGENT_COMMAND {self.command[0]!r}"
                    raise OSError(f"{what}: {exc}") from None
                log.error(
                    "agent program failed to start: %s",
                    exc,
                    extra={"event": "agent_process_start_failed"},
                )
                await trio.sleep(delay)
                delay = next(delays)
                continue
            started = trio.current_time()
            log.info(
                "agent program started (pid %d)",
                process.pid,
                extra={"event": "agent_process_started", "pid": process.pid},
            )
            code = await self._supervise(process, task_status if first else None)
            first = False
            reason = f"the agent program exited with code {code}"
            log.warning(reason, extra={"event": "agent_process_exited", "code": code})
            self._on_exit(reason)
            if trio.current_time() - started >= STABLE_S:
                delays = backoff(RESTART_MIN_S, RESTART_MAX_S)  # it was stable: start over
            delay = next(delays)
            await trio.sleep(delay)

    async def _supervise(
        self, process: trio.Process, task_status: trio.TaskStatus[None] | None
    ) -> int:
        assert process.stdin and process.stdout and process.stderr
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._read, process.stdout)
                nursery.start_soon(_pump_stderr, process.stderr)
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
            with trio.CancelScope(shield=True):
                await _stop(process)

    def _down(self) -> None:
        self._stdin = None
        if self._up.is_set():
            self._up = trio.Event()

    async def _read(self, stdout: trio.abc.ReceiveStream) -> None:
        splitter = LineSplitter()
        async for chunk in stdout:
            for line in splitter.feed(chunk):
                if not line.strip():
                    continue
                try:
                    message = parse_line(line)
                except ValueError as exc:
                    log.warning(
                        "agent program wrote an invalid line: %s",
                        exc,
                        extra={"event": "agent_protocol_error"},
                    )
                    continue
                await self._on_message(message)


async def _pump_stderr(stderr: trio.abc.ReceiveStream) -> None:
    splitter = LineSplitter(limit=MAX_STDERR_LINE)
    async for chunk in stderr:
        for line in splitter.feed(chunk):
            log.info("agent: %s", line.decode("utf-8", "replace"), extra={"event": "agent_stderr"})


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
