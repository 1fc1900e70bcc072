"""The Signal source end to end: ``taskplane serve`` running a fake ``signal-cli`` (a
program of ours speaking signal-cli's JSON-RPC mode on stdio), with the scripted agent."""

from __future__ import annotations

import itertools
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import fake_signal_cli
from tests.e2e._support import (
    event_names,
    kill_with_the_reply_sending,
    replies,
    sigkill,
    sources_env,
    store_rows,
    wait_for,
    wait_for_replies,
)
from tests.e2e.taskplane_proc import Spawner, TaskplaneProcess

pytestmark = pytest.mark.slow

ACCOUNT = fake_signal_cli.ACCOUNT
ALICE = "a1b2c3d4-0000-4000-8000-00000000a11c"
GROUP = "Pmpi+EfPWmsxiomLe9Nx2XF9HOE483p6iKiFj65iMwI="


class Signal:
    """The fake's directory: write envelopes, set counters, read what it saw."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "inbox").mkdir(parents=True)
        self.program = root / "signal-cli"
        fake = Path(fake_signal_cli.__file__).resolve()
        self.program.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{fake}" "$@"\n')
        self.program.chmod(0o755)
        self._names = itertools.count(1)
        self._stamps = itertools.count(1_700_000_000_000, 1000)

    def say(self, text: str, *, group: bool = False, mention: bool = True, **extra: Any) -> int:
        stamp = next(self._stamps)
        data: dict[str, Any] = {"timestamp": stamp, "message": text, "expiresInSeconds": 0}
        if group:
            data["groupInfo"] = {"groupId": GROUP, "type": "DELIVER"}
            if mention:
                data["mentions"] = [{"number": ACCOUNT, "start": 0, "length": 1}]
        envelope = {
            "source": "+15550000002",
            "sourceNumber": "+15550000002",
            "sourceUuid": ALICE,
            "sourceName": "Alice",
            "sourceDevice": 1,
            "timestamp": stamp,
            "dataMessage": data,
            **extra,
        }
        self.envelope(envelope)
        return stamp

    def envelope(self, envelope: dict[str, Any]) -> None:
        name = f"{next(self._names):06d}"
        (self.root / "inbox" / f"{name}.tmp").write_text(json.dumps(envelope))
        (self.root / "inbox" / f"{name}.tmp").rename(self.root / "inbox" / f"{name}.json")

    def set(self, counter: str, value: int) -> None:
        (self.root / counter).write_text(str(value))

    def lines(self, name: str) -> list[dict[str, Any]]:
        path = self.root / name
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def sent(self) -> list[dict[str, Any]]:
        return self.lines("sent.jsonl")

    def sends(self) -> list[dict[str, Any]]:
        return [r for r in self.lines("requests.jsonl") if r.get("method") == "send"]

    def starts(self) -> int:
        path = self.root / "starts"
        return len(path.read_text().splitlines()) if path.exists() else 0


@pytest.fixture
def fake(tmp_path: Path) -> Signal:
    return Signal(tmp_path / "signal")


def serve(spawn: Spawner, fake: Signal, store: Path) -> TaskplaneProcess:
    env = sources_env(
        spawn,
        store,
        "signal",
        SIGNAL_CLI=str(fake.program),
        SIGNAL_ACCOUNT=ACCOUNT,
        FAKE_SIGNAL_DIR=str(fake.root),
    )
    before = fake.starts()
    process = spawn.start(("serve",), env)
    wait_for(lambda: fake.starts() > before, "signal-cli started", process)
    wait_for(lambda: "channels_ready" in event_names(process), "channels_ready", process)
    return process


def non_work(store: Path) -> dict[str, object]:
    """The checkpoint's ``nonWork`` counts ({} before the first checkpoint)."""
    rows = store_rows(store, "SELECT value_json FROM source_checkpoints")
    if not rows:
        return {}
    counts: dict[str, object] = json.loads(str(rows[0][0])).get("nonWork", {})
    return counts


