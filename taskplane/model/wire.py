"""ProtoJSON rules for single values: scalars, enums, bytes, Timestamp, Struct/Value.

The ``structure_*`` functions take ``(value, type)`` as cattrs structure hooks do and
raise ``TypeError`` (wrong JSON type) or ``ValueError`` (right type, bad value) with
a description that :mod:`taskplane.model.codec` reports under the field's wire path.
The ``unstructure_*`` functions return JSON-ready values. A2A v1.0

Pure functions: no I/O, no trio.
"""

from __future__ import annotations

import base64
import binascii
import enum
import json
import math
import re
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from taskplane.model.types import DataValue

_URLSAFE = str.maketrans("-_", "+/")
_TIMESTAMP = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt]([0-9]{2}):([0-9]{2}):([0-9]{2})"
    r"(?:\.([0-9]+))?(?:([Zz])|([+-])([0-9]{2}):([0-9]{2}))"
)


def wire_name(name: str) -> str:
    """The ProtoJSON ``json_name`` of a proto/attribute field name (``a_b_c`` -> ``aBC``)."""
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def json_kind(v: Any) -> str:
    """The JSON type name of a decoded value, for error descriptions."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int | float):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    if isinstance(v, dict):
        return "object"
    return type(v).__name__


def check_text(v: str) -> str:
    """``v`` unchanged if it is valid Unicode; ``ValueError`` on a lone surrogate."""
    if not v.isascii():
        try:
            v.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("string holds a lone surrogate (not valid Unicode)") from None
    return v


def structure_str(v: Any, _: Any) -> str:
    """A JSON string (``TypeError`` otherwise; no coercion)."""
    if type(v) is not str:
        raise TypeError(f"expected string, got {json_kind(v)}")
    return check_text(v)


def structure_bool(v: Any, _: Any) -> bool:
    """A JSON boolean (``TypeError`` otherwise; ``0``/``"true"`` are rejected)."""
    if type(v) is not bool:
        raise TypeError(f"expected boolean, got {json_kind(v)}")
    return v


def structure_int(v: Any, _: Any) -> int:
    """A JSON number with an integral value (``3`` or ``3.0``; not ``"3"``, ``true``, ``2.5``).

    The int32 range is checked by the model's validator, so it is reported under the
    field's path like any other model invariant.
    """
    if type(v) is int:
        return v
    if type(v) is float and v.is_integer():
        return int(v)
    if type(v) is float:
        raise ValueError(f"expected integer, got {v!r}")
    raise TypeError(f"expected integer, got {json_kind(v)}")


def structure_enum(v: Any, t: type[enum.Enum]) -> enum.Enum:
    """The member of ``t`` named ``v`` (proto value name, e.g. ``"ROLE_USER"``).

    Enum numbers, unknown names and ``*_UNSPECIFIED`` (not a member) are rejected.
    """
    if type(v) is not str:
        raise TypeError(
            f"expected a {t.__name__} name string (numbers are not accepted), got {json_kind(v)}"
        )
    member = t.__members__.get(v)
    if member is None:
        raise ValueError(f"unknown {t.__name__} value {v!r}")
    return member


def structure_bytes(v: Any, _: Any) -> bytes:
    """Decode base64: standard or URL-safe alphabet, padding optional, nothing else.

    Whitespace, stray characters and data after padding raise ``ValueError``.
    """
    if type(v) is not str:
        raise TypeError(f"expected base64 string, got {json_kind(v)}")
    text = v.translate(_URLSAFE)
    text += "=" * (-len(text) % 4)
    try:
        return binascii.a2b_base64(text, strict_mode=True)
    except ValueError as exc:
        raise ValueError(f"not valid base64 ({exc})") from None


def unstructure_bytes(v: bytes) -> str:
    """Standard base64 with ``=`` padding."""
    return base64.b64encode(v).decode("ascii")


def structure_timestamp(v: Any, _: Any) -> datetime:
    """Parse an RFC 3339 timestamp into an aware UTC ``datetime``.

    Shape ``YYYY-MM-DDTHH:MM:SS[.fraction](Z|+HH:MM|-HH:MM)`` (``t``/``z`` accepted,
    ASCII digits only); any number of fraction digits, truncated to microseconds;
    offsets are applied and the result normalised to UTC. Raises ``ValueError`` for
    anything else, impossible dates/times (no leap second 60) and results outside
    years 1-9999.
    """
    if type(v) is not str:
        raise TypeError(f"expected RFC 3339 timestamp string, got {json_kind(v)}")
    m = _TIMESTAMP.fullmatch(v)
    if m is None:
        raise ValueError(f"{v!r} is not an RFC 3339 timestamp (like 2026-01-02T03:04:05.678Z)")
    year, month, day, hour, minute, second, frac, zulu, sign, off_h, off_m = m.groups()
    micro = int((frac or "")[:6].ljust(6, "0"))
    try:
        if zulu:
            tz = UTC
        else:
            if int(off_h) > 23 or int(off_m) > 59:
                raise ValueError("UTC offset out of range")
            delta = timedelta(hours=int(off_h), minutes=int(off_m))
            tz = timezone(-delta if sign == "-" else delta)
        stamp = datetime(
            int(year), int(month), int(day), int(hour), int(minute), int(second), micro, tz
        )
        return stamp.astimezone(UTC)
    except (ValueError, OverflowError) as exc:
        raise ValueError(f"{v!r} is not a valid timestamp ({exc})") from None


def unstructure_timestamp(v: datetime) -> str:
    """``YYYY-MM-DDTHH:MM:SS.mmmZ`` in UTC; digits below the millisecond are truncated."""
    d = v.astimezone(UTC)
    return (
        f"{d.year:04d}-{d.month:02d}-{d.day:02d}T{d.hour:02d}:{d.minute:02d}:{d.second:02d}"
        f".{d.microsecond // 1000:03d}Z"
    )


class JsonValueError(ValueError):
    """A bad value inside a Struct/Value; ``subpath`` is relative to that field."""

    def __init__(self, subpath: str, description: str) -> None:
        super().__init__(f"{subpath}: {description}" if subpath else description)
        self.subpath = subpath
        self.description = description


def check_json(v: Any, subpath: str) -> None:
    """Raise :class:`JsonValueError` unless ``v`` is a JSON value (Struct/Value content)."""
    t = type(v)
    if t is str:
        try:
            check_text(v)
        except ValueError as exc:
            raise JsonValueError(subpath, str(exc)) from None
    elif t is dict:
        for key, item in v.items():
            if type(key) is not str:
                raise JsonValueError(subpath, f"object key {key!r} is not a string")
            check_json(item, f"{subpath}[{json.dumps(key, ensure_ascii=False)}]")
    elif t is list:
        for index, item in enumerate(v):
            check_json(item, f"{subpath}[{index}]")
    elif t is float:
        if not math.isfinite(v):
            raise JsonValueError(subpath, f"{v!r} is not a JSON number")
    elif v is not None and t is not bool and t is not int:
        raise JsonValueError(subpath, f"{t.__name__} is not a JSON value")


def structure_struct(v: Any, _: Any) -> dict[str, Any]:
    """A ``google.protobuf.Struct``: a JSON object, checked deeply, kept as given (no copy)."""
    if type(v) is not dict:
        raise TypeError(f"expected object, got {json_kind(v)}")
    check_json(v, "")
    return v


def structure_data(v: Any, _: Any) -> DataValue:
    """A ``google.protobuf.Value`` (any JSON value, ``None`` included), checked deeply."""
    check_json(v, "")
    return DataValue(v)


def unstructure_data(v: DataValue) -> Any:
    """The JSON value held by ``v`` (not copied)."""
    return v.value


def identity(v: Any) -> Any:
    """``v`` unchanged (unstructure hook for Struct fields)."""
    return v
