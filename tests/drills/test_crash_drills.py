"""Crash drills: the real server (``python -m taskplane serve``) SIGKILLed and restarted.

Issue "Crash drills as tests". The harness is ``tests/drills/crash_harness.py`` (also
``bench/crash_drill.py``). Each drill picks a random seed unless ``CRASH_DRILL_SEED``
is set; the seed is printed, and a failure message starts with it and with the
command that replays it.

Every wait is bounded (``trio.fail_after`` around each test, timeouts on every HTTP
request, on readiness and on reaping). Connection errors while the server is dead
are unknown outcomes, never failures.
"""

from __future__ import annotations

import json
import os
import random
import sqlite3
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from tests.drills.crash_harness import (
    DATABASE_FILE_NAME,
    ELICITATION_URI,
    TERMINAL_STATES,
    DrillConfig,
    ServerProcess,
    client_for,
    history_problems,
    integrity_check,
    list_tasks,
    lock_is_free,
    post_send,
    read_only_rows,
    run_drill,
    write_credentials,
)

pytestmark = [
    pytest.mark.slow,
    # httpx's request-body async generator is left unexhausted when the server dies
    # mid-request; trio reports it at GC (encode/httpx#3686). Harness noise, not ours.
    pytest.mark.filterwarnings(
        "ignore:Async generator 'httpx._content.ByteStream.__aiter__' was garbage collected"
        ":ResourceWarning"
    ),
]

DRILL_KILLS = 22
STARTUP_KILL_EVERY = 11
"""Cycles 11 and 22 kill the server while it starts: 20 kills land under traffic."""
DRILL_BUDGET_S = 240.0
SCENARIO_BUDGET_S = 120.0


def drill_seed() -> int:
    seed = os.environ.get("CRASH_DRILL_SEED")
    value = int(seed) if seed else random.SystemRandom().randrange(2**31)
    print(f"crash drill seed: {value} (replay with CRASH_DRILL_SEED={value})")
    return value


async def started(workdir: Path, incarnation: int) -> ServerProcess:
    """A ready server on ``workdir/store``; fails the test if it does not start."""
    server = ServerProcess(
        incarnation,
        workdir / "store",
        workdir / "credentials.json",
        workdir / f"inc-{incarnation}.log",
    )
    await server.start()
    failure = await server.wait_ready()
    if failure is not None:
        await server.ensure_dead()
        pytest.fail(f"incarnation {incarnation}: {failure}\n{server.log_tail(30)}")
    return server


async def assert_sound_after(server: ServerProcess, how: str) -> None:
    """The process is gone: the database passes integrity_check and LOCK is free."""
    verdict = await trio.to_thread.run_sync(integrity_check, server.store_root / DATABASE_FILE_NAME)
    assert verdict == "ok", f"integrity_check after {how}: {verdict}\n{server.log_tail(30)}"
    assert lock_is_free(server.store_root), f"store LOCK still held after {how}"


async def assert_stopped_cleanly(server: ServerProcess, code: int | None) -> None:
    """SIGINT stopped the server in time with exit code 0, and it closed the store (the
    last connection's close checkpoints and removes the WAL); then the post-mortem."""
    assert code is not None, f"SIGINT did not stop the server\n{server.log_tail(30)}"
    assert code == 0, f"SIGINT: exit code {code}\n{server.log_tail(30)}"
    wal = server.store_root / (DATABASE_FILE_NAME + "-wal")
    assert not wal.exists(), f"the store was not closed (WAL left behind)\n{server.log_tail(30)}"
    await assert_sound_after(server, "a clean stop")


async def wait_settled(http: httpx.AsyncClient, task_ids: list[str]) -> dict[str, Any]:
    """Poll GET until every task is terminal or interrupted; the tasks by id."""
    while True:
        tasks = {}
        for task_id in task_ids:
            response = await http.get(f"/tasks/{task_id}")
            assert response.status_code == 200, response.text
            tasks[task_id] = response.json()
        states = {t["status"]["state"] for t in tasks.values()}
        if states <= TERMINAL_STATES | {"TASK_STATE_INPUT_REQUIRED"}:
            return tasks
        await trio.sleep(0.05)