def test_direct_and_group_messages_are_answered_quoting_them_and_the_rest_is_counted(
    spawn: Spawner, fake: Signal, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    process = serve(spawn, fake, store)
    direct = fake.say("a direct question")
    grouped = fake.say("a question in the group", group=True)
    fake.say("group chatter", group=True, mention=False)
    fake.envelope({"sourceUuid": ALICE, "timestamp": 5, "typingMessage": {"action": "STARTED"}})
    fake.envelope({"sourceUuid": ALICE, "timestamp": 6, "receiptMessage": {"isRead": True}})
    wait_for(lambda: len(fake.sent()) == 2, "two replies", process)
    # The envelopes after the questions are read while the replies go out: stop only
    # once the checkpoint has counted them and both replies are recorded delivered.
    wait_for(lambda: non_work(store).get("receipt") == 1, "the receipt counted", process)
    wait_for_replies(store, ["delivered", "delivered"], "two delivered replies", process)
    assert process.signal_and_wait(signal.SIGINT) == 0
    sent = {s["params"]["quoteTimestamp"]: s["params"] for s in fake.sent()}
    assert sent[direct]["recipient"] == [ALICE] and "groupId" not in sent[direct]
    assert sent[grouped]["groupId"] == GROUP and "recipient" not in sent[grouped]
    assert all(p["quoteAuthor"] == ALICE for p in sent.values())
    assert "a direct question" in sent[direct]["message"]
    assert sorted(str(r[1]) for r in replies(store)) == sorted(
        str(s["timestamp"]) for s in fake.sent()
    )
    ((tasks,),) = store_rows(store, "SELECT COUNT(*) FROM tasks")
    assert tasks == 2
    histories = [str(r[0]) for r in store_rows(store, "SELECT task_json FROM tasks")]
    assert any('\\"sourceUuid\\": \\"' + ALICE in h for h in histories)  # the whole envelope
    (cp,) = store_rows(store, "SELECT principal, value_json FROM source_checkpoints")
    assert str(cp[0]).startswith("signal:")
    assert json.loads(str(cp[1]))["nonWork"] == {"not-a-mention": 1, "typing": 1, "receipt": 1}


def test_an_unknown_outcome_of_a_reply_fails_closed_as_ambiguous(
    spawn: Spawner, fake: Signal, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    fake.set("network-failure-sends", 1)
    process = serve(spawn, fake, store)
    fake.say("this answer's fate is unknown")
    wait_for_replies(store, ["ambiguous"], "ambiguous", process)
    time.sleep(1.5)  # a blind resend would need one more delivery round
    process.signal_and_wait(signal.SIGINT)
    assert len(fake.sends()) == 1
    events = event_names(process)
    assert "delivery_ambiguous" in events and "channels_unhealthy" in events


def test_sigkill_leaving_a_reply_sending_fails_closed_after_the_restart(
    spawn: Spawner, fake: Signal, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    process = serve(spawn, fake, store)
    fake.say("answered, then the record is left sending")
    kill_with_the_reply_sending(process, store)
    process = serve(spawn, fake, store)
    wait_for_replies(store, ["ambiguous"], "failed closed", process)
    process.signal_and_wait(signal.SIGINT)
    assert len(fake.sends()) == 1


def test_sigkill_after_acceptance_before_the_reply_delivers_it_after_the_restart(
    spawn: Spawner, fake: Signal, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    fake.set("refuse-sends", 1000)  # the reply cannot go out before the kill
    process = serve(spawn, fake, store)
    fake.say("accepted, then killed")
    wait_for(lambda: store_rows(store, "SELECT COUNT(*) FROM tasks") == [(1,)], "the Task", process)
    sigkill(process)
    fake.set("refuse-sends", 0)
    process = serve(spawn, fake, store)
    wait_for(lambda: len(fake.sent()) == 1, "the reply after the restart", process)
    process.signal_and_wait(signal.SIGINT)
    assert store_rows(store, "SELECT COUNT(*) FROM tasks") == [(1,)]


def test_refused_and_rate_limited_replies_are_retried_and_sent_once(
    spawn: Spawner, fake: Signal, tmp_path: Path
) -> None:
    fake.set("refuse-sends", 1)
    process = serve(spawn, fake, tmp_path / "store")
    fake.say("refused once")
    wait_for(lambda: len(fake.sent()) == 1, "the first reply", process)
    fake.set("rate-limit-sends", 1)
    fake.say("rate limited once")
    wait_for(lambda: len(fake.sent()) == 2, "the second reply", process)
    assert len(fake.sends()) == 4
    assert event_names(process).count("delivery_failed") == 2


def test_an_exited_signal_cli_is_started_again_and_takes_new_messages(
    spawn: Spawner, fake: Signal, tmp_path: Path
) -> None:
    process = serve(spawn, fake, tmp_path / "store")
    (fake.root / "exit").touch()
    wait_for(lambda: fake.starts() == 2, "the second signal-cli", process)
    fake.say("after the restart")
    wait_for(lambda: len(fake.sent()) == 1, "the reply", process)
    assert "source_reconnecting" in event_names(process)


def test_a_missing_program_fails_the_explicit_start(spawn: Spawner, tmp_path: Path) -> None:
    env = sources_env(
        spawn,
        tmp_path / "store",
        "signal",
        SIGNAL_CLI=str(tmp_path / "no-such-signal-cli"),
        SIGNAL_ACCOUNT=ACCOUNT,
    )
    process = spawn.start(("serve",), env)
    assert process.wait_exit() == 2
    assert "source signal failed to start" in process.stderr()


def test_a_native_task_publishes_through_the_channel_tools_once_per_operation(
    spawn: Spawner, fake: Signal, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    env = sources_env(
        spawn,
        store,
        "signal",
        SIGNAL_CLI=str(fake.program),
        SIGNAL_ACCOUNT=ACCOUNT,
        FAKE_SIGNAL_DIR=str(fake.root),
        A2A_AGENT_RUNTIME="python",
        A2A_AGENT_CALLABLE="publishing_agent:agent",
        PYTHONPATH=str(Path(__file__).resolve().parent),
    )
    process = spawn.start(("serve",), env)
    wait_for(lambda: "channels_ready" in event_names(process), "channels_ready", process)
    stamp = fake.say("please report progress")
    wait_for(lambda: len(fake.sent()) == 2, "the note and the answer", process)
    process.signal_and_wait(signal.SIGINT)
    note, answer = (s["params"] for s in fake.sent())
    assert note["message"] == "on it" and note["quoteTimestamp"] == stamp
    assert answer["message"] == "done (same delivery: True; item from signal)"
    assert len(fake.sends()) == 2  # the repeated publish sent nothing
    rows = store_rows(store, "SELECT operation_id, state FROM deliveries ORDER BY operation_id")
    assert rows[0] == ("publish:progress-1", "delivered") and rows[1][1] == "delivered"


def test_a_signal_cli_that_exits_at_start_fails_it_with_its_own_words(
    spawn: Spawner, fake: Signal, tmp_path: Path
) -> None:
    env = sources_env(
        spawn,
        tmp_path / "store",
        "signal",
        SIGNAL_CLI=str(fake.program),
        SIGNAL_ACCOUNT="+15559999999",  # the fake knows only its own account
        FAKE_SIGNAL_DIR=str(fake.root),
    )
    process = spawn.start(("serve",), env)
    assert process.wait_exit() == 2
    assert "source signal failed to start" in process.stderr()
    assert "unexpected arguments" in process.stderr()
