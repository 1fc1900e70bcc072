"""The browser console (``/console/``) in a real Chromium against a real ``taskplane serve``
with the scripted agent: sign in, start and follow Tasks, answer questions (text and
``elicitation/v1`` forms), cancel, operator view, isolation between principals, a
server restart under a live stream. A screenshot of each main view is saved under the
session's base temporary directory, in ``console-screenshots/``."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import BrowserContext, Page, Route, expect

from tests.e2e.console_browser import (
    DESKTOP,
    PHONE,
    SEE_TIMEOUT_MS,
    api_send,
    api_task,
    chromium,
    see,
    send_from_console,
    sign_in,
    state_of,
    storage,
)
from tests.e2e.taskplane_proc import RunningServer, Spawner, write_credentials

pytestmark = pytest.mark.slow

OTHER_TOKEN = "console-other-token-0123456789"
OTHER_PRINCIPAL = "other"
MANIFEST = {"workflows": [{"id": "review", "outputs": {"summary": {"type": "review-summary"}}}]}


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the screenshots go: ``<basetemp>/console-screenshots``."""
    folder = tmp_path_factory.getbasetemp() / "console-screenshots"
    folder.mkdir(exist_ok=True)
    return folder


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """One ``taskplane serve`` (scripted agent) for the module, with two principals."""
    root = tmp_path_factory.mktemp("console-server")
    spawner = Spawner(root)
    try:
        token = "console-e2e-token-0123456789"
        both = write_credentials(
            root / "both-credentials.json", [(token, "e2e"), (OTHER_TOKEN, OTHER_PRINCIPAL)]
        )
        manifest = root / "workflow.json"
        manifest.write_text(json.dumps(MANIFEST))
        yield spawner.serve(
            token=token,
            extra_env={
                "A2A_CREDENTIALS_PATH": str(both),
                "A2A_WORKFLOW_MANIFEST": str(manifest),
            },
        )
    finally:
        spawner.close()


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrowserContext]:
    with chromium(tmp_path_factory.mktemp("chromium-profile")) as context:
        yield context


@pytest.fixture
def page(browser: BrowserContext) -> Iterator[Page]:
    """A new tab: signed out (sessionStorage is per tab). At the end, the page must have
    raised no uncaught error and broken no rule of its Content-Security-Policy."""
    tab = browser.new_page()
    tab.bring_to_front()  # the focused tab: keyboard focus is observable
    problems: list[str] = []
    tab.on("pageerror", lambda error: problems.append(f"uncaught: {error}"))
    tab.on(
        "console",
        lambda message: (
            problems.append(f"console: {message.text}")
            if "Content Security Policy" in message.text or message.type == "warning"
            else None
        ),
    )
    try:
        yield tab
    finally:
        tab.close()
    assert problems == []


def test_sign_in_says_when_the_token_is_wrong_and_keeps_it_in_session_storage_only(
    page: Page, server: RunningServer, shots: Path
) -> None:
    page.goto(server.url + "/console/")
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible(timeout=SEE_TIMEOUT_MS)
    expect(page.get_by_label("Token")).to_be_focused()
    page.screenshot(path=shots / "01-sign-in.png", full_page=True)
    page.get_by_label("Token").fill("not-a-token")
    page.get_by_role("button", name="Sign in").click()
    see(page, "That token was not accepted")
    page.screenshot(path=shots / "02-sign-in-wrong-token.png", full_page=True)
    assert storage(page) == {"session": {}, "local": {}}

    page.get_by_label("Token").fill(server.token)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Tasks", exact=True)).to_be_visible(
        timeout=SEE_TIMEOUT_MS
    )
    kept = storage(page)
    assert list(kept["session"].values()) == [server.token]
    assert kept["local"] == {}
    assert server.token not in page.url

    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible(timeout=SEE_TIMEOUT_MS)
    assert storage(page) == {"session": {}, "local": {}}
    log = server.process.stderr() + server.process.stdout()
    assert server.token not in log


def test_hello_completes_with_its_echo_and_is_listed(
    page: Page, server: RunningServer, shots: Path
) -> None:
    sign_in(page, server)
    task_id = send_from_console(page, "hello")
    state_of(page, "Completed")
    artifacts = page.get_by_role("region", name="Artifacts")
    expect(artifacts.locator(".part-text")).to_have_text("hello", timeout=SEE_TIMEOUT_MS)
    expect(page.get_by_role("region", name="History")).to_contain_text("hello")
    page.screenshot(path=shots / "04-task-completed.png", full_page=True)

    # The Task's URL is shareable: a fresh tab that signs in lands on it.
    shared = page.url
    assert shared == f"{server.url}/console/#/tasks/{task_id}"
    page.get_by_role("link", name="All tasks").click()
    row = page.locator("table.tasks tbody tr").first
    expect(row).to_contain_text("hello", timeout=SEE_TIMEOUT_MS)
    expect(row).to_contain_text("Completed")
    expect(row).to_contain_text(task_id)
    page.screenshot(path=shots / "03-tasks-list.png", full_page=True)