# --------------------------------------------------------------------------- the drill


async def test_acknowledged_sends_survive_sigkill(tmp_path: Path) -> None:
    config = DrillConfig(
        kills=DRILL_KILLS,
        seed=drill_seed(),
        clients=8,
        startup_kill_every=STARTUP_KILL_EVERY,
        budget_s=DRILL_BUDGET_S,
    )
    report = await run_drill(config, tmp_path)
    print(report.summary())
    assert report.ok, report.failure_text()
    assert report.kills >= 20 and report.traffic_kills >= 20
    assert report.restarts_ok == report.kills - report.startup_kills + 1
    assert report.integrity_ok == report.integrity_checks == report.kills + 1
    assert report.acknowledged > 0 and report.retries_checked > 0
    assert report.final_total_size == report.acknowledged


def lose_every_task(database: Path, cycle: int) -> None:
    """Tamper hook: after the first kill, delete every task row (journal left alone)."""
    if cycle != 1:
        return
    conn = sqlite3.connect(database)
    try:
        conn.execute("DELETE FROM tasks")
        conn.commit()
    finally:
        conn.close()


async def test_the_drill_notices_lost_acknowledged_sends(tmp_path: Path) -> None:
    """Harness self-test: a store that loses committed tasks across a kill fails the
    drill, naming the seed and the messageIds (so a passing drill means something)."""
    config = DrillConfig(
        kills=2,
        seed=drill_seed(),
        min_kill_delay_s=0.4,
        tamper=lose_every_task,
        budget_s=SCENARIO_BUDGET_S,
    )
    report = await run_drill(config, tmp_path)
    print(report.failure_text())
    assert report.acked_first_try > 0, "no send was acknowledged before the first kill"
    kinds = {v.kind for v in report.violations}
    assert "acknowledged send missing from the listing" in kinds, kinds
    assert "acknowledged send not readable" in kinds, kinds
    text = report.failure_text()
    assert f"seed {config.seed}" in text and "--seed" in text
    lost = next(v for v in report.violations if v.kind == "acknowledged send not readable")
    assert lost.message_ids[0] in text


# --------------------------------------------------------------------------- clean restart


async def test_store_survives_restart_with_tasks_and_dedupe_intact(tmp_path: Path) -> None:
    """No kill: clean stop (SIGINT), restart on the same root, nothing changed."""
    write_credentials(tmp_path / "credentials.json")
    seed = drill_seed()
    rng = random.Random(seed)
    sends = [(f"restart-{seed}-{i}", f"echo {i} {rng.random()}") for i in range(12)]
    sends.append((f"restart-{seed}-ask", "ask: which colour?"))  # stays INPUT_REQUIRED
    ping_id = f"restart-{seed}-ping"  # a direct Message: its stored outcome is the reply
    with trio.fail_after(SCENARIO_BUDGET_S):
        server = await started(tmp_path, 0)
        try:
            async with client_for(server.base_url) as http:
                acked: dict[str, str] = {}
                for message_id, text in sends:
                    response = await post_send(http, message_id, text)
                    assert response.status_code == 200, response.text
                    acked[message_id] = response.json()["task"]["id"]
                pinged = await post_send(http, ping_id, "ping")
                assert pinged.status_code == 200, pinged.text
                direct = pinged.json()
                assert "message" in direct, direct
                before = await wait_settled(http, list(acked.values()))
                total_before, _ = await list_tasks(http)
            assert total_before == len(sends)
            code = await server.stop()
        finally:
            await server.ensure_dead()
        await assert_stopped_cleanly(server, code)

        server = await started(tmp_path, 1)
        try:
            async with client_for(server.base_url) as http:
                for task_id, task in before.items():
                    response = await http.get(f"/tasks/{task_id}")
                    assert response.status_code == 200, response.text
                    assert response.json() == task, f"task {task_id} changed across the restart"
                total_after, listed = await list_tasks(http)
                assert total_after == total_before == len(listed)
                assert set(listed) == set(acked.values())
                for message_id, text in sends:
                    retry = await post_send(http, message_id, text)
                    assert retry.status_code == 200, retry.text
                    assert retry.json()["task"]["id"] == acked[message_id], message_id
                again = await post_send(http, ping_id, "ping")
                assert again.status_code == 200, again.text
                assert again.json() == direct, "the direct reply was not replayed verbatim"
                first_id, _ = sends[0]
                conflict = await post_send(http, first_id, "a different payload")
                assert conflict.status_code == 409, conflict.text
                assert "DUPLICATE_MESSAGE_ID" in conflict.text
                assert (await list_tasks(http))[0] == total_before
            code = await server.stop()
        finally:
            await server.ensure_dead()
        await assert_stopped_cleanly(server, code)


