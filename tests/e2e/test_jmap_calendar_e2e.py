"""The JMAP calendar-alert source end to end: ``taskplane serve`` against a fake JMAP
calendars server on a loopback port (session, ``CalendarEvent/get``, push EventSource
with ``CalendarAlert`` objects), with the scripted agent."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e._support import (
    event_names,
    leave_replies_sending,
    serving,
    sigkill,
    sources_env,
    store_rows,
    wait_for,
)
from tests.e2e.fake_jmap_calendar import PASSWORD, TOKEN, USERNAME, FakeJmapCalendar
from tests.e2e.taskplane_proc import Spawner, TaskplaneProcess

pytestmark = pytest.mark.slow


@pytest.fixture
def calendar() -> Iterator[FakeJmapCalendar]:
    yield from serving(FakeJmapCalendar())


def serve(spawn: Spawner, fake: FakeJmapCalendar, store: Path, **extra: str) -> TaskplaneProcess:
    credentials = {"JMAP_USERNAME": USERNAME, "JMAP_PASSWORD": PASSWORD, **extra}
    env = sources_env(
        spawn, store, "jmap-calendar", JMAP_CALENDAR_SESSION_URL=fake.session_url, **credentials
    )
    before = fake.streams_opened
    process = spawn.start(("serve",), env)
    wait_for(lambda: fake.streams_opened > before, "the EventSource", process)
    wait_for(lambda: "channels_ready" in event_names(process), "channels_ready", process)
    return process


def checkpoints(store: Path) -> list[object]:
    return [
        json.loads(str(r[0]))
        for r in store_rows(store, "SELECT value_json FROM source_checkpoints")
    ]


def non_work(store: Path) -> object:
    (checkpoint,) = checkpoints(store)
    assert isinstance(checkpoint, dict) and set(checkpoint) <= {"nonWork", "connectedAt"}
    return checkpoint.get("nonWork")


def connected_at(store: Path) -> int | None:
    """The checkpoint's last moment known connected (Unix ms), ``None`` before one."""
    found = [c.get("connectedAt") for c in checkpoints(store) if isinstance(c, dict)]
    return found[0] if found and isinstance(found[0], int) else None


def utc(seconds: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))


def wait_past(seconds: int) -> None:
    """Wait (taskplane not running) until the wall clock is past ``seconds``: an alert
    due then has fallen due."""
    while time.time() <= seconds:
        time.sleep(0.05)


def tasks(store: Path) -> int:
    ((count,),) = store_rows(store, "SELECT COUNT(*) FROM tasks")
    return int(str(count))


def results(store: Path) -> list[tuple[object, ...]]:
    return sorted(
        store_rows(
            store,
            "SELECT state, provider_response_id FROM deliveries WHERE operation_id LIKE 'reply:%'",
        )
    )