def test_a_direct_reply_is_shown_without_a_task(page: Page, server: RunningServer) -> None:
    sign_in(page, server)
    page.get_by_label("Message").fill("ping")
    page.get_by_role("button", name="Send", exact=True).click()
    expect(page.locator(".reply")).to_have_text("Agent: pong", timeout=SEE_TIMEOUT_MS)
    assert "#/tasks/" not in page.url


def test_a_shared_task_link_opens_the_task_after_sign_in(
    browser: BrowserContext, server: RunningServer
) -> None:
    task = api_send(server, "shared link")
    tab = browser.new_page()
    try:
        tab.goto(f"{server.url}/console/#/tasks/{task['id']}")
        tab.get_by_label("Token").fill(server.token)
        tab.get_by_role("button", name="Sign in").click()
        state_of(tab, "Completed")
        expect(tab.get_by_role("heading", level=1)).to_contain_text("shared link")
    finally:
        tab.close()


def test_a_question_is_answered_in_the_page(page: Page, server: RunningServer) -> None:
    sign_in(page, server)
    send_from_console(page, "ask: which colour?")
    state_of(page, "Input required")
    see(page, "The agent asks:")
    expect(page.locator(".question")).to_contain_text("which colour?")
    page.get_by_label("Message").fill("blue")
    page.get_by_role("button", name="Send", exact=True).click()
    state_of(page, "Completed")
    expect(page.get_by_role("region", name="Artifacts")).to_contain_text(
        "You answered: blue", timeout=SEE_TIMEOUT_MS
    )
    expect(page.get_by_role("button", name="Cancel task")).to_have_count(0)


