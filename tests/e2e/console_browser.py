"""The OS's Chromium, driven by Playwright, for the console's end-to-end tests.

Only Debian's ``/usr/bin/chromium`` is used (``.ci/run`` installs it when missing);
Playwright never downloads a browser here. Each browser gets a fresh user-data
directory, and every page starts signed out (the token lives in ``sessionStorage``,
which is per tab).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from playwright.sync_api import BrowserContext, Page, expect, sync_playwright

from tests.e2e.taskplane_proc import RunningServer

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)
OUTFITTER_TASK_URI = "https://github.com/ai-outfitter/channels/a2a-extensions/outfitter-task/v1"
SEE_TIMEOUT_MS = 20_000
"""Upper bound for the page to show something (the machine may be loaded)."""
DESKTOP = {"width": 1200, "height": 900}
PHONE = {"width": 390, "height": 844}


@contextmanager
def chromium(user_data_dir: Path) -> Iterator[BrowserContext]:
    """A headless Chromium with a fresh profile in ``user_data_dir``."""
    assert CHROMIUM.exists(), "the console tests need Debian's chromium (apt-get install chromium)"
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(user_data_dir),
            executable_path=str(CHROMIUM),
            headless=True,
            args=list(CHROMIUM_ARGS),
            viewport=DESKTOP,
            locale="en-GB",
            timezone_id="UTC",
        )
        try:
            yield context
        finally:
            context.close()


def see(page: Page, text: str) -> None:
    """Wait until ``text`` is visible on ``page``."""
    expect(page.get_by_text(text, exact=False).first).to_be_visible(timeout=SEE_TIMEOUT_MS)


def sign_in(page: Page, server: RunningServer, token: str | None = None) -> None:
    """Open the console and sign in with ``token`` (the server's own by default)."""
    page.goto(server.url + "/console/")
    page.get_by_label("Token").fill(token or server.token)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Tasks", exact=True)).to_be_visible(
        timeout=SEE_TIMEOUT_MS
    )


def send_from_console(page: Page, text: str) -> str:
    """Type ``text`` in the composer, press Send, wait for the Task view; its Task ID."""
    page.get_by_label("Message").fill(text)
    page.get_by_role("button", name="Send", exact=True).click()
    page.wait_for_url("**/console/#/tasks/*", timeout=SEE_TIMEOUT_MS)
    return page.url.rsplit("/", 1)[1]


def state_of(page: Page, label: str) -> None:
    """Wait until the Task view's status says ``label`` (e.g. ``Completed``)."""
    expect(page.locator(".status-line .state")).to_contain_text(label, timeout=SEE_TIMEOUT_MS)


def api_send(
    server: RunningServer,
    text: str,
    *,
    token: str | None = None,
    task_id: str | None = None,
    context_id: str | None = None,
    message_id: str | None = None,
) -> dict[str, Any]:
    """Another client: ``POST /message:send`` (returnImmediately) with httpx; the Task.

    ``message_id`` defaults to a fresh one (the scripted agent's TCK behaviours are
    chosen by its prefix)."""
    message: dict[str, Any] = {
        "messageId": message_id or f"other-client-{uuid.uuid4()}",
        "role": "ROLE_USER",
        "parts": [{"text": text}],
    }
    if task_id:
        message["taskId"] = task_id
    if context_id:
        message["contextId"] = context_id
    headers = {"Authorization": f"Bearer {token or server.token}", "A2A-Version": "1.0"}
    body = {"message": message, "configuration": {"returnImmediately": True}}
    headers["A2A-Extensions"] = OUTFITTER_TASK_URI
    response = httpx.post(server.url + "/message:send", json=body, headers=headers, timeout=30)
    assert response.status_code == 200, response.text
    task: dict[str, Any] = response.json()["task"]
    return task


def api_task(server: RunningServer, task_id: str) -> dict[str, Any]:
    """``GET /tasks/{id}`` as the server's principal."""
    response = httpx.get(f"{server.url}/tasks/{task_id}", headers=server.auth_headers(), timeout=30)
    assert response.status_code == 200, response.text
    task: dict[str, Any] = response.json()
    return task


def storage(page: Page) -> dict[str, Any]:
    """This tab's sessionStorage and localStorage, as JSON."""
    raw = page.evaluate(
        "() => JSON.stringify({session: {...sessionStorage}, local: {...localStorage}})"
    )
    value: dict[str, Any] = json.loads(raw)
    return value