def test_every_occurrence_is_its_own_task_and_a_second_alert_is_the_same_one(
    spawn: Spawner, calendar: FakeJmapCalendar, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    calendar.add_event("e1", "uid-dentist", "Dentist", start="2026-12-02T09:00:00")
    calendar.add_event("e2", "uid-standup", "Standup", timeZone="Europe/Berlin")
    process = serve(spawn, calendar, store)
    calendar.fire("e1", "uid-dentist")
    calendar.fire("e2", "uid-standup", "2026-12-02T10:00:00")
    calendar.fire("e2", "uid-standup", "2026-12-03T10:00:00")
    calendar.fire("e2", "uid-standup", "2026-12-03T10:00:00", alert="a2")  # same occurrence
    calendar.fire("gone", "uid-cancelled")
    wait_for(lambda: len(results(store)) == 3, "three results", process)
    wait_for(lambda: non_work(store) == {"event-gone": 1}, "the count", process)
    assert process.signal_and_wait(signal.SIGINT) == 0
    assert tasks(store) == 3
    assert store_rows(store, "SELECT COUNT(DISTINCT context_id) FROM tasks") == [(3,)]
    assert results(store) == [
        ("delivered", "occurrence:uid-dentist"),
        ("delivered", "occurrence:uid-standup@2026-12-02T10:00:00"),
        ("delivered", "occurrence:uid-standup@2026-12-03T10:00:00"),
    ]
    histories = " ".join(str(r[0]) for r in store_rows(store, "SELECT task_json FROM tasks"))
    assert "Calendar alert: Dentist" in histories and "Europe/Berlin" in histories
    ((principal,),) = store_rows(store, "SELECT principal FROM source_checkpoints")
    assert str(principal).startswith("jmap-calendar:")
    evidence = store_rows(
        store, "SELECT record_json FROM evidence WHERE record_type = 'source.evidence'"
    )
    assert evidence == []  # the second alert of an occurrence is a plain duplicate


def test_sigkill_after_acceptance_and_the_alert_pushed_again_is_one_task(
    spawn: Spawner, calendar: FakeJmapCalendar, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    calendar.add_event("e1", "uid-review", "Review")
    process = serve(spawn, calendar, store)
    calendar.fire("e1", "uid-review", "2026-12-02T15:00:00")
    wait_for(lambda: tasks(store) == 1, "the Task", process)
    sigkill(process)
    process = serve(spawn, calendar, store)
    calendar.fire("e1", "uid-review", "2026-12-02T15:00:00")  # the server pushes it again
    wait_for(lambda: len(calendar.gets) == 2, "the second alert read", process)
    wait_for(lambda: len(results(store)) == 1, "the result", process)
    process.signal_and_wait(signal.SIGINT)
    assert tasks(store) == 1


def test_a_result_left_sending_is_recorded_again_after_the_restart(
    spawn: Spawner, calendar: FakeJmapCalendar, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    calendar.add_event("e1", "uid-1", "Call")
    process = serve(spawn, calendar, store)
    calendar.fire("e1", "uid-1")
    wait_for(lambda: results(store) == [("delivered", "occurrence:uid-1")], "the result", process)
    sigkill(process)
    leave_replies_sending(store)
    process = serve(spawn, calendar, store)
    wait_for(lambda: results(store) == [("delivered", "occurrence:uid-1")], "reconciled", process)
    process.signal_and_wait(signal.SIGINT)


def test_an_unavailable_or_rate_limited_server_retries_the_retained_alert(
    spawn: Spawner, calendar: FakeJmapCalendar, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    calendar.add_event("e1", "uid-1", "Call")
    calendar.add_event("e2", "uid-2", "Lunch")
    process = serve(spawn, calendar, store)
    calendar.unavailable = 1
    calendar.fire("e1", "uid-1")
    wait_for(lambda: tasks(store) == 1, "the first Task", process)
    calendar.rate_limit_s = 1
    calendar.fire("e2", "uid-2")
    wait_for(lambda: tasks(store) == 2, "the second Task", process)
    process.signal_and_wait(signal.SIGINT)
    assert event_names(process).count("source_event_retry") == 2
    assert calendar.streams_opened == 1  # retried without reconnecting


def test_a_dropped_stream_reconnects_and_takes_new_alerts(
    spawn: Spawner, calendar: FakeJmapCalendar, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    calendar.add_event("e1", "uid-1", "Call")
    process = serve(spawn, calendar, store)
    calendar.drop_streams()
    wait_for(lambda: calendar.streams_opened == 2, "the reconnection", process)
    calendar.fire("e1", "uid-1")
    wait_for(lambda: tasks(store) == 1, "the Task", process)
    assert "source_reconnecting" in event_names(process)


def test_a_bad_credential_fails_the_explicit_start(
    spawn: Spawner, calendar: FakeJmapCalendar, tmp_path: Path
) -> None:
    env = sources_env(
        spawn,
        tmp_path / "store",
        "jmap-calendar",
        JMAP_CALENDAR_SESSION_URL=calendar.session_url,
        JMAP_TOKEN=TOKEN + "-wrong",
    )
    process = spawn.start(("serve",), env)
    assert process.wait_exit() == 2
    assert "source jmap-calendar failed to start" in process.stderr()


def test_an_occurrence_due_while_taskplane_was_killed_is_one_task_after_the_restart(
    spawn: Spawner, calendar: FakeJmapCalendar, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    process = serve(spawn, calendar, store)
    wait_for(lambda: connected_at(store) is not None, "the first connection recorded", process)
    assert tasks(store) == 0  # the very first start takes nothing older than itself
    sigkill(process)
    due = int(time.time()) + 1  # falls due while taskplane is down
    alert = {"@type": "Alert", "trigger": {"@type": "OffsetTrigger", "offset": "-PT1M"}}
    rules = [{"@type": "RecurrenceRule", "frequency": "daily", "count": 3}]
    calendar.add_event(
        "e1",
        "uid-standup",
        "Standup",
        start=utc(due + 60),
        timeZone="Etc/UTC",
        alerts={"a1": alert},
        recurrenceRules=rules,
    )
    wait_past(due)
    process = serve(spawn, calendar, store)
    occurrence = f"occurrence:uid-standup@{utc(due + 60)}"
    wait_for(lambda: results(store) == [("delivered", occurrence)], "the caught-up Task", process)
    assert calendar.queries[-1]["expandRecurrences"] is True
    calendar.fire(f"e1;{utc(due + 60)}", "uid-standup", utc(due + 60))  # pushed late as well
    wait_for(lambda: len(calendar.gets) == 2, "the pushed alert read", process)
    wait_for(lambda: (connected_at(store) or 0) > due * 1000, "the moment saved", process)
    assert process.signal_and_wait(signal.SIGINT) == 0
    assert tasks(store) == 1  # the later occurrences are not due yet; the push was the same
    assert "source_caught_up" in event_names(process)


def test_an_alert_due_while_the_push_stream_was_down_is_one_task_after_reconnecting(
    spawn: Spawner, calendar: FakeJmapCalendar, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    process = serve(spawn, calendar, store)
    wait_for(lambda: connected_at(store) is not None, "the first connection recorded", process)
    calendar.stream_down = True
    calendar.drop_streams()
    wait_for(lambda: "source_reconnecting" in event_names(process), "the lost stream", process)
    due = int(time.time()) + 1
    trigger = {"@type": "AbsoluteTrigger", "when": utc(due) + "Z"}
    calendar.add_event(
        "e1", "uid-call", "Call", start=utc(due + 600), alerts={"a1": {"trigger": trigger}}
    )
    wait_for(lambda: time.time() > due, "the alert to fall due", process)
    calendar.stream_down = False
    wait_for(lambda: results(store) == [("delivered", "occurrence:uid-call")], "the Task", process)
    assert process.signal_and_wait(signal.SIGINT) == 0
    assert tasks(store) == 1
