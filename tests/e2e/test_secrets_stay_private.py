"""Secrets at rest and in output: a real ``taskplane serve`` with a known bearer token
and native-source secrets in its environment, taken through a full scenario (sends that
complete, fail and wait for input, a stream, wrong tokens, a GitHub mention answered by
a comment, readiness, metrics, shutdown), never writes one of them to its output or
serves one on ``/metrics`` or ``/readyz``; a credentials file others may read stops
startup with the ``chmod`` that fixes it."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e._support import wait_for
from tests.e2e.fake_github import FakeGitHub
from tests.e2e.fake_slack import APP_TOKEN, BOT_TOKEN, FakeSlack
from tests.e2e.taskplane_proc import Spawner, base_env, free_port

pytestmark = pytest.mark.slow

TOKEN = "bearer-Secret-7f3a9c1e5b2d4f60"
SECRETS = {
    "GITHUB_TOKEN": "ghp_Secret-github-5e1f0c2a9b",
    "SLACK_APP_TOKEN": APP_TOKEN,
    "SLACK_BOT_TOKEN": BOT_TOKEN,
    "OPENAI_API_KEY": "sk-Secret-openai-4b9f1d",
}
SLACK_TICKET = "?ticket="
"""The Socket Mode URL Slack hands out carries a one-time ticket (a credential)."""


def _leaks(text: str) -> list[str]:
    found = [name for name, value in {"token": TOKEN, **SECRETS}.items() if value in text]
    return found + (["Slack socket ticket"] if SLACK_TICKET in text else [])


def _send(client: httpx.Client, text: str, message_id: str) -> dict[str, Any]:
    body = {"message": {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": text}]}}
    response = client.post("/message:send", json=body)
    assert response.status_code == 200, response.text
    task: dict[str, Any] = response.json()["task"]
    return task


def test_no_secret_reaches_the_log_metrics_or_readiness(spawn: Spawner) -> None:
    """(Synchronous: the fake Slack runs its own trio loop in a thread.)"""
    github = FakeGitHub(token=SECRETS["GITHUB_TOKEN"]).start()
    slack = FakeSlack().start()
    try:
        github.notify("301", "acme/widgets", "Issue", 3, comment="please summarise")
        server = spawn.serve(
            token=TOKEN,
            extra_env={
                **SECRETS,
                "OUTFITTER_CHANNELS": "github,slack",
                "GITHUB_API_URL": github.url,
                "GITHUB_POLL_INTERVAL_S": "1",
                "SLACK_API_URL": slack.url,
                "TASKPLANE_LOG_LEVEL": "DEBUG",
            },
        )
        wait_for(lambda: slack.connections > 0, "the Slack socket", server.process)
        envelope = slack.mention("Ev301", "summarise the incident")
        root = slack.roots[envelope]
        served: list[str] = []
        headers = server.auth_headers()
        with httpx.Client(base_url=server.url, headers=headers, timeout=30) as client:
            assert _send(client, "hello", "m-1")["status"]["state"] == "TASK_STATE_COMPLETED"
            assert _send(client, "fail", "m-2")["status"]["state"] == "TASK_STATE_FAILED"
            waiting = _send(client, "ask: what is the secret?", "m-3")
            for wrong in (TOKEN[:-1], TOKEN + "x", TOKEN.upper()):
                refused = client.get("/tasks", headers={"Authorization": f"Bearer {wrong}"})
                assert refused.status_code == 401
                served.append(refused.text)
            served.append(client.get("/tasks").text)
            served.append(client.get(f"/tasks/{waiting['id']}").text)
            body = {"message": {"messageId": "m-4", "role": "ROLE_USER", "parts": [{"text": "hi"}]}}
            with client.stream("POST", "/message:stream", json=body) as stream:
                served.append("".join(stream.iter_text()))
            wait_for(
                lambda: len(github.comments_on("acme/widgets", 3)) == 1,
                "the GitHub comment",
                server.process,
            )
            wait_for(
                lambda: len(slack.replies("C0001", root)) == 1, "the Slack reply", server.process
            )
            for path in ("/readyz", "/metrics", "/healthz"):
                answer = client.get(path)
                served.append(answer.text)
                assert not _leaks(answer.text), (path, _leaks(answer.text))
        assert server.process.signal_and_wait(signal.SIGTERM) == 0
    finally:
        github.close()
        slack.close()
    output = server.process.stdout() + server.process.stderr()
    assert "http_request_received" in output  # the debug log was on
    assert not _leaks(output), _leaks(output)
    assert not _leaks("".join(served)), _leaks("".join(served))


def test_a_credentials_file_others_may_read_stops_startup_naming_the_chmod(
    spawn: Spawner, tmp_path: Path
) -> None:
    credentials = tmp_path / "credentials.json"
    credentials.write_text(json.dumps({"credentials": [{"token": TOKEN, "principal": "p"}]}))
    credentials.chmod(0o644)
    process = spawn.start(
        ("serve",),
        base_env(
            spawn.home,
            A2A_SERVER="1",
            A2A_CREDENTIALS_PATH=str(credentials),
            A2A_PORT=str(free_port()),
            CHANNELS_TASK_STORE_PATH=str(tmp_path / "store"),
        ),
    )
    assert process.wait_exit() == 2, process.describe()
    stderr = process.stderr()
    assert f"chmod 600 {credentials}" in stderr and "0644" in stderr, stderr
    assert "Traceback" not in stderr and TOKEN not in stderr, stderr
