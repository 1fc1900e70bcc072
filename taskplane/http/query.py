"""Strict query-string parsing for the A2A HTTP+JSON routes.

A2A §11.5: query parameter names are the camelCase JSON names; numbers are
decimal, booleans ``true``/``false``, enums by name, timestamps RFC 3339. A2A v1.0
and D11.5/D11.6 give the ListTasks and GetTask parameters and their ranges.

Tolerance (A2A §5.7, rule "unknown fields are ignored"): an unknown parameter is
ignored (:func:`unknown_params` names them, for the caller to count and log), and a
proto field name (``history_length``) stands for its JSON name, as ProtoJSON parsers
accept both. A repeated parameter is a 400; ``A2A-Version`` (§3.6.1) is allowed once
on every route. Every problem found is reported in one ``InvalidRequest`` whose
message and ``google.rpc.BadRequest`` field violations name each parameter.

Input is any multidict with ``getlist`` (werkzeug's ``MultiDict``, i.e. Quart's
``request.args``) or a plain ``Mapping[str, Sequence[str]]`` (``urllib.parse.parse_qs``).
Pure: no I/O, no trio.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta, timezone
from typing import Final, Protocol

import attrs

from taskplane.errors import InvalidRequest
from taskplane.model.enums import TaskState

DEFAULT_PAGE_SIZE: Final = 50
MIN_PAGE_SIZE: Final = 1
MAX_PAGE_SIZE: Final = 100
INT32_MAX: Final = 2**31 - 1
VERSION_PARAM: Final = "A2A-Version"

HISTORY_LENGTH: Final = "historyLength"
CONTEXT_ID: Final = "contextId"
STATUS: Final = "status"
PAGE_SIZE: Final = "pageSize"
PAGE_TOKEN: Final = "pageToken"
STATUS_TIMESTAMP_AFTER: Final = "statusTimestampAfter"
INCLUDE_ARTIFACTS: Final = "includeArtifacts"
LIST_TASKS_PARAMS: Final = frozenset(
    {
        CONTEXT_ID,
        STATUS,
        PAGE_SIZE,
        PAGE_TOKEN,
        HISTORY_LENGTH,
        STATUS_TIMESTAMP_AFTER,
        INCLUDE_ARTIFACTS,
    }
)

GET_TASK_PARAMS: Final = frozenset({HISTORY_LENGTH})
NO_PARAMS: Final = frozenset[str]()

_INTEGER = re.compile(r"-?[0-9]+")
_RFC3339 = re.compile(
    r"(?P<y>[0-9]{4})-(?P<mo>[0-9]{2})-(?P<d>[0-9]{2})[Tt]"
    r"(?P<h>[0-9]{2}):(?P<m>[0-9]{2}):(?P<s>[0-9]{2})(?:\.(?P<frac>[0-9]{1,9}))?"
    r"(?:(?P<z>[Zz])|(?P<sign>[+-])(?P<oh>[0-9]{2}):(?P<om>[0-9]{2}))"
)
_UNENCODED_PLUS = re.compile(r" [0-9]{2}:[0-9]{2}$")
_SNAKE = re.compile(r"_([a-z0-9])")
_MAX_ECHO_CHARS = 64


class QueryArgs(Protocol):
    """The multidict interface used here (werkzeug ``MultiDict`` satisfies it)."""

    def __iter__(self) -> Iterator[str]: ...

    def getlist(self, key: str) -> list[str]: ...


Query = QueryArgs | Mapping[str, Sequence[str]]
"""Anything this module parses: a multidict, or a mapping of name -> all its values."""


@attrs.frozen
class ListTasksQuery:
    """The query of ``GET /tasks`` (ListTasksRequest minus ``tenant``).

    Attributes:
        context_id: ``contextId`` filter; ``None`` when absent or empty.
        status: ``status`` filter by TaskState name; ``None`` when absent.
        page_size: ``pageSize``, a count in 1..100; 50 when absent.
        page_token: ``pageToken`` cursor; ``None`` when absent or empty.
        history_length: ``historyLength``, a message count >= 0; ``None`` when absent
            (no client limit).
        status_timestamp_after: ``statusTimestampAfter`` as an aware ``datetime`` in
            UTC (keep tasks whose status timestamp is >= this); ``None`` when absent.
        include_artifacts: ``includeArtifacts``; ``False`` when absent.
    """

    context_id: str | None = None
    status: TaskState | None = None
    page_size: int = DEFAULT_PAGE_SIZE
    page_token: str | None = None
    history_length: int | None = None
    status_timestamp_after: datetime | None = None
    include_artifacts: bool = False


def parse_list_tasks_query(args: Query) -> ListTasksQuery:
    """Parse the ``GET /tasks`` query string.

    Args:
        args: the request's query parameters.

    Returns:
        The parsed query, defaults filled in.

    Raises:
        InvalidRequest: (400) naming every offending parameter: repeated
            parameters; ``pageSize`` not an integer in 1..100; ``historyLength`` not
            an integer in 0..2147483647; ``status`` not a TaskState name (numbers and
            ``TASK_STATE_UNSPECIFIED`` included); ``statusTimestampAfter`` not an
            RFC 3339 timestamp with ``Z`` or a numeric offset; ``includeArtifacts``
            other than lowercase ``true``/``false``.
    """
    reader = _Reader(args, LIST_TASKS_PARAMS)
    context_id = reader.text(CONTEXT_ID)
    status = reader.task_state(STATUS)
    page_size = reader.integer(PAGE_SIZE, low=MIN_PAGE_SIZE, high=MAX_PAGE_SIZE)
    page_token = reader.text(PAGE_TOKEN)
    history_length = reader.integer(HISTORY_LENGTH, low=0, high=INT32_MAX)
    status_timestamp_after = reader.timestamp(STATUS_TIMESTAMP_AFTER)
    include_artifacts = reader.boolean(INCLUDE_ARTIFACTS)
    reader.finish()
    return ListTasksQuery(
        context_id=context_id,
        status=status,
        page_size=DEFAULT_PAGE_SIZE if page_size is None else page_size,
        page_token=page_token,
        history_length=history_length,
        status_timestamp_after=status_timestamp_after,
        include_artifacts=bool(include_artifacts),
    )


def parse_history_length(args: Query) -> int | None:
    """Parse the ``GET /tasks/{id}`` query string (GetTaskRequest).

    Args:
        args: the request's query parameters.

    Returns:
        ``historyLength`` as a message count >= 0, or ``None`` when absent.

    Raises:
        InvalidRequest: (400) a repeated parameter, or a ``historyLength``
            that is not an integer in 0..2147483647; the message names the parameter.
    """
    reader = _Reader(args, GET_TASK_PARAMS)
    history_length = reader.integer(HISTORY_LENGTH, low=0, high=INT32_MAX)
    reader.finish()
    return history_length


def check_no_query(args: Query) -> None:
    """Check the query of a route that takes no parameter: any but ``A2A-Version`` is
    ignored (:func:`unknown_params`).

    Raises:
        InvalidRequest: (400) ``A2A-Version`` repeated.
    """
    _Reader(args, NO_PARAMS).finish()


def unknown_params(args: Query, allowed: frozenset[str]) -> tuple[str, ...]:
    """The parameters of ``args`` a route with ``allowed`` ignores, in order: neither
    allowed, nor the proto field name of an allowed one, nor ``A2A-Version``."""
    return tuple(
        name
        for name in _as_lists(args)
        if name not in allowed
        and _camel(name) not in allowed
        and name.lower() != VERSION_PARAM.lower()
    )


class _Reader:
    """Collects values and problems; :meth:`finish` raises them all at once."""

    def __init__(self, args: Query, allowed: frozenset[str]) -> None:
        given = _as_lists(args)
        self._values: dict[str, list[str]] = {}
        self._violations: list[tuple[str, str]] = []
        for name, values in given.items():
            if name not in allowed and _camel(name) in allowed and _camel(name) not in given:
                name = _camel(name)  # a proto field name, for its JSON name
            if name in allowed or name.lower() == VERSION_PARAM.lower():
                self._values[name] = values
                if len(values) > 1:
                    self._fail(name, f"must be given once, got {len(values)} values")

    def finish(self) -> None:
        if not self._violations:
            return
        message = "; ".join(
            f"query parameter {_echo(name)} {problem}" for name, problem in self._violations
        )
        raise InvalidRequest(message, field_violations=self._violations)

    def _fail(self, name: str, problem: str) -> None:
        self._violations.append((name, problem))

    def _single(self, name: str) -> str | None:
        values = self._values.get(name)
        if not values or len(values) > 1:  # absent, or already reported as repeated
            return None
        return values[0]

    def text(self, name: str) -> str | None:
        value = self._single(name)
        return value or None  # "" is the proto zero value: no filter

    def integer(self, name: str, *, low: int, high: int) -> int | None:
        value = self._single(name)
        if value is None:
            return None
        if not _INTEGER.fullmatch(value):
            self._fail(name, f"must be a decimal integer, got {_echo(value)}")
            return None
        number = int(value) if len(value) <= 12 else None
        if number is None or not low <= number <= high:
            self._fail(name, f"must be between {low} and {high}, got {_echo(value)}")
            return None
        return number

    def boolean(self, name: str) -> bool | None:
        value = self._single(name)
        if value is None:
            return None
        if value not in ("true", "false"):
            self._fail(name, f"must be true or false (lowercase), got {_echo(value)}")
            return None
        return value == "true"

    def task_state(self, name: str) -> TaskState | None:
        value = self._single(name)
        if value is None:
            return None
        state = TaskState.__members__.get(value)
        if state is None:
            names = ", ".join(TaskState.__members__)
            self._fail(name, f"must be one of {names}; got {_echo(value)}")
        return state

    def timestamp(self, name: str) -> datetime | None:
        value = self._single(name)
        if value is None:
            return None
        parsed = _parse_rfc3339(value)
        if parsed is None:
            hint = (
                " (a '+' offset must be percent-encoded as %2B)"
                if _UNENCODED_PLUS.search(value)
                else ""
            )
            self._fail(
                name,
                "must be an RFC 3339 timestamp such as 2026-01-01T00:00:00Z, "
                f"got {_echo(value)}{hint}",
            )
        return parsed


def _camel(name: str) -> str:
    return _SNAKE.sub(lambda m: m.group(1).upper(), name)


def _as_lists(args: Query) -> dict[str, list[str]]:
    getlist = getattr(args, "getlist", None)
    if getlist is not None:
        names: Iterable[str] = args
        return {name: list(getlist(name)) for name in names}
    assert isinstance(args, Mapping)
    return {
        name: [values] if isinstance(values, str) else list(values) for name, values in args.items()
    }


def _parse_rfc3339(value: str) -> datetime | None:
    """RFC 3339 ``date-time`` -> aware UTC datetime; ``None`` if malformed or invalid.

    Fractions beyond microseconds (ProtoJSON allows nanoseconds) are truncated.
    Leap seconds (``:60``) are refused: ``datetime`` cannot hold them.
    """
    match = _RFC3339.fullmatch(value)
    if match is None:
        return None
    offset_h, offset_m = int(match["oh"] or 0), int(match["om"] or 0)
    if offset_h > 23 or offset_m > 59:
        return None
    offset = timedelta(hours=offset_h, minutes=offset_m)
    if match["sign"] == "-":
        offset = -offset
    try:
        local = datetime(
            int(match["y"]),
            int(match["mo"]),
            int(match["d"]),
            int(match["h"]),
            int(match["m"]),
            int(match["s"]),
            int((match["frac"] or "0")[:6].ljust(6, "0")),
            tzinfo=timezone(offset),
        )
        return local.astimezone(UTC)
    except (ValueError, OverflowError):
        return None


def _echo(value: str) -> str:
    if len(value) > _MAX_ECHO_CHARS:
        value = value[:_MAX_ECHO_CHARS] + "..."
    return repr(value)
