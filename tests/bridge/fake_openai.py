"""A scripted OpenAI-compatible chat-completions server for the ``openai`` runtime tests.

A small ASGI app (served by hypercorn on 127.0.0.1:<free port>) speaking the real
wire format of ``POST /v1/chat/completions``: non-streaming responses with
``choices[0].message`` carrying ``content`` or ``tool_calls`` (``type: "function"``,
``function.arguments`` a JSON string), and OpenAI-style error bodies
(``{"error": {"message", "type", "code"}}``) for scripted failures.

The model is :func:`echo_model`, a deterministic policy over the conversation: read
the Task, then ask (``ask: <question>``), complete with the answer, or echo. Every
request body is recorded in :attr:`FakeOpenAI.requests`.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable
from typing import Any

import trio

Body = dict[str, Any]
WAKE = re.compile(r"A2A task (\S+) is ready")
HEADER = re.compile(r'^(ROLE_\w+) at "')


def _history(text: str) -> list[tuple[str, str]]:
    """(role, text) per message of an ``a2a_read_task`` rendering."""
    out: list[tuple[str, str]] = []
    for line in text.splitlines():
        match = HEADER.match(line)
        if match:
            out.append((match.group(1), ""))
        elif line.startswith("| ") and out:
            role, body = out[-1]
            out[-1] = (role, (body + "\n" + line[2:]).strip("\n"))
    return out


def _task_id(messages: list[Body]) -> str:
    for message in reversed(messages):
        if message["role"] == "user":
            match = WAKE.search(message["content"])
            if match:
                return match.group(1)
    raise AssertionError("no wake prompt in the conversation")


def echo_model(messages: list[Body]) -> tuple[str | None, list[tuple[str, Body]]]:
    """The scripted model's next answer: ``(content, [(tool name, arguments)])``."""
    last = messages[-1]
    task_id = _task_id(messages)
    if last["role"] == "user":
        return None, [("a2a_read_task", {"taskId": task_id})]
    if last["role"] != "tool":
        raise AssertionError(f"unexpected last message {last!r}")
    called = _called_name(messages, last["tool_call_id"])
    if called != "a2a_read_task":
        return "Done.", []
    history = _history(last["content"])
    role, text = history[-1]
    if len(history) >= 2 and history[-2][0] == "ROLE_AGENT" and role == "ROLE_USER":
        return None, [
            ("a2a_complete_task", {"taskId": task_id, "response": f"You answered: {text}"})
        ]
    if text.startswith("ask:"):
        question = text[4:].strip() or "What is your answer?"
        return None, [("a2a_require_input", {"taskId": task_id, "question": question})]
    return None, [("a2a_complete_task", {"taskId": task_id, "response": text or "(no text)"})]


def _called_name(messages: list[Body], call_id: str) -> str:
    for message in messages:
        for call in message.get("tool_calls") or ():
            if call["id"] == call_id:
                return str(call["function"]["name"])
    raise AssertionError(f"tool result for unknown call {call_id}")


class FakeOpenAI:
    """The ASGI app. ``failures`` holds HTTP statuses to answer before the model runs
    (one per request, in order); ``hang`` makes every request wait forever; with
    ``barrier`` = N, no request is answered before N are in flight at once; while
    ``trio.current_time()`` is before ``storm_until``, every request is answered 429
    with ``Retry-After: <retry_after>`` (if set) and counted in ``refused``.
    With ``html_page`` set, every request is answered 200 with an HTML page (a proxy's).
    ``authorizations`` holds each request's ``Authorization`` header (``None``: none).
    Served on a loopback port (:func:`serve_fake`) or in process (an ASGI transport)."""

    def __init__(self, model: Callable[[list[Body]], Any] = echo_model) -> None:
        self.model = model
        self.requests: list[Body] = []
        self.failures: list[int] = []
        self.hang = False
        self.in_flight = 0
        self.max_in_flight = 0
        self.barrier = 0
        self.storm_until: float | None = None
        self.retry_after: str | None = None
        self.refused = 0
        self.html_page = False
        self.authorizations: list[str | None] = []
        self._all_in = trio.Event()
        self._ids = itertools.count(1)

    async def __call__(self, scope: Body, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                event = await receive()
                if event["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif event["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        raw = b""
        while True:
            event = await receive()
            raw += event.get("body", b"")
            if not event.get("more_body"):
                break
        if scope["path"] != "/v1/chat/completions" or scope["method"] != "POST":
            await _reply(
                send, 404, {"error": {"message": "not found", "type": "invalid_request_error"}}
            )
            return
        body = json.loads(raw)
        self.requests.append(body)
        self.authorizations.append(_header(scope, b"authorization"))
        if self.storm_until is not None and trio.current_time() < self.storm_until:
            self.refused += 1
            headers = [(b"retry-after", self.retry_after.encode())] if self.retry_after else []
            error = {"message": "rate limited", "type": "rate_limit_exceeded"}
            await _reply(send, 429, {"error": error}, headers)
            return
        if self.html_page:
            page = b"<html><body>Please sign in to the proxy</body></html>"
            start = {"type": "http.response.start", "status": 200}
            start["headers"] = [(b"content-type", b"text/html; charset=utf-8")]
            await send(start)
            await send({"type": "http.response.body", "body": page})
            return
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.barrier:
                # Answer nothing until ``barrier`` requests are in flight together.
                if self.in_flight >= self.barrier:
                    self._all_in.set()
                await self._all_in.wait()
            if self.hang:
                await trio.sleep_forever()
            if self.failures:
                status = self.failures.pop(0)
                kind = {429: "rate_limit_exceeded", 401: "invalid_api_key"}.get(
                    status, "server_error"
                )
                text = kind
                if status == 401:  # as the real API does, with the key it was sent
                    text = f"Incorrect API key provided: {_bearer(scope)}"
                await _reply(send, status, {"error": {"message": text, "type": kind, "code": kind}})
                return
            content, calls = self.model(body["messages"])
            await _reply(send, 200, self._completion(body["model"], content, calls))
        finally:
            self.in_flight -= 1

    def _completion(self, model: str, content: str | None, calls: list[tuple[str, Body]]) -> Body:
        message: Body = {"role": "assistant", "content": content}
        if calls:
            message["tool_calls"] = [
                {
                    "id": f"call_{next(self._ids)}",
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(args)},
                }
                for name, args in calls
            ]
        return {
            "id": f"chatcmpl-{next(self._ids)}",
            "object": "chat.completion",
            "created": 1_700_000_000,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": "tool_calls" if calls else "stop",
                    "logprobs": None,
                }
            ],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }


def _header(scope: Body, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key.lower() == name:
            return str(value.decode())
    return None


def _bearer(scope: Body) -> str:
    for name, value in scope["headers"]:
        if name.lower() == b"authorization":
            return str(value.decode().removeprefix("Bearer "))
    return ""


async def _reply(
    send: Any, status: int, body: Body, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    data = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode()),
                *(headers or ()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})


async def serve_fake(
    fake: FakeOpenAI,
    stop: trio.Event,
    *,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``fake`` on 127.0.0.1:<free port> until ``stop``; started with its base URL
    (``http://127.0.0.1:<port>/v1``)."""
    from hypercorn.config import Config
    from hypercorn.trio import serve

    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    config.graceful_timeout = 0.5

    class _Started:
        def started(self, binds: list[str]) -> None:
            task_status.started(binds[0] + "/v1")

    await serve(fake, config, shutdown_trigger=stop.wait, task_status=_Started())