def test_a_schema_question_is_answered_through_its_form(
    page: Page, server: RunningServer, shots: Path
) -> None:
    sign_in(page, server)
    task_id = send_from_console(page, "form: What is your name?")
    state_of(page, "Input required")
    form = page.locator("form.elicitation")
    expect(form.get_by_role("heading")).to_have_text("What is your name?", timeout=SEE_TIMEOUT_MS)
    expect(form.locator("label")).to_have_text("Answer (required)")
    form.get_by_role("button", name="Send answer").click()  # empty: refused in the page
    expect(form).to_contain_text("This field is required.")
    expect(form.get_by_label("Answer")).to_be_focused()
    expect(form.get_by_label("Answer")).to_have_attribute("aria-invalid", "true")
    page.screenshot(path=shots / "05-elicitation-form.png", full_page=True)
    assert api_task(server, task_id)["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"

    form.get_by_label("Answer").fill("Ada")
    form.get_by_role("button", name="Send answer").click()
    state_of(page, "Completed")
    expect(page.get_by_role("region", name="Artifacts")).to_contain_text(
        'You answered: Accepted requested input: {"answer":"Ada"}', timeout=SEE_TIMEOUT_MS
    )
    answer = api_task(server, task_id)["history"][-1]
    assert (
        "https://github.com/ai-outfitter/channels/a2a-extensions/elicitation/v1"
        in (answer["extensions"])
    )
    assert answer["parts"][1] == {
        "data": {"elicitation/v1": {"action": "accept", "content": {"answer": "Ada"}}}
    }


FORM_PAGE = """
async (schema) => {
  const { elicitationForm } = await import("/console/elicitation.js");
  window.answers = [];
  const form = elicitationForm({ message: "Book a table", requestedSchema: schema },
    async (action, content) => { window.answers.push({ action, content }); return "Sent."; });
  document.querySelector("main").replaceChildren(form);
}
"""
EVERY_TYPE = {
    "type": "object",
    "properties": {
        "name": {
            "type": "string",
            "title": "Name",
            "description": "As on the booking",
            "minLength": 2,
        },
        "email": {"type": "string", "title": "Email", "format": "email"},
        "guests": {"type": "integer", "title": "Guests", "minimum": 1, "maximum": 12},
        "budget": {"type": "number", "title": "Budget per head", "description": "In euros"},
        "terrace": {"type": "boolean", "title": "Terrace", "default": False},
        "time": {
            "type": "string",
            "title": "Time",
            "enum": ["early", "late"],
            "enumNames": ["Early (18:00)", "Late (21:00)"],
        },
    },
    "required": ["name", "guests", "time"],
}


def test_every_schema_field_type_renders_labelled_and_is_checked(
    page: Page, server: RunningServer, shots: Path
) -> None:
    sign_in(page, server)
    page.evaluate(FORM_PAGE, EVERY_TYPE)
    form = page.locator("form.elicitation")
    expect(form.get_by_label("Name (required)")).to_have_accessible_description("As on the booking")
    expect(form.get_by_label("Email")).to_have_attribute("type", "email")
    expect(form.get_by_label("Guests (required)")).to_have_attribute("step", "1")
    expect(form.get_by_label("Budget per head")).to_have_accessible_description("In euros")
    expect(form.get_by_label("Terrace")).not_to_be_checked()
    options = form.get_by_label("Time (required)").locator("option")
    expect(options).to_have_text(["Choose one", "Early (18:00)", "Late (21:00)"])

    form.get_by_label("Name (required)").fill("A")
    form.get_by_label("Email").fill("not an address")
    form.get_by_label("Guests (required)").fill("2.5")
    form.get_by_role("button", name="Send answer").click()
    expect(form).to_contain_text("Enter at least 2 characters.")
    expect(form).to_contain_text("Enter an email address.")
    expect(form).to_contain_text("Enter a whole number.")
    expect(form).to_contain_text("This field is required.")
    expect(form).to_contain_text("Not sent: 4 fields need attention.")
    page.screenshot(path=shots / "06-elicitation-every-type.png", full_page=True)
    assert page.evaluate("() => window.answers") == []

    form.get_by_label("Name (required)").fill("Ada")
    form.get_by_label("Email").fill("ada@example.com")
    form.get_by_label("Guests (required)").fill("13")
    form.get_by_role("button", name="Send answer").click()
    expect(form).to_contain_text("Enter 12 or less.")
    form.get_by_label("Guests (required)").fill("4")
    form.get_by_label("Budget per head").fill("42.5")
    form.get_by_label("Terrace").check()
    form.get_by_label("Time (required)").select_option("late")
    form.get_by_role("button", name="Send answer").click()
    expect(form).to_contain_text("Sent.")
    form.get_by_role("button", name="Decline").click()
    expect(page.get_by_role("button", name="Decline")).to_be_enabled()
    answers = page.evaluate("() => window.answers")
    assert answers[1]["action"] == "decline" and answers[1].get("content") is None
    assert answers[:1] == [
        {
            "action": "accept",
            "content": {
                "name": "Ada",
                "email": "ada@example.com",
                "guests": 4,
                "budget": 42.5,
                "terrace": True,
                "time": "late",
            },
        }
    ]


def test_an_auth_request_is_answered_in_the_page(page: Page, server: RunningServer) -> None:
    sign_in(page, server)
    send_from_console(page, "auth: Please sign in at the bank")
    state_of(page, "Auth required")
    expect(page.locator(".question")).to_contain_text(
        "The agent needs you to authenticate: Please sign in at the bank", timeout=SEE_TIMEOUT_MS
    )
    page.get_by_label("Message").fill("signed in")
    page.get_by_role("button", name="Send", exact=True).click()
    state_of(page, "Completed")
    expect(page.get_by_role("region", name="Artifacts")).to_contain_text(
        "You answered: signed in", timeout=SEE_TIMEOUT_MS
    )


def test_a_sleeping_task_is_canceled(page: Page, server: RunningServer, shots: Path) -> None:
    sign_in(page, server)
    task_id = send_from_console(page, "sleep: 600000")
    state_of(page, "Working")
    see(page, "Live: following updates")
    page.get_by_role("button", name="Cancel task").click()
    # Cancel asks first, in the page; "No, keep it" (or Escape) keeps the Task.
    expect(page.get_by_role("group", name="Cancel this task?")).to_be_visible()
    expect(page.get_by_role("button", name="No, keep it")).to_be_focused()
    page.screenshot(path=shots / "18-cancel-confirm.png", full_page=True)
    page.keyboard.press("Escape")
    expect(page.get_by_role("button", name="Cancel task")).to_be_focused()
    assert api_task(server, task_id)["status"]["state"] == "TASK_STATE_WORKING"
    page.get_by_role("button", name="Cancel task").click()
    page.get_by_role("button", name="Yes, cancel it").click()
    state_of(page, "Canceled")
    expect(page.locator(".status-box")).to_be_focused()  # not lost with the removed button
    expect(page.get_by_role("button", name="Cancel task")).to_have_count(0)
    assert api_task(server, task_id)["status"]["state"] == "TASK_STATE_CANCELED"


def test_a_task_changed_by_another_client_updates_live(page: Page, server: RunningServer) -> None:
    task = api_send(server, "ask: which fruit?")
    sign_in(page, server)
    page.goto(f"{server.url}/console/#/tasks/{task['id']}")
    state_of(page, "Input required")
    see(page, "Live: following updates")
    api_send(server, "pear", task_id=task["id"])  # another client answers
    state_of(page, "Completed")
    expect(page.get_by_role("region", name="Artifacts")).to_contain_text(
        "You answered: pear", timeout=SEE_TIMEOUT_MS
    )
    expect(page.get_by_role("region", name="History")).to_contain_text("pear")


def test_another_principals_task_never_appears(page: Page, server: RunningServer) -> None:
    theirs = api_send(server, "the other principal's secret", token=OTHER_TOKEN)
    api_send(server, "mine, listed")
    sign_in(page, server)
    table = page.locator("table.tasks")
    expect(table).to_contain_text("mine, listed", timeout=SEE_TIMEOUT_MS)
    expect(table).not_to_contain_text("the other principal's secret")
    expect(table).not_to_contain_text(theirs["id"])

    page.get_by_label("Context").fill(theirs["contextId"])
    page.get_by_role("button", name="Apply filters").click()
    see(page, "No tasks match.")

    page.goto(f"{server.url}/console/#/tasks/{theirs['id']}")
    see(page, "No such task: it does not exist or is not yours.")
    expect(page.locator("main")).not_to_contain_text("the other principal's secret")


def test_filters_and_pages_use_the_api(page: Page, server: RunningServer) -> None:
    first = api_send(server, "page item 0", context_id="console-paging")
    context = first["contextId"]
    for n in range(1, 21):
        api_send(server, f"page item {n}", context_id=context)
    asked = api_send(server, "ask: paged question?", context_id=context)
    sign_in(page, server)
    page.get_by_label("Context").fill(context)
    page.get_by_role("button", name="Apply filters").click()
    see(page, "Tasks 1–20 of 22, newest first.")
    assert "context=" in page.url  # the filtered list is shareable too
    page.get_by_role("button", name="Next page").click()
    see(page, "Tasks 21–22 of 22, newest first.")
    expect(page.get_by_role("button", name="Next page")).to_be_disabled()
    page.get_by_role("button", name="Previous page").click()
    see(page, "Tasks 1–20 of 22, newest first.")

    page.get_by_label("State").select_option(label="Input required")
    page.get_by_role("button", name="Apply filters").click()
    see(page, "Tasks 1–1 of 1, newest first.")
    expect(page.locator("table.tasks tbody tr")).to_contain_text(asked["id"])


def test_operator_view_shows_readiness_charts_and_card(
    page: Page, server: RunningServer, shots: Path
) -> None:
    api_send(server, "for the charts")
    sign_in(page, server)
    page.get_by_role("link", name="Operator").click()
    readiness = page.get_by_role("region", name="Readiness")
    expect(readiness).to_contain_text("Ready", timeout=SEE_TIMEOUT_MS)
    expect(readiness).to_contain_text("No reasons against readiness.")
    states = page.get_by_role("region", name="Tasks by state")
    expect(states.get_by_role("heading")).to_have_text(
        "Tasks by state, on this server (all principals)"
    )
    expect(states).to_contain_text("every principal's Tasks on this server, not only yours")
    completed = states.get_by_role("row", name="Completed")
    expect(completed.locator("td.number")).not_to_have_text("0", timeout=SEE_TIMEOUT_MS)
    expect(page.get_by_role("region", name="Wake queue")).to_contain_text("Depth now: 0")
    expect(page.get_by_role("region", name="Wake queue")).to_contain_text("of at most 128")
    card = page.get_by_role("region", name="Agent Card")
    expect(card).to_contain_text(str(server.card["name"]), timeout=SEE_TIMEOUT_MS)
    expect(card).to_contain_text("elicitation/v1")
    # The charts are polled: wait for a second reading.
    expect(
        page.get_by_role("img", name="Wake queue depth: 0 to 0 over the last 2 readings")
    ).to_be_visible(timeout=SEE_TIMEOUT_MS)
    page.screenshot(path=shots / "07-operator.png", full_page=True)


def test_keyboard_only_at_phone_width(
    browser: BrowserContext, server: RunningServer, shots: Path
) -> None:
    tab = browser.new_page()
    tab.set_viewport_size(PHONE)
    tab.bring_to_front()
    try:
        tab.goto(server.url + "/console/")
        expect(tab.get_by_label("Token")).to_be_focused(timeout=SEE_TIMEOUT_MS)
        tab.keyboard.type(server.token)
        tab.keyboard.press("Tab")
        expect(tab.get_by_role("button", name="Sign in")).to_be_focused()
        tab.keyboard.press("Enter")
        expect(tab.get_by_role("heading", name="Tasks", exact=True)).to_be_focused(
            timeout=SEE_TIMEOUT_MS
        )
        for _ in range(30):  # Tab through the header to the composer
            tab.keyboard.press("Tab")
            if tab.evaluate("() => document.activeElement.id.startsWith('message')"):
                break
        expect(tab.get_by_label("Message")).to_be_focused()
        tab.keyboard.type("hello from the keyboard")
        tab.keyboard.press("Tab")
        expect(tab.get_by_role("button", name="Send", exact=True)).to_be_focused()
        tab.keyboard.press("Enter")
        tab.wait_for_url("**/console/#/tasks/*", timeout=SEE_TIMEOUT_MS)
        state_of(tab, "Completed")
        assert tab.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
        tab.screenshot(path=shots / "09-phone-task.png", full_page=True)
        tab.get_by_role("link", name="All tasks").focus()
        tab.keyboard.press("Enter")
        expect(tab.locator("table.tasks tbody tr").first).to_contain_text(
            "hello from the keyboard", timeout=SEE_TIMEOUT_MS
        )
        assert tab.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
        tab.screenshot(path=shots / "08-phone-tasks.png")  # the first screenful
    finally:
        tab.close()


def test_a_live_task_survives_a_server_restart(
    spawn: Spawner, browser: BrowserContext, shots: Path
) -> None:
    first = spawn.serve()
    for n in range(21):
        api_send(first, f"before the restart {n}")
    task = api_send(first, "ask: still there?")
    lister = browser.new_page()
    tab = browser.new_page()
    try:
        sign_in(lister, first)  # on page 2, with a page token of the first process
        lister.get_by_role("button", name="Next page").click()
        see(lister, "Tasks 21–22 of 22, newest first.")
        tab.bring_to_front()
        sign_in(tab, first)
        tab.goto(f"{first.url}/console/#/tasks/{task['id']}")
        state_of(tab, "Input required")
        see(tab, "Live: following updates")

        first.process.stop()  # SIGTERM: the stream ends with an UNAVAILABLE frame
        see(tab, "Stream interrupted")
        expect(tab.locator(".live")).not_to_contain_text("GET /tasks")  # words, not API-speak
        port = int(first.url.rsplit(":", 1)[1])
        started = time.monotonic()
        again = spawn.serve(store=first.store, port=port, token=first.token)
        see(tab, "Live again: read the task, then subscribed again.")
        expect(tab.locator(".connection-log")).to_contain_text(
            "Reconnected: read the task again and subscribed again."
        )
        tab.screenshot(path=shots / "10-task-reconnected.png", full_page=True)

        api_send(again, "yes", task_id=task["id"])  # another client, after the restart
        state_of(tab, "Completed")
        expect(tab.get_by_role("region", name="Artifacts")).to_contain_text(
            "You answered: yes", timeout=SEE_TIMEOUT_MS
        )
        assert time.monotonic() - started < 60

        lister.get_by_role("button", name="Refresh").click()  # the old token is refused
        see(lister, "That page is no longer available (the server restarted)")
        see(lister, "Tasks 1–20 of 22, newest first.")
    finally:
        tab.close()
        lister.close()


def test_files_data_and_workflow_outputs_are_shown(
    page: Page, server: RunningServer, shots: Path
) -> None:
    raw = api_send(server, "a file", message_id=f"tck-artifact-file-{time.time_ns()}")
    link = api_send(server, "a link", message_id=f"tck-artifact-file-url-{time.time_ns()}")
    data = api_send(server, "data", message_id=f"tck-artifact-data-{time.time_ns()}")
    output = api_send(server, 'output: summary {"verdict": "approve", "comments": 2}')
    sign_in(page, server)

    page.goto(f"{server.url}/console/#/tasks/{raw['id']}")
    state_of(page, "Completed")
    download = page.get_by_role("link", name="Download output.txt")
    expect(download).to_have_attribute("href", re.compile(r"^blob:"), timeout=SEE_TIMEOUT_MS)
    expect(page.get_by_role("region", name="Artifacts")).to_contain_text("(text/plain), 12 bytes")
    with page.expect_download() as saved:
        download.click()
    assert Path(saved.value.path()).read_bytes() == b"file content"

    page.goto(f"{server.url}/console/#/tasks/{link['id']}")
    state_of(page, "Completed")
    expect(page.get_by_role("link", name="Download output.txt")).to_have_attribute(
        "href", "https://example.com/output.txt"
    )

    page.goto(f"{server.url}/console/#/tasks/{data['id']}")
    state_of(page, "Completed")
    expect(page.get_by_role("region", name="Artifacts").locator("pre")).to_have_text(
        '{\n  "key": "value",\n  "count": 42\n}'
    )

    page.goto(f"{server.url}/console/#/tasks/{output['id']}")
    state_of(page, "Completed")
    artifacts = page.get_by_role("region", name="Artifacts")
    expect(artifacts).to_contain_text("summary — output summary of type review-summary")
    expect(artifacts).to_contain_text('"verdict": "approve"')
    page.screenshot(path=shots / "11-task-output.png", full_page=True)


def test_a_failed_send_is_retried_with_the_same_message_id(
    page: Page, server: RunningServer
) -> None:
    sign_in(page, server)
    bodies: list[dict[str, object]] = []

    def drop_the_first(route: Route) -> None:
        bodies.append(json.loads(route.request.post_data or "{}"))
        if len(bodies) == 1:
            route.abort("connectionreset")  # the send never reaches the server
        else:
            route.continue_()

    page.route("**/message:send", drop_the_first)
    page.get_by_label("Message").fill("retried once")
    page.get_by_role("button", name="Send", exact=True).click()
    see(page, "Not sent: The server did not answer.")
    expect(page.get_by_label("Message")).to_have_value("retried once")
    page.get_by_role("button", name="Send", exact=True).click()
    page.wait_for_url("**/console/#/tasks/*", timeout=SEE_TIMEOUT_MS)
    state_of(page, "Completed")
    first, second = (b["message"]["messageId"] for b in bodies)  # type: ignore[index]
    assert first == second

    page.get_by_role("link", name="All tasks").click()
    page.get_by_label("Message").fill("retried once")
    page.get_by_role("button", name="Send", exact=True).click()  # a new message: a new ID
    page.wait_for_url("**/console/#/tasks/*", timeout=SEE_TIMEOUT_MS)
    assert bodies[2]["message"]["messageId"] != first  # type: ignore[index]


SSE_PARSER = """
async (chunks) => {
  const { SseParser } = await import("/console/sse.js");
  const parser = new SseParser();
  return chunks.flatMap((chunk) => parser.push(chunk));
}
"""


def test_the_stream_reader_frames_events_across_chunk_boundaries(
    page: Page, server: RunningServer
) -> None:
    page.goto(server.url + "/console/")
    chunks = [
        'data: {"task":{"id":"t"',
        '}}\n\n: keep-alive\n\ndata: {"statusUpdate":{}}\r\n\r',
        '\nevent: error\ndata: {"error":{"code":503}}\n\n',
        'data: {"half":',
    ]
    assert page.evaluate(SSE_PARSER, chunks) == [
        {"type": "message", "data": {"task": {"id": "t"}}},
        {"type": "message", "data": {"statusUpdate": {}}},
        {"type": "error", "data": {"error": {"code": 503}}},
    ]


LONG_URL = ("https://example.com/reports/" + "0123456789" * 12)[:120]
FITS = """() => document.documentElement.scrollWidth <= window.innerWidth
  && document.querySelector("main").scrollWidth <= document.querySelector("main").clientWidth"""
"""Nothing is wider than the window, and nothing in ``main`` is wider than ``main``."""


def api_cancel(server: RunningServer, task_id: str) -> dict[str, Any]:
    """``POST /tasks/{id}:cancel`` as the server's principal; the canceled Task."""
    response = httpx.post(
        f"{server.url}/tasks/{task_id}:cancel", json={}, headers=server.auth_headers(), timeout=30
    )
    assert response.status_code == 200, response.text
    task: dict[str, Any] = response.json()
    return task


def test_long_unbroken_text_wraps_and_the_heading_is_shortened(
    browser: BrowserContext, server: RunningServer, shots: Path
) -> None:
    asked = api_send(server, f"ask: Is {LONG_URL} the right report?")
    zs = api_send(server, "Z" * 3000)
    tab = browser.new_page()
    tab.set_viewport_size(PHONE)
    try:
        sign_in(tab, server)
        expect(tab.locator("table.tasks")).to_contain_text(zs["id"], timeout=SEE_TIMEOUT_MS)
        expect(tab.locator("table.tasks")).to_contain_text(asked["id"])
        assert tab.evaluate(FITS)
        tab.screenshot(path=shots / "12-phone-long-text-list.png", full_page=True)
        for name, size in (("phone", PHONE), ("desktop", DESKTOP)):
            tab.set_viewport_size(size)
            tab.goto(f"{server.url}/console/#/tasks/{asked['id']}")
            state_of(tab, "Input required")
            expect(tab.locator(".status-message")).to_contain_text(LONG_URL)
            expect(tab.locator(".question")).to_contain_text(f"The agent asks: Is {LONG_URL}")
            assert tab.evaluate(FITS), name
            tab.screenshot(path=shots / f"13-{name}-long-url-question.png", full_page=True)

            tab.goto(f"{server.url}/console/#/tasks/{zs['id']}")
            state_of(tab, "Completed")
            heading = tab.get_by_role("heading", level=1)
            expect(heading).to_have_text(re.compile(r"^Task: Z{59}…$"))
            expect(tab.get_by_role("region", name="History")).to_contain_text("Z" * 3000)
            expect(tab.get_by_role("region", name="Artifacts")).to_contain_text("Z" * 3000)
            assert tab.evaluate(FITS), name
            tab.screenshot(path=shots / f"14-{name}-3000-zs.png", full_page=True)
            assert len(tab.title()) < 120
        tab.goto(f"{server.url}/console/#/tasks")
        expect(tab.locator("table.tasks")).to_contain_text(zs["id"], timeout=SEE_TIMEOUT_MS)
        assert tab.evaluate(FITS)
    finally:
        tab.close()


def test_a_refused_send_says_what_to_change_and_a_failed_one_offers_the_retry(
    page: Page, server: RunningServer, shots: Path
) -> None:
    sign_in(page, server)
    status = page.locator("form.composer .form-status")
    page.get_by_label("Message").fill("x" * 300_000)  # over the 256 KiB a message may hold
    page.get_by_role("button", name="Send", exact=True).click()
    expect(status).to_contain_text("Not sent: ", timeout=SEE_TIMEOUT_MS)
    expect(status).to_contain_text("(PAYLOAD_TOO_LARGE).")
    expect(status).to_contain_text("The message is too large for the server: shorten it")
    expect(status).not_to_contain_text("retry")
    page.screenshot(path=shots / "16-send-too-large.png", full_page=True)

    def busy(route: Route) -> None:
        body = {"error": {"code": 503, "status": "UNAVAILABLE", "message": "the server is busy"}}
        route.fulfill(status=503, json=body, headers={"Retry-After": "1"})

    page.route("**/message:send", busy)
    page.get_by_label("Message").fill("busy, then retried")
    page.get_by_role("button", name="Send", exact=True).click()
    expect(status).to_have_text(
        "Not sent: The server is busy (UNAVAILABLE). Try again in 1 s. Press Send again to "
        "retry; the retry reuses the same message ID, so it is never done twice.",
        timeout=SEE_TIMEOUT_MS,
    )

    def unreachable(route: Route) -> None:
        route.abort("connectionreset")

    page.unroute("**/message:send")
    page.route("**/message:send", unreachable)
    page.get_by_role("button", name="Send", exact=True).click()
    expect(status).to_contain_text("Not sent: The server did not answer. Press Send again")


def test_sign_in_checks_the_token_text_and_accepts_a_bearer_prefix(
    page: Page, server: RunningServer, shots: Path
) -> None:
    sent: list[str] = []
    api = server.url + "/tasks"
    page.on(
        "request", lambda request: sent.append(request.url) if request.url.startswith(api) else None
    )
    page.goto(server.url + "/console/")
    error = page.locator("#sign-in-error")
    page.get_by_label("Token").fill("tökén€😀")  # no HTTP header can carry these
    page.get_by_role("button", name="Sign in").click()
    expect(error).to_contain_text("That is not a valid token", timeout=SEE_TIMEOUT_MS)
    expect(page.get_by_label("Token")).to_be_focused()
    page.screenshot(path=shots / "15-sign-in-invalid-token.png", full_page=True)
    assert sent == []

    page.get_by_label("Token").fill("A" * 100_000)
    page.get_by_role("button", name="Sign in").click()
    expect(error).to_have_text(
        "That token is far too long to be a valid token. Check that you pasted only the token.",
        timeout=SEE_TIMEOUT_MS,
    )
    assert storage(page) == {"session": {}, "local": {}}

    page.get_by_label("Token").fill(f"  bearer   {server.token} ")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Tasks", exact=True)).to_be_visible(
        timeout=SEE_TIMEOUT_MS
    )
    assert list(storage(page)["session"].values()) == [server.token]


