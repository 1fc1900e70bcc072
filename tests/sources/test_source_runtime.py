"""The source runtime in process: startup rules, supervision, checkpoints, evidence and
result delivery, with a scripted source and the scripted agent in virtual time."""

from __future__ import annotations

import logging
import sqlite3
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import attrs
import pytest
import trio
import trio.testing

from taskplane.actors.native import Recovery
from taskplane.actors.outbound import ProviderRejected
from taskplane.actors.plane import TaskPlane
from taskplane.app import PlaneOptions, open_plane
from taskplane.bridge.manifest import parse_manifest
from taskplane.config import ConfigError
from taskplane.errors import PayloadTooLarge
from taskplane.model.limits import MAX_MESSAGE_BYTES
from taskplane.model.types import Part
from taskplane.observability import PlaneObserver
from taskplane.scope import Scope
from taskplane.settings import load_sources
from taskplane.sources.base import Event, Result, Sender, SourceContext
from taskplane.sources.identity import IDENTIFIER, source_identifier
from taskplane.sources.registry import SourcePlan, plan_sources
from taskplane.sources.relay import RelaySource
from tests.support.plane import MANIFEST, PUBLIC_URL

EPOCH_MS = 1_800_000_000_000


def now_ms() -> int:
    return EPOCH_MS + round(trio.current_time() * 1000)


