"""http/query.py: strict query strings for ListTasks and GetTask (digest D4, D7.1)."""

from __future__ import annotations

from datetime import UTC, datetime
from urllib.parse import parse_qs

import pytest
from werkzeug.datastructures import ImmutableMultiDict, MultiDict

from taskplane.errors import InvalidRequest
from taskplane.http.query import (
    GET_TASK_PARAMS,
    LIST_TASKS_PARAMS,
    NO_PARAMS,
    ListTasksQuery,
    check_no_query,
    parse_history_length,
    parse_list_tasks_query,
    unknown_params,
)
from taskplane.model.enums import TaskState


def _qs(query: str) -> MultiDict[str, str]:
    return MultiDict(parse_qs(query, keep_blank_values=True))


def _list_error(query: str) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as info:
        parse_list_tasks_query(_qs(query))
    return info.value


def test_defaults() -> None:
    assert parse_list_tasks_query(MultiDict()) == ListTasksQuery(
        context_id=None,
        status=None,
        page_size=50,
        page_token=None,
        history_length=None,
        status_timestamp_after=None,
        include_artifacts=False,
    )


def test_every_parameter() -> None:
    query = parse_list_tasks_query(
        _qs(
            "contextId=c1&status=TASK_STATE_WORKING&pageSize=7&pageToken=abc"
            "&historyLength=0&statusTimestampAfter=2026-01-02T03:04:05.678Z"
            "&includeArtifacts=true&A2A-Version=1.0"
        )
    )
    assert query == ListTasksQuery(
        context_id="c1",
        status=TaskState.TASK_STATE_WORKING,
        page_size=7,
        page_token="abc",
        history_length=0,
        status_timestamp_after=datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=UTC),
        include_artifacts=True,
    )


def test_accepts_werkzeug_immutable_multidict_and_plain_mappings() -> None:
    expected = ListTasksQuery(page_size=5)
    assert parse_list_tasks_query(ImmutableMultiDict([("pageSize", "5")])) == expected
    assert parse_list_tasks_query(parse_qs("pageSize=5")) == expected
    assert parse_list_tasks_query({"pageSize": "5"}) == expected


def test_empty_strings_mean_no_filter() -> None:
    assert parse_list_tasks_query(_qs("contextId=&pageToken=")) == ListTasksQuery()


@pytest.mark.parametrize("value", ["1", "50", "100", "007"])
def test_page_size_in_range(value: str) -> None:
    assert parse_list_tasks_query(_qs(f"pageSize={value}")).page_size == int(value)


@pytest.mark.parametrize(
    "value", ["0", "101", "-1", "", "ten", "1.5", "+5", " 5", "1_0", "\u0665", "9" * 40]
)
def test_page_size_out_of_range_or_malformed(value: str) -> None:
    error = _list_error(f"pageSize={value}")
    assert "'pageSize'" in error.message
    assert [field for field, _ in error.field_violations] == ["pageSize"]


@pytest.mark.parametrize("value", ["-1", "x", "2147483648", ""])
def test_bad_history_length(value: str) -> None:
    assert "'historyLength'" in _list_error(f"historyLength={value}").message


def test_history_length_bounds() -> None:
    assert parse_list_tasks_query(_qs("historyLength=2147483647")).history_length == 2**31 - 1


@pytest.mark.parametrize("state", list(TaskState))
def test_status_by_name(state: TaskState) -> None:
    assert parse_list_tasks_query(_qs(f"status={state.name}")).status is state


@pytest.mark.parametrize(
    "value", ["TASK_STATE_UNSPECIFIED", "task_state_working", "WORKING", "2", ""]
)
def test_bad_status(value: str) -> None:
    error = _list_error(f"status={value}")
    assert "'status'" in error.message
    assert "TASK_STATE_WORKING" in error.message


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2026-01-02T03:04:05Z", datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)),
        ("2026-01-02t03:04:05z", datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)),
        ("2026-01-02T03:04:05.1Z", datetime(2026, 1, 2, 3, 4, 5, 100000, tzinfo=UTC)),
        ("2026-01-02T03:04:05.123456789Z", datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)),
        ("2026-01-02T03:04:05+02:00", datetime(2026, 1, 2, 1, 4, 5, tzinfo=UTC)),
        ("2026-01-02T03:04:05-00:30", datetime(2026, 1, 2, 3, 34, 5, tzinfo=UTC)),
        ("2026-01-01T00:30:00+01:00", datetime(2025, 12, 31, 23, 30, tzinfo=UTC)),
    ],
)
def test_status_timestamp_after_is_normalised_to_utc(value: str, expected: datetime) -> None:
    parsed = parse_list_tasks_query({"statusTimestampAfter": [value]}).status_timestamp_after
    assert parsed == expected
    assert parsed is not None and parsed.tzinfo is UTC


