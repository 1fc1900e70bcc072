"""signal-cli's JSON-RPC mode over a child process's stdin and stdout (one JSON object a
line each way), for the Signal source.

Requests carry an ``id`` and are answered by a line with the same ``id`` and a
``result`` or an ``error`` (``{"code": ..., "message": ..., "data": ...}``); lines
without an ``id`` are notifications (``{"method": "receive", "params": {"envelope":
...}}``). :meth:`SignalRpc.serve` reads the lines in order and hands each notification
to its handler, awaiting it before it reads the next line: while a notification is
being accepted, stdout is not read (rule "A source may advance its checkpoint or
acknowledge the provider only after acceptance": Signal cannot refetch a message, so the
line is the only copy until it is committed).

Outcomes of a call: the ``result`` (a JSON value); :class:`SignalRefused` (a
``ProviderRejected``: signal-cli answered with an error, nothing was sent, or every
recipient refused it definitely); anything else (:class:`SignalUnknown`: the process
ended or did not answer within ``timeout_s``, or a recipient's outcome is a network
failure) is an unknown outcome.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from itertools import count
from typing import Any

import attrs
import trio

from taskplane.actors.outbound import ProviderRejected

log = logging.getLogger("taskplane.sources.signal")

CALL_TIMEOUT_S = 60.0
MAX_LINE_BYTES = 4 * 1024 * 1024
"""The longest stdout line read (bytes); a longer one is skipped as malformed."""
DEFINITE_FAILURES = frozenset(
    {"UNREGISTERED_FAILURE", "IDENTITY_FAILURE", "RATE_LIMIT_FAILURE", "PROOF_REQUIRED_FAILURE"}
)
"""Per-recipient send result types that say the message was definitely not sent."""


class SignalUnknown(Exception):
    """The call's outcome is unknown (the process ended, no answer in time, a network
    failure for a recipient)."""


class SignalRefused(ProviderRejected):
    """signal-cli answered with an error (or every recipient refused): nothing was sent.

    Attributes:
        code: the JSON-RPC error code (``0`` for a per-recipient refusal).
        kinds: the per-recipient failure types, when the answer lists them.
    """

    def __init__(self, message: str, code: int = 0, kinds: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.code = code
        self.kinds = kinds


class SignalGone(Exception):
    """The signal-cli process ended (stdout closed)."""


Notification = Mapping[str, Any]
Handler = Callable[[Notification | None, bytes], Awaitable[None]]
"""Called for each notification (``None`` when the line is not a JSON object), with the
raw line."""


@attrs.define
class _Pending:
    done: trio.Event = attrs.Factory(trio.Event)
    answer: Mapping[str, Any] | None = None


def send_outcome(answer: Mapping[str, Any]) -> Any:
    """The ``result`` of ``answer``, or the error it names.

    A ``send`` result (``{"timestamp": ..., "results": [{"type": ...}]}``) with no
    ``SUCCESS`` is a refusal when every failure is definite, else unknown; an error whose
    ``data.response`` lists recipient results is judged the same way.

    Raises:
        SignalRefused: an error answer, or only definite per-recipient failures.
        SignalUnknown: a per-recipient network failure and no success.
    """
    if "error" in answer:
        error = answer["error"] if isinstance(answer["error"], dict) else {}
        data = error.get("data")
        response = data.get("response") if isinstance(data, dict) else None
        code = error.get("code")
        message = str(error.get("message", "signal-cli error"))
        if isinstance(response, dict):
            _judge(response, message, code if isinstance(code, int) else 0)
        raise SignalRefused(message, code if isinstance(code, int) else 0)
    result = answer.get("result")
    if isinstance(result, dict) and "results" in result:
        _judge(result, "no recipient accepted the message", 0)
    return result


def _judge(response: Mapping[str, Any], message: str, code: int) -> None:
    results = response.get("results")
    kinds = tuple(
        str(r.get("type", ""))
        for r in (results if isinstance(results, list) else ())
        if isinstance(r, dict)
    )
    if "SUCCESS" in kinds:
        return
    if kinds and all(kind in DEFINITE_FAILURES for kind in kinds):
        raise SignalRefused(f"{message} ({', '.join(kinds)})", code, kinds)
    raise SignalUnknown(f"{message} ({', '.join(kinds) or 'no recipient result'})")


class SignalRpc:
    """JSON-RPC calls and notifications over ``stdin``/``stdout`` of a signal-cli
    process; see the module docstring."""

    def __init__(
        self,
        stdin: trio.abc.SendStream,
        stdout: trio.abc.ReceiveStream,
        *,
        timeout_s: float = CALL_TIMEOUT_S,
    ) -> None:
        self._stdin = stdin
        self._stdout = stdout
        self._timeout_s = timeout_s
        self._ids = count(1)
        self._pending: dict[str, _Pending] = {}
        self._write = trio.StrictFIFOLock()
        self._gone = False

    async def call(self, method: str, params: Mapping[str, Any]) -> Any:
        """One request; its :func:`send_outcome`.

        Raises:
            SignalRefused: signal-cli refused it.
            SignalUnknown: no answer (the process ended or ``timeout_s`` passed).
        """
        if self._gone:
            raise SignalUnknown("signal-cli is not running")
        request_id = f"taskplane-{next(self._ids)}"
        pending = _Pending()
        self._pending[request_id] = pending
        line = json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        try:
            try:
                async with self._write:
                    await self._stdin.send_all(line.encode() + b"\n")
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                raise SignalUnknown(f"signal-cli's stdin is closed: {exc}") from exc
            with trio.move_on_after(self._timeout_s):
                await pending.done.wait()
        finally:
            del self._pending[request_id]
        if pending.answer is None:
            raise SignalUnknown(f"signal-cli did not answer {method} ({request_id})")
        return send_outcome(pending.answer)

    async def serve(self, handler: Handler) -> None:
        """Read stdout line by line until it closes, answering calls and awaiting
        ``handler`` for every other line before the next is read.

        Raises:
            SignalGone: stdout closed (every call still waiting gets no answer).
        """
        buffer = bytearray()
        skipping = False
        try:
            while True:
                chunk = await self._stdout.receive_some(65536)
                if not chunk:
                    raise SignalGone("signal-cli's stdout closed")
                buffer += chunk
                while (end := buffer.find(b"\n")) >= 0:
                    line = bytes(buffer[:end])
                    del buffer[: end + 1]
                    if skipping:
                        skipping = False
                        continue
                    await self._line(line, handler)
                if len(buffer) > MAX_LINE_BYTES:
                    log.warning(
                        "signal-cli wrote a line over %d bytes; it is skipped",
                        MAX_LINE_BYTES,
                        extra={"event": "source_line_skipped", "source": "signal"},
                    )
                    buffer.clear()
                    skipping = True
        finally:
            self._gone = True
            for pending in self._pending.values():
                pending.done.set()

    async def _line(self, line: bytes, handler: Handler) -> None:
        if not line.strip():
            return
        try:
            message = json.loads(line)
        except ValueError:
            message = None
        if isinstance(message, dict) and "id" in message and "method" not in message:
            pending = self._pending.get(str(message["id"]))
            if pending is not None:
                pending.answer = message
                pending.done.set()
            return
        await handler(message if isinstance(message, dict) else None, line)