def test_a_status_number_is_shown_once_when_the_answer_has_no_error_body(
    page: Page, server: RunningServer
) -> None:
    sign_in(page, server)
    page.route("**/message:send", lambda route: route.fulfill(status=502, body="bad gateway"))
    page.get_by_label("Message").fill("through a broken proxy")
    page.get_by_role("button", name="Send", exact=True).click()
    status = page.locator("form.composer .form-status")
    expect(status).to_contain_text(
        "Not sent: The server answered HTTP 502. Press Send again", timeout=SEE_TIMEOUT_MS
    )
    assert (status.text_content() or "").count("502") == 1


def test_answering_with_the_keyboard_moves_the_focus_to_the_status(
    page: Page, server: RunningServer
) -> None:
    task = api_send(server, "ask: which size?")
    sign_in(page, server)
    page.goto(f"{server.url}/console/#/tasks/{task['id']}")
    state_of(page, "Input required")
    see(page, "Live: following updates")
    page.get_by_label("Message").focus()
    page.keyboard.type("large")
    page.keyboard.press("Tab")
    expect(page.get_by_role("button", name="Send", exact=True)).to_be_focused()
    page.keyboard.press("Enter")
    state_of(page, "Completed")
    expect(page.locator(".status-box")).to_be_focused()
    assert page.evaluate("() => document.activeElement !== document.body")