@attrs.define(eq=False)
class ScriptedSource:
    """A source whose behaviour each test sets."""

    name: str
    fail_start: bool = False
    crash_after_start: int = 0
    events: list[Event] = attrs.field(factory=list)
    sent: list[tuple[str, str]] = attrs.field(factory=list)
    send_errors: list[Exception] = attrs.field(factory=list)
    recovery: Recovery = "idempotent"
    supports_anchors: bool = False
    starts: int = 0
    ctx: SourceContext | None = None
    accepted: list[str] = attrs.field(factory=list)
    sender_bugs: int = 0
    attempts: list[float] = attrs.field(factory=list)
    """``trio.current_time()`` of each send attempt."""

    async def run(
        self, ctx: SourceContext, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        self.starts += 1
        if self.fail_start:
            raise RuntimeError(f"{self.name} cannot connect")
        self.ctx = ctx
        task_status.started()
        if self.crash_after_start:
            self.crash_after_start -= 1
            raise RuntimeError(f"{self.name} lost its connection")
        while self.events:
            self.accepted.append(await ctx.ingest(self.events.pop(0)))
        await trio.sleep_forever()

    def sender(self, result: Result) -> Sender:
        if self.sender_bugs:
            self.sender_bugs -= 1
            raise RuntimeError("a bug in the source's sender")

        async def send() -> str:
            self.attempts.append(trio.current_time())
            if self.send_errors:
                raise self.send_errors.pop(0)
            self.sent.append((result.task.id, result.text))
            return f"resp-{len(self.sent)}"

        return Sender(send=send)


AGENT = Scope("", source_identifier("agent", "a"))


def event(n: int, text: str = "hello") -> Event:
    return Event(
        principal=AGENT.principal,
        identity=(f"m-{n}",),
        conversation=("conv",),
        parts=(Part(text=text),),
        locator={"messageId": f"m-{n}"},
    )


def run_plane(store_root: Path, plan: SourcePlan) -> AbstractAsyncContextManager[TaskPlane]:
    return open_plane(
        store_root,
        public_url=PUBLIC_URL,
        outputs=parse_manifest(MANIFEST, None, where="tests"),
        options=PlaneOptions(now_ms=now_ms, store_in_thread=False),
        sources=plan,
    )


def db_rows(store_root: Path, sql: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(store_root / "taskplane.sqlite3") as conn:
        return conn.execute(sql).fetchall()


def leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in leaves(inner)]
    return [exc]


def logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [getattr(r, "event", "") for r in caplog.records]


# ---- configuration ---------------------------------------------------------------


def test_outfitter_channels_off_none_unset_and_lists(tmp_path: Path) -> None:
    relay_env = {"RELAY_SPOOL_DIR": str(tmp_path), "RELAY_OUTBOX_DIR": str(tmp_path)}
    assert plan_sources(load_sources({"OUTFITTER_CHANNELS": "off", **relay_env})).sources == ()
    assert plan_sources(load_sources({"OUTFITTER_CHANNELS": "none", **relay_env})).sources == ()
    auto = plan_sources(load_sources(relay_env))
    assert [s.name for s in auto.sources] == ["relay"] and not auto.explicit
    listed = plan_sources(load_sources({"OUTFITTER_CHANNELS": "relay", **relay_env}))
    assert listed.explicit and listed.anchor_sources == {"relay"}
    with pytest.raises(ConfigError, match="unknown sources slack-x"):
        plan_sources(load_sources({"OUTFITTER_CHANNELS": "relay,slack-x", **relay_env}))
    with pytest.raises(ConfigError, match="GITHUB_TOKEN"):
        plan_sources(load_sources({"OUTFITTER_CHANNELS": "github"}))


def test_auto_detection_leaves_out_a_misconfigured_source(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    caplog.set_level(logging.INFO)
    plan = plan_sources(load_sources({"RELAY_SPOOL_DIR": str(tmp_path)}))  # no outbox
    assert plan.sources == ()
    assert "source_start_failed" in logged(caplog)


def test_identity_derivations() -> None:
    ident = source_identifier("event", "a", "b")
    assert ident.startswith("event:") and len(ident) == len("event:") + 40
    assert ident != source_identifier("event", "ab")  # NUL-joined, not concatenated
    assert IDENTIFIER.match(ident)
    assert not IDENTIFIER.match("-bad") and not IDENTIFIER.match("x" * 129)
    with pytest.raises(ValueError):
        source_identifier("event", "")
    relay = RelaySource(Path("s"), Path("o"))
    assert relay.supports_anchors and relay.recovery == "idempotent"


# ---- startup -----------------------------------------------------------------------


async def test_an_explicit_list_is_all_or_nothing(
    store_root: Path, autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    good, bad = ScriptedSource("good"), ScriptedSource("bad", fail_start=True)
    with pytest.raises(BaseException) as info:
        async with run_plane(store_root, SourcePlan((good, bad), explicit=True)):
            pytest.fail("the plane must not start")
    assert [str(e) for e in leaves(info.value) if isinstance(e, ConfigError)] == [
        "source bad failed to start: bad cannot connect"
    ]
    assert "source_start_failed" in logged(caplog)
    assert "wakes_replayed" not in logged(caplog)  # intake never started


async def test_auto_detection_starts_the_others_and_replays_after_all_started(
    store_root: Path, autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    good, bad = ScriptedSource("good"), ScriptedSource("bad", fail_start=True)
    async with run_plane(store_root, SourcePlan((bad, good), explicit=False)):
        events = logged(caplog)
        assert events.index("source_start_failed") < events.index("source_started")
        assert events.index("source_started") < events.index("wakes_replayed")
        assert good.starts == 1


async def test_a_crashing_source_is_restarted_and_a_hopeless_one_stops_alone(
    store_root: Path, autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    flaky = ScriptedSource("flaky", crash_after_start=2)
    hopeless = ScriptedSource("hopeless", crash_after_start=100)
    flaky.events.append(event(1))
    async with run_plane(store_root, SourcePlan((flaky, hopeless))) as plane:
        await trio.sleep(120)
        assert flaky.starts == 3 and len(flaky.accepted) == 1
        assert "channels_unhealthy" in logged(caplog)
        assert 2 <= hopeless.starts <= 7
        # The plane still works.
        task = await plane.wait_settled(AGENT, flaky.accepted[0], 10)
        assert task.status.state.name == "TASK_STATE_COMPLETED"


# ---- checkpoints, evidence, delivery ------------------------------------------------------


async def test_checkpoints_and_evidence_are_durable_per_source(
    store_root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    one, two = ScriptedSource("one"), ScriptedSource("two")
    async with run_plane(store_root, SourcePlan((one, two))):
        assert one.ctx is not None and two.ctx is not None
        assert await one.ctx.load_checkpoint("p") is None
        await one.ctx.save_checkpoint("p", {"cursor": 5})
        await two.ctx.save_checkpoint("p", {"cursor": 9})
        await one.ctx.evidence("non-work", {"item": "x"})
        assert await one.ctx.load_checkpoint("p") == {"cursor": 5}
    assert sorted(db_rows(store_root, "SELECT source, value_json FROM source_checkpoints")) == [
        ("one", '{"cursor": 5}'),
        ("two", '{"cursor": 9}'),
    ]
    (record,) = db_rows(store_root, "SELECT record_type, record_json FROM evidence")
    assert record[0] == "source.evidence" and '"classification": "non-work"' in str(record[1])


class _Limited(ProviderRejected):
    """A rate limit refusal, as a provider client raises it (``wait_s``)."""

    def __init__(self, wait_s: float) -> None:
        super().__init__(f"rate limited for {wait_s} s")
        self.wait_s = wait_s


async def test_a_retry_happens_after_the_delay_it_logs_not_at_the_next_poll(
    store_root: Path, autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    errors: list[Exception] = [
        _Limited(2.0),
        ProviderRejected("HTTP 422"),
        ProviderRejected("HTTP 422"),
    ]
    source = ScriptedSource("one", send_errors=errors)
    source.events.append(event(1, "first"))
    async with run_plane(store_root, SourcePlan((source,))):
        await trio.sleep(30)
    assert [text for _, text in source.sent] == ["first"]
    gaps = [round(b - a, 1) for a, b in zip(source.attempts, source.attempts[1:], strict=False)]
    logged_delays = [
        r.getMessage().split("retry in ")[1].split(" s)")[0]
        for r in caplog.records
        if getattr(r, "event", "") == "delivery_failed"
    ]
    # Retry-After 2 s (over the backoff's first 1 s), then doubled from it.
    assert logged_delays == ["2", "4", "8"]
    assert gaps == [2.0, 4.0, 8.0]


async def test_each_result_is_delivered_once_and_a_refusal_is_retried(
    store_root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    source = ScriptedSource("one", send_errors=[ProviderRejected("HTTP 422")])
    source.events += [event(1, "first"), event(2, "second"), event(1, "first")]
    async with run_plane(store_root, SourcePlan((source,))):
        await trio.sleep(30)
        assert sorted(text for _, text in source.sent) == ["first", "second"]
        assert len(set(source.accepted)) == 2  # the redelivered m-1 is a duplicate
    states = db_rows(store_root, "SELECT state, provider_response_id FROM deliveries")
    assert sorted(states) == [("delivered", "resp-1"), ("delivered", "resp-2")]


async def test_an_ambiguous_outcome_is_never_sent_again(
    store_root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    source = ScriptedSource("one", recovery="ambiguous", send_errors=[TimeoutError("no answer")])
    source.events.append(event(1))
    async with run_plane(store_root, SourcePlan((source,))):
        await trio.sleep(600)
    assert source.sent == []
    assert db_rows(store_root, "SELECT state FROM deliveries") == [("ambiguous",)]
    kinds = [r[0] for r in db_rows(store_root, "SELECT record_type FROM evidence")]
    assert "activation.unhealthy" in kinds


async def test_a_failing_sender_is_retried_and_stops_nothing_else(
    store_root: Path, autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    buggy = ScriptedSource("buggy", sender_bugs=2)
    fine = ScriptedSource("fine")
    buggy.events.append(event(1, "one"))
    fine.events.append(attrs.evolve(event(2, "two"), principal=source_identifier("agent", "b")))
    async with run_plane(store_root, SourcePlan((buggy, fine))):
        await trio.sleep(30)
        assert [text for _, text in fine.sent] == ["two"]
        assert [text for _, text in buggy.sent] == ["one"]  # after two failed attempts
    assert logged(caplog).count("delivery_failed") == 2


# ---- bounds and readiness --------------------------------------------------------------


async def test_an_event_over_the_message_limit_is_refused_and_nothing_is_stored(
    store_root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    source = ScriptedSource("one")
    async with run_plane(store_root, SourcePlan((source,))):
        assert source.ctx is not None
        with pytest.raises(PayloadTooLarge, match=f"limit of {MAX_MESSAGE_BYTES} bytes"):
            await source.ctx.ingest(event(1, "x" * 2_000_000))
        accepted = await source.ctx.ingest(event(2, "x" * (MAX_MESSAGE_BYTES - 100)))
    assert db_rows(store_root, "SELECT task_id FROM tasks") == [(accepted,)]


async def test_a_stopped_source_makes_the_plane_unready_and_its_restarts_are_counted(
    store_root: Path, autojump_clock: trio.testing.MockClock
) -> None:
    observer = PlaneObserver()
    hopeless = ScriptedSource("hopeless", crash_after_start=100)
    options = PlaneOptions(now_ms=now_ms, store_in_thread=False, observer=observer)
    async with open_plane(
        store_root,
        public_url=PUBLIC_URL,
        outputs=parse_manifest(MANIFEST, None, where="tests"),
        options=options,
        sources=SourcePlan((hopeless,)),
    ) as plane:
        reasons = (await observer.statistics(plane)).not_ready_reasons()
        assert "source hopeless stopped after repeated failures" not in reasons
        await trio.sleep(120)
        await trio.testing.wait_all_tasks_blocked()
        reasons = (await observer.statistics(plane)).not_ready_reasons()
        assert reasons == ["source hopeless stopped after repeated failures"]
        restarts = observer.metrics.registry.get_sample_value(
            "taskplane_supervisor_restarts_total", {"actor": "source:hopeless"}
        )
        assert restarts is not None and restarts >= 2