@pytest.mark.parametrize(
    "value",
    [
        "yesterday",
        "2026-01-02",
        "2026-01-02T03:04:05",  # no offset
        "2026-01-02 03:04:05Z",
        "2026-01-02T03:04Z",
        "2026-13-02T03:04:05Z",
        "2026-02-30T03:04:05Z",
        "2026-01-02T24:00:00Z",
        "2026-01-02T23:59:60Z",  # leap second: not representable
        "2026-01-02T03:04:05+24:00",
        "2026-01-02T03:04:05+0200",
        "2026-01-02T03:04:05.Z",
        "0001-01-01T00:00:00+01:00",  # before year 1 in UTC
        "1767225600",
    ],
)
def test_bad_status_timestamp_after(value: str) -> None:
    with pytest.raises(InvalidRequest, match="'statusTimestampAfter' must be an RFC 3339"):
        parse_list_tasks_query({"statusTimestampAfter": [value]})


def test_unencoded_plus_offset_gets_a_hint() -> None:
    # "+02:00" sent without percent-encoding arrives as " 02:00".
    error = _list_error("statusTimestampAfter=2026-01-02T03:04:05+02:00")
    assert "%2B" in error.message


@pytest.mark.parametrize("value", ["true", "false"])
def test_include_artifacts(value: str) -> None:
    assert parse_list_tasks_query(_qs(f"includeArtifacts={value}")).include_artifacts is (
        value == "true"
    )


@pytest.mark.parametrize("value", ["True", "FALSE", "1", "0", "yes", ""])
def test_bad_include_artifacts(value: str) -> None:
    assert (
        "'includeArtifacts' must be true or false"
        in _list_error(f"includeArtifacts={value}").message
    )


# Issue 17, A2A §5.7: unknown parameters are ignored (named by unknown_params, which the
# handlers count and log); these tests asserted the former 400.


def test_unknown_parameter_is_ignored() -> None:
    assert parse_list_tasks_query(_qs("bogus=1")) == ListTasksQuery()
    assert unknown_params(_qs("bogus=1&pageSize=3"), LIST_TASKS_PARAMS) == ("bogus",)


def test_snake_case_parameter_stands_for_its_json_name() -> None:
    assert parse_list_tasks_query(_qs("page_size=5")).page_size == 5
    assert parse_list_tasks_query(_qs("context_id=c")).context_id == "c"
    assert "'pageSize' must be between" in _list_error("page_size=0").message
    assert unknown_params(_qs("page_size=5"), LIST_TASKS_PARAMS) == ()


@pytest.mark.parametrize("name", ["pageSize", "contextId", "A2A-Version", "includeArtifacts"])
def test_repeated_parameter_is_refused(name: str) -> None:
    error = _list_error(f"{name}=1&{name}=1")
    assert f"'{name}' must be given once, got 2 values" in error.message


def test_all_problems_are_reported_together() -> None:
    error = _list_error("pageSize=0&status=NOPE&bogus=&includeArtifacts=TRUE")
    assert [field for field, _ in error.field_violations] == [
        "status",
        "pageSize",
        "includeArtifacts",
    ]
    assert error.message.count("query parameter") == 3


def test_a2a_version_parameter_is_allowed_in_any_case() -> None:
    assert parse_list_tasks_query(_qs("a2a-version=1.0")) == ListTasksQuery()


# --- GetTask and routes without parameters ------------------------------------------


def test_parse_history_length() -> None:
    assert parse_history_length(MultiDict()) is None
    assert parse_history_length(_qs("historyLength=3&A2A-Version=1.0")) == 3
    assert parse_history_length(_qs("historyLength=0")) == 0


@pytest.mark.parametrize(
    "query", ["historyLength=-1", "historyLength=x", "historyLength=1&historyLength=2"]
)
def test_parse_history_length_rejects_bad_values(query: str) -> None:
    with pytest.raises(InvalidRequest, match="'historyLength'"):
        parse_history_length(_qs(query))


def test_get_task_ignores_list_parameters() -> None:
    assert parse_history_length(_qs("pageSize=5")) is None
    assert unknown_params(_qs("pageSize=5"), GET_TASK_PARAMS) == ("pageSize",)


def test_check_no_query() -> None:
    check_no_query(MultiDict())
    check_no_query(_qs("A2A-Version=1.0"))
    check_no_query(_qs("historyLength=1"))  # ignored
    assert unknown_params(_qs("historyLength=1&A2A-Version=1.0"), NO_PARAMS) == ("historyLength",)
    with pytest.raises(InvalidRequest, match="'A2A-Version' must be given once"):
        check_no_query(_qs("A2A-Version=1.0&A2A-Version=1.0"))