def test_a_finished_task_is_read_not_subscribed_and_a_late_finish_is_no_interruption(
    page: Page, server: RunningServer
) -> None:
    subscribed: list[str] = []
    page.on(
        "request",
        lambda request: subscribed.append(request.url) if ":subscribe" in request.url else None,
    )
    done = api_cancel(server, api_send(server, "sleep: 600000")["id"])
    sign_in(page, server)
    page.goto(f"{server.url}/console/#/tasks/{done['id']}")
    state_of(page, "Canceled")
    see(page, "Finished: nothing more will change.")
    assert subscribed == []

    # The race: the read still said Working, the Task finished before the subscribe.
    late = api_cancel(server, api_send(server, "sleep: 600000")["id"])

    def still_working(route: Route) -> None:
        response = route.fetch()
        body = response.json()
        body["status"]["state"] = "TASK_STATE_WORKING"
        route.fulfill(response=response, json=body)

    page.route(f"**/tasks/{late['id']}", still_working, times=1)
    page.goto(f"{server.url}/console/#/tasks/{late['id']}")
    state_of(page, "Canceled")
    see(page, "Finished: nothing more will change.")
    assert subscribed == [f"{server.url}/tasks/{late['id']}:subscribe"]  # answered 400
    expect(page.locator(".connection-log")).to_be_empty()