# --------------------------------------------------------------------------- journal


def journal_claims(database: Path) -> dict[str, tuple[str, str | None, bool]]:
    """messageId -> (activation id, task id, has ACCEPTED) of every A2A CLAIM row."""
    rows = read_only_rows(
        database,
        "SELECT json_extract(c.record_json, '$.input.providerEventId'), c.activation_id,"
        " c.task_id, EXISTS (SELECT 1 FROM journal a WHERE a.activation_id = c.activation_id"
        " AND a.kind = 'ACCEPTED') FROM journal c WHERE c.kind = 'CLAIM'"
        " AND json_extract(c.record_json, '$.input.source') = 'a2a'",
    )
    claims: dict[str, tuple[str, str | None, bool]] = {}
    for message_id, activation_id, task_id, accepted in rows:
        assert message_id not in claims, f"two CLAIMs for messageId {message_id}"
        claims[message_id] = (activation_id, task_id, bool(accepted))
    return claims


def stored_first_message(database: Path) -> dict[str, str]:
    """task id -> history[0].messageId of every stored task."""
    rows = read_only_rows(database, "SELECT task_id, task_json FROM tasks")
    return {task_id: json.loads(raw)["history"][0]["messageId"] for task_id, raw in rows}


async def test_a2a_journal_acceptance_survives_a_crash_without_minting_or_conflicting_on_retry(
    tmp_path: Path,
) -> None:
    """Acknowledged sends are durable journal acceptances; retries after a SIGKILL
    neither mint a second task nor conflict (409), also for sends cut mid-flight."""
    write_credentials(tmp_path / "credentials.json")
    seed = drill_seed()
    rng = random.Random(seed)
    database = tmp_path / "store" / DATABASE_FILE_NAME
    payload: dict[str, tuple[str, tuple[str, ...]]] = {}
    acked: dict[str, str] = {}

    def new(tag: str, i: int) -> str:
        message_id = f"journal-{seed}-{tag}-{i}"
        extensions = (ELICITATION_URI,) if i % 3 == 0 else ()
        payload[message_id] = (f"journal {tag} {i} {rng.random()}", extensions)
        return message_id

    async def send(http: httpx.AsyncClient, message_id: str) -> httpx.Response:
        text, extensions = payload[message_id]
        return await post_send(http, message_id, text, extensions=extensions)

    with trio.fail_after(SCENARIO_BUDGET_S):
        server = await started(tmp_path, 0)
        try:
            async with client_for(server.base_url) as http:
                # Wave 1: acknowledged sends, then SIGKILL right after the last answer.
                async def wave_one(client: int) -> None:
                    for i in range(4):
                        message_id = new(f"ack-c{client}", i)
                        response = await send(http, message_id)
                        assert response.status_code == 200, response.text
                        acked[message_id] = response.json()["task"]["id"]

                async with trio.open_nursery() as nursery:
                    for client in range(8):
                        nursery.start_soon(wave_one, client)

                # Wave 2: sends cut by a SIGKILL mid-flight (outcome unknown).
                async def wave_two(client: int) -> None:
                    for i in range(1_000):
                        message_id = new(f"cut-c{client}", i)
                        try:
                            response = await send(http, message_id)
                        except httpx.TransportError:
                            return
                        assert response.status_code == 200, response.text
                        acked[message_id] = response.json()["task"]["id"]

                async with trio.open_nursery() as nursery:
                    for client in range(8):
                        nursery.start_soon(wave_two, client)
                    await trio.sleep(rng.uniform(0.05, 0.3))
                    await server.kill()
        finally:
            await server.ensure_dead()
        await assert_sound_after(server, "a SIGKILL mid-flight")

        # The dead server's journal: every acknowledged send is a complete acceptance,
        # and no acceptance is torn (CLAIM without ACCEPTED or without its task).
        claims = await trio.to_thread.run_sync(journal_claims, database)
        stored = await trio.to_thread.run_sync(stored_first_message, database)
        for message_id, task_id in acked.items():
            assert message_id in claims, f"acknowledged {message_id} has no CLAIM"
            _, claimed_task, accepted = claims[message_id]
            assert accepted, f"acknowledged {message_id}: CLAIM without ACCEPTED"
            assert claimed_task == task_id, f"{message_id}: claim names task {claimed_task}"
        for message_id, (_, claimed_task, accepted) in claims.items():
            assert message_id in payload, f"CLAIM for a messageId nobody sent: {message_id}"
            assert accepted, f"torn acceptance of {message_id}: CLAIM without ACCEPTED"
            assert stored.get(claimed_task or "") == message_id, f"{message_id}: task missing"
        assert sorted(stored.values()) == sorted(claims), "tasks and CLAIMs differ"
        unknown = [m for m in payload if m not in acked]
        committed_unknown = {m: claims[m][1] for m in unknown if m in claims}
        print(
            f"journal drill: {len(acked)} acknowledged, {len(unknown)} cut mid-flight "
            f"({len(committed_unknown)} of them committed)"
        )

        server = await started(tmp_path, 1)
        try:
            async with client_for(server.base_url) as http:
                answers: dict[str, str] = {}
                for message_id in payload:  # every retry: same payload, same extensions
                    response = await send(http, message_id)
                    assert response.status_code == 200, (
                        f"retry of {message_id} after the crash: {response.status_code} "
                        f"{response.text}"
                    )
                    task = response.json()["task"]
                    text, _ = payload[message_id]
                    assert not history_problems(task, message_id, text), task
                    answers[message_id] = task["id"]
                for message_id, task_id in acked.items():
                    assert answers[message_id] == task_id, f"retry of {message_id} minted"
                for message_id, task_id in committed_unknown.items():
                    assert answers[message_id] == task_id, f"retry of committed {message_id}"
                for message_id in payload:  # and the post-crash answers are stable too
                    response = await send(http, message_id)
                    assert response.status_code == 200, response.text
                    assert response.json()["task"]["id"] == answers[message_id], message_id
                some = next(iter(acked))
                conflict = await post_send(http, some, "not the same payload")
                assert conflict.status_code == 409, conflict.text
                # ListTasks pages by status timestamp: list once nothing changes state,
                # or a Task that moves ahead of the cursor is (correctly) not seen twice.
                with trio.fail_after(60):
                    await wait_settled(http, sorted(set(answers.values())))
                total, listed = await list_tasks(http)
                assert total == len(payload) == len(listed)
                assert sorted(t["history"][0]["messageId"] for t in listed.values()) == sorted(
                    payload
                )
            code = await server.stop()
        finally:
            await server.ensure_dead()
        await assert_stopped_cleanly(server, code)
        claims = await trio.to_thread.run_sync(journal_claims, database)
        assert sorted(claims) == sorted(payload), "one CLAIM per messageId"
