"""Field conventions shared by every wire-model class, and the helpers enforcing them.

Conventions used by :mod:`taskplane.model.types`,
:mod:`taskplane.model.requests` and :mod:`taskplane.model.card`:

- REQUIRED (R) fields have no default and must be given, except the few R fields
  whose zero value is real data (``ListTasksResponse`` counters, possibly-empty R
  lists and maps); those default to the zero value, carry ``REQUIRED`` in their
  attrs metadata, and are always put on the wire.
- An R string must be non-empty; an R repeated field without a default
  (``Message.parts``, ``Artifact.parts``, ``AgentCard.supported_interfaces``) must
  hold at least one element. Breaking either raises :class:`FieldError`.
- Plain proto3 strings have no presence: they are ``str | None``, and ``""`` is
  stored as ``None`` (both mean "not set" on the wire).
- Proto ``optional`` scalars keep presence: ``None`` is unset, ``0``/``False``/``""``
  are values.
- Repeated fields are tuples (default ``()``), maps are dicts (default ``{}``),
  ``google.protobuf.Struct`` fields are ``dict[str, Any] | None`` (a set, empty
  Struct ``{}`` differs from ``None``), message fields are ``X | None``.
- Timestamps are timezone-aware ``datetime`` objects, normalised to UTC on
  construction; a naive ``datetime`` raises :class:`FieldError`.
- int32 fields are range-checked (-2**31 .. 2**31-1).
- Oneofs list their members in the ``ONEOF`` class variable; exactly one member
  must be set (``None`` = not set).

Pure functions and constants: no I/O, no trio.
"""

from __future__ import annotations

from collections.abc import Sized
from datetime import UTC, datetime
from typing import Any

import attrs

#: attrs metadata key marking an R field that has a Python default (always emitted).
REQUIRED = "a2a_required"

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1

#: A ``google.protobuf.Struct``: a JSON object with str keys and JSON values.
JsonObject = dict[str, Any]


class FieldError(ValueError):
    """A model invariant is broken by one field, or by the object as a whole.

    Attributes:
        field: the Python attribute name at fault, or ``None`` for the whole object
            (e.g. a oneof with no member set).
        description: what is wrong, without the field name.
    """

    def __init__(self, field: str | None, description: str) -> None:
        super().__init__(f"{field}: {description}" if field else description)
        self.field = field
        self.description = description


# --- validators and converters -----------------------------------------------------------


def nonempty(_inst: object, attribute: attrs.Attribute[Any], value: Sized) -> None:
    """attrs validator for R fields: a string must be non-empty, a tuple non-empty."""
    if not value:
        raise FieldError(attribute.name, "required field must be set and non-empty")


def int32(_inst: object, attribute: attrs.Attribute[Any], value: int | None) -> None:
    """attrs validator: ``value`` is ``None`` or fits a proto ``int32``."""
    if value is not None and not INT32_MIN <= value <= INT32_MAX:
        raise FieldError(attribute.name, f"{value} is outside the int32 range")


def unset_if_empty(value: str | None) -> str | None:
    """attrs converter for plain proto3 strings: ``""`` means "not set" (``None``)."""
    return value or None


def utc(value: datetime | None) -> datetime | None:
    """attrs converter: an aware ``datetime`` normalised to UTC; ``None`` passes.

    Raises:
        FieldError: ``value`` is naive (no UTC offset).
    """
    if value is None:
        return None
    if value.utcoffset() is None:
        raise FieldError(None, "timestamp must be timezone-aware")
    return value.astimezone(UTC)


def check_oneof(obj: Any) -> None:
    """Raise :class:`FieldError` unless exactly one ``type(obj).ONEOF`` member is set.

    With two or more members set, the error names the second one.
    """
    names: tuple[str, ...] = type(obj).ONEOF
    present = [n for n in names if getattr(obj, n) is not None]
    if len(present) == 1:
        return
    kind = type(obj).__name__
    if not present:
        raise FieldError(None, f"a {kind} must set exactly one of {', '.join(names)}")
    raise FieldError(
        present[1], f"a {kind} must set exactly one of {', '.join(names)} (also got {present[0]})"
    )