SHUTDOWN_TEXT = (
    "the server is shutting down; read the task with GET /tasks/{id} and subscribe again "
    "once it is back"
)


def test_a_shutdown_frame_is_told_in_words_with_the_servers_text_as_detail(
    page: Page, server: RunningServer, shots: Path
) -> None:
    task = api_send(server, "ask: still listening?")
    frame = {
        "error": {
            "code": 503,
            "status": "UNAVAILABLE",
            "message": SHUTDOWN_TEXT,
            "details": [
                {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "UNAVAILABLE"}
            ],
        }
    }
    page.route(
        f"**/tasks/{task['id']}:subscribe",
        lambda route: route.fulfill(
            status=200,
            content_type="text/event-stream",
            body=f"event: error\ndata: {json.dumps(frame)}\n\n",
        ),
        times=1,  # the reconnect reaches the real server
    )
    sign_in(page, server)
    page.goto(f"{server.url}/console/#/tasks/{task['id']}")
    see(page, "Live again: read the task, then subscribed again.")
    entry = page.locator(".connection-log li", has_text="Stream interrupted")
    expect(entry).to_contain_text(
        "Stream interrupted: The server stopped the live updates (it is shutting down, "
        "restarting or catching up).",
        timeout=SEE_TIMEOUT_MS,
    )
    expect(page.locator(".live")).not_to_contain_text("GET /tasks")
    expect(entry.get_by_text(SHUTDOWN_TEXT)).to_be_hidden()
    entry.get_by_text("Technical details").click()
    expect(entry.get_by_text(SHUTDOWN_TEXT)).to_be_visible()
    page.screenshot(path=shots / "19-stream-shutdown-words.png", full_page=True)


def test_a_schema_question_at_phone_width_folds_the_schema_and_sets_cancel_apart(
    browser: BrowserContext, server: RunningServer, shots: Path
) -> None:
    tab = browser.new_page()
    tab.set_viewport_size(PHONE)
    try:
        sign_in(tab, server)
        send_from_console(tab, "form: Which table would you like?")
        state_of(tab, "Input required")
        schema = tab.get_by_role("region", name="History").locator("details.part-data")
        expect(schema.locator("summary")).to_have_text(
            "Data: the question's form (elicitation/v1 schema)", timeout=SEE_TIMEOUT_MS
        )
        expect(schema.locator("pre")).to_be_hidden()
        decline = tab.get_by_role("button", name="Decline").bounding_box()
        cancel = tab.get_by_role("button", name="Cancel task").bounding_box()
        assert decline is not None and cancel is not None
        assert cancel["y"] - (decline["y"] + decline["height"]) >= 48
        assert tab.evaluate(FITS)
        tab.screenshot(path=shots / "17-phone-schema-question.png", full_page=True)
        schema.locator("summary").click()
        expect(schema.locator("pre")).to_contain_text('"requestedSchema"')
        assert tab.evaluate(FITS)
    finally:
        tab.close()
