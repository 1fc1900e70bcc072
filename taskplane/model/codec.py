"""The one ProtoJSON codec for the A2A wire model (rule "one codec").

``CONVERTER`` is built once by :func:`make_converter` at import time, every hook
for every model class is generated then, and nothing mutates it afterwards.

Encoding (model -> JSON-ready value):

- keys are the proto ``json_name`` (lowerCamelCase); enums by NAME;
- ``bytes`` as standard base64 with padding; timestamps as RFC 3339 UTC with
  exactly three fraction digits and ``Z`` (``2026-11-30T10:00:00.123Z``; finer
  digits are truncated);
- Struct and ``Part.data`` as plain JSON (shared with the model, not copied);
- unset fields are omitted, except REQUIRED fields (always emitted, even ``""``,
  ``0``, ``[]``) and proto ``optional`` scalars that are set (even ``0``/``false``).

:func:`decode` is strict, for the documents this server wrote or reads from its own
sources (stored Tasks, relayed parts). Rejected: unknown keys (snake_case names
included), enum numbers and unknown enum names,
strings/bools for ints (integral floats such as ``3.0`` are accepted, as in the
reference parser), non-integral numbers for ints, wrong JSON types anywhere
(e.g. an object where an array is expected, a non-object where a message is
expected, the top level included), two oneof members, missing REQUIRED fields,
empty REQUIRED strings, empty ``parts``/``supportedInterfaces``, invalid
timestamps/base64, lone surrogates in strings, non-finite numbers.
JSON ``null`` means "not set" for every field except ``Part.data``, where it is a
data part holding ``null``. Every rejection is one :class:`InvalidRequest` whose
``field_violations`` are ``(wire path, description)`` pairs, with paths such as
``message.parts[0].text`` or ``securitySchemes["bearer"]``.

:func:`decode_request` is the reading of a request (both bindings), tolerant as A2A
v1.0.1 §5.7 says (rule "unknown fields are ignored"): an unknown key is ignored and its
wire path returned (the caller counts and logs it), and a proto field name
(``message_id``) is accepted for its JSON name (``messageId``), as ProtoJSON parsers
do; every other rejection above stands (wrong types, missing REQUIRED fields, bad enum
values, two oneof members...). A request without unknown keys is decoded once.

All functions are pure and synchronous (CPU only, no I/O); safe from any trio task
or worker thread.
"""

from __future__ import annotations

import enum
import json
import types
from collections.abc import Callable
from datetime import datetime
from typing import Any, Generic, TypeVar, Union, get_args, get_origin

import attrs
import cattrs
from cattrs.cols import is_mapping, is_sequence, list_structure_factory, mapping_structure_factory
from cattrs.errors import (
    AttributeValidationNote,
    ClassValidationError,
    ForbiddenExtraKeysError,
    IterableValidationError,
    IterableValidationNote,
)
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from taskplane.errors import InvalidRequest
from taskplane.model import card, requests
from taskplane.model import types as model_types
from taskplane.model.fields import REQUIRED, FieldError
from taskplane.model.types import DataValue
from taskplane.model.wire import (
    JsonValueError,
    identity,
    json_kind,
    structure_bool,
    structure_bytes,
    structure_data,
    structure_enum,
    structure_int,
    structure_str,
    structure_struct,
    structure_timestamp,
    unstructure_bytes,
    unstructure_data,
    unstructure_timestamp,
    wire_name,
)

T = TypeVar("T")

#: Every wire-model class, in definition order; their hooks are all built at import.
MODEL_TYPES: tuple[type, ...] = tuple(
    obj
    for module in (model_types, requests, card)
    for obj in vars(module).values()
    if isinstance(obj, type)
    and attrs.has(obj)
    and obj.__module__ == module.__name__
    and obj is not DataValue  # a field value wrapper, not a proto message
)
_MODEL_TYPE_SET = frozenset(MODEL_TYPES)

#: At most this many violations are reported per rejection (bounds error bodies).
MAX_VIOLATIONS = 50
#: At most this many violations are spelled out in the error message text.
MAX_VIOLATIONS_IN_MESSAGE = 3

_STRUCT = dict[str, Any]
_NONE = type(None)


# --- hook factories ----------------------------------------------------------------------


def _is_optional(t: Any) -> bool:
    if get_origin(t) not in (Union, types.UnionType):
        return False
    args = get_args(t)
    return len(args) == 2 and _NONE in args


def _non_none(t: Any) -> Any:
    a, b = get_args(t)
    return b if a is _NONE else a


def _is_struct(t: Any) -> bool:
    return bool(t == _STRUCT)


def _is_plain_mapping(t: Any) -> bool:
    return is_mapping(t) and not _is_struct(t)


def _is_enum(t: Any) -> bool:
    return isinstance(t, type) and issubclass(t, enum.Enum)


def _optional_structure(t: Any, c: cattrs.Converter) -> Callable[[Any, Any], Any]:
    inner_t = _non_none(t)
    inner = c.get_structure_hook(inner_t)
    if inner_t is DataValue:
        return inner  # a present JSON null is a value here (the class hook dropped the rest)

    def hook(v: Any, _: Any) -> Any:
        return None if v is None else inner(v, inner_t)

    return hook


def _optional_unstructure(t: Any, c: cattrs.Converter) -> Callable[[Any], Any]:
    inner = c.get_unstructure_hook(_non_none(t))

    def hook(v: Any) -> Any:
        return None if v is None else inner(v)

    return hook


def _array_structure(t: Any, c: cattrs.Converter) -> Callable[[Any, Any], Any]:
    inner = list_structure_factory(t, c)

    def hook(v: Any, _: Any) -> tuple[Any, ...]:
        if type(v) is not list:
            raise TypeError(f"expected array, got {json_kind(v)}")
        return tuple(inner(v, t))

    return hook


def _array_unstructure(t: Any, c: cattrs.Converter) -> Callable[[Any], Any]:
    elem = (*get_args(t), Any)[0]
    if elem is str or elem is Any:
        return list
    inner = c.get_unstructure_hook(elem)

    def hook(v: Any) -> list[Any]:
        return [inner(x) for x in v]

    return hook


def _map_structure(t: Any, c: cattrs.Converter) -> Callable[[Any, Any], Any]:
    inner = mapping_structure_factory(t, c)

    def hook(v: Any, _: Any) -> Any:
        if type(v) is not dict:
            raise TypeError(f"expected object, got {json_kind(v)}")
        return inner(v, t)

    return hook


def _map_unstructure(t: Any, c: cattrs.Converter) -> Callable[[Any], Any]:
    inner = c.get_unstructure_hook(get_args(t)[1])

    def hook(v: dict[str, Any]) -> dict[str, Any]:
        return {k: inner(x) for k, x in v.items()}

    return hook


def _class_structure(
    cls: type, c: cattrs.Converter, *, tolerant: bool
) -> Callable[[Any, Any], Any]:
    attrs.resolve_types(cls)
    fields = attrs.fields(cls)
    renames: dict[str, Any] = {a.name: override(rename=wire_name(a.name)) for a in fields}
    inner: Callable[[Any, Any], Any] = make_dict_structure_fn(
        cls,
        c,
        _cattrs_forbid_extra_keys=not tolerant,
        _cattrs_detailed_validation=True,
        **renames,
    )
    known = frozenset(wire_name(a.name) for a in fields)
    # Tolerant: a proto field name (snake_case) stands for its JSON name.
    aliases = {
        a.name: wire_name(a.name) for a in fields if tolerant and wire_name(a.name) != a.name
    }
    # JSON null means "not set", except for a google.protobuf.Value (Part.data).
    keep_null = frozenset(
        wire_name(a.name) for a in fields if DataValue in (a.type, *get_args(a.type))
    )

    # Oneofs are checked here too (the model checks them on construction) so the
    # description uses wire names and a conflicting member is not structured at all.
    oneof = tuple((wire_name(n), n) for n in getattr(cls, "ONEOF", ()))
    members = ", ".join(w for w, _ in oneof)

    def hook(v: Any, _: Any) -> Any:
        if type(v) is not dict:
            raise TypeError(f"expected object, got {json_kind(v)}")
        if None in v.values():
            v = {k: x for k, x in v.items() if x is not None or k in keep_null}
        if aliases and not known.issuperset(v):
            v = {
                (aliases[k] if k in aliases and aliases[k] not in v else k): x for k, x in v.items()
            }
        if oneof:
            present = [(w, n) for w, n in oneof if w in v]
            if not present:
                raise FieldError(None, f"exactly one of {members} must be set")
            if len(present) > 1:
                (first, _), (_, second) = present[:2]
                raise FieldError(
                    second, f"conflicts with {first}: only one of {members} may be set"
                )
        return inner(v, cls)

    return hook


def _class_unstructure(cls: type, c: cattrs.Converter) -> Callable[[Any], Any]:
    attrs.resolve_types(cls)
    overrides: dict[str, Any] = {
        a.name: override(
            rename=wire_name(a.name),
            omit_if_default=False if a.metadata.get(REQUIRED) else None,
        )
        for a in attrs.fields(cls)
    }
    return make_dict_unstructure_fn(cls, c, _cattrs_omit_if_default=True, **overrides)


def make_converter(*, tolerant: bool = False) -> cattrs.Converter:
    """Build the ProtoJSON converter and generate the hooks of every ``MODEL_TYPES`` class.

    Args:
        tolerant: ignore unknown keys and take proto field names for JSON names
            (:func:`decode_request`); else strict (:func:`decode`).

    Returns:
        A ``cattrs.Converter`` to be kept in a module constant and never mutated.
    """
    c = cattrs.Converter(
        omit_if_default=True, forbid_extra_keys=not tolerant, detailed_validation=True
    )
    c.register_structure_hook(str, structure_str)
    c.register_structure_hook(bool, structure_bool)
    c.register_structure_hook(int, structure_int)
    c.register_structure_hook(bytes, structure_bytes)
    c.register_unstructure_hook(bytes, unstructure_bytes)
    c.register_structure_hook(datetime, structure_timestamp)
    c.register_unstructure_hook(datetime, unstructure_timestamp)
    c.register_structure_hook(DataValue, structure_data)
    c.register_unstructure_hook(DataValue, unstructure_data)
    c.register_structure_hook_func(_is_enum, structure_enum)
    c.register_unstructure_hook_func(_is_enum, lambda e: e.name)
    c.register_structure_hook_factory(is_sequence, _array_structure)
    c.register_unstructure_hook_factory(is_sequence, _array_unstructure)
    c.register_structure_hook_factory(_is_plain_mapping, _map_structure)
    c.register_unstructure_hook_factory(_is_plain_mapping, _map_unstructure)
    c.register_structure_hook_func(_is_struct, structure_struct)
    c.register_unstructure_hook_func(_is_struct, identity)
    c.register_structure_hook_factory(_is_optional, _optional_structure)
    c.register_unstructure_hook_factory(_is_optional, _optional_unstructure)
    c.register_structure_hook_factory(
        attrs.has, lambda cls, conv: _class_structure(cls, conv, tolerant=tolerant)
    )
    c.register_unstructure_hook_factory(attrs.has, _class_unstructure)
    for cls in MODEL_TYPES:
        c.get_structure_hook(cls)
        c.get_unstructure_hook(cls)
    return c


CONVERTER = make_converter()
TOLERANT_CONVERTER = make_converter(tolerant=True)


# --- errors ------------------------------------------------------------------------------


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _note(exc: BaseException, kind: type[T]) -> T | None:
    for note in getattr(exc, "__notes__", ()):
        if type(note) is kind:
            return note
    return None


def _unknown_key(cls: type, key: str) -> str:
    names = {wire_name(a.name) for a in attrs.fields(cls)}
    camel = wire_name(key)
    if camel != key and camel in names:
        return f"unknown field; the JSON name is {camel!r} (snake_case names are rejected)"
    return f"{_UNKNOWN_FIELD}{cls.__name__}"


_UNKNOWN_FIELD = "unknown field for "
"""How a violation for an unknown key (not a snake_case alias) begins."""


def violations(exc: BaseException, path: str = "") -> list[tuple[str, str]]:
    """Flatten a structuring failure into ``(wire path, description)`` pairs.

    Args:
        exc: what ``CONVERTER.structure`` raised (a cattrs validation group or a
            plain ``TypeError``/``ValueError``/``KeyError``).
        path: wire path of the value that was being structured (``""`` = top level).
    Returns:
        One pair per leaf problem, in field order; paths use JSON names, ``.name`` for
        fields, ``[i]`` for array items and ``["key"]`` for map keys.
    """
    out: list[tuple[str, str]] = []
    if isinstance(exc, ClassValidationError):
        for sub in exc.exceptions:
            attr = _note(sub, AttributeValidationNote)
            out += violations(sub, _join(path, wire_name(attr.name)) if attr else path)
    elif isinstance(exc, IterableValidationError):
        for sub in exc.exceptions:
            item = _note(sub, IterableValidationNote)
            if item is None:
                out += violations(sub, path)
            elif isinstance(item.index, int):
                out += violations(sub, f"{path}[{item.index}]")
            else:
                out += violations(sub, f"{path}[{json.dumps(item.index, ensure_ascii=False)}]")
    elif isinstance(exc, ForbiddenExtraKeysError):
        out += [(_join(path, k), _unknown_key(exc.cl, k)) for k in sorted(exc.extra_fields)]
    elif isinstance(exc, FieldError):
        out.append((_join(path, wire_name(exc.field)) if exc.field else path, exc.description))
    elif isinstance(exc, JsonValueError):
        out.append((path + exc.subpath, exc.description))
    elif isinstance(exc, RecursionError):
        out.append((path, "nested too deeply"))
    elif isinstance(exc, KeyError):
        out.append((path, "required field is missing"))
    else:
        out.append((path, str(exc)))
    return out


def _reject(what: str, found: list[tuple[str, str]]) -> InvalidRequest:
    found = found[:MAX_VIOLATIONS]
    shown = "; ".join(f"{p}: {d}" if p else d for p, d in found[:MAX_VIOLATIONS_IN_MESSAGE])
    more = len(found) - MAX_VIOLATIONS_IN_MESSAGE
    suffix = f" (and {more} more)" if more > 0 else ""
    return InvalidRequest(f"invalid {what}: {shown}{suffix}", field_violations=found)


# --- public API ----------------------------------------------------------------------------


def encode(obj: Any) -> dict[str, Any]:
    """Encode a model instance as a ProtoJSON-ready value.

    Args:
        obj: an instance of a ``MODEL_TYPES`` class.
    Returns:
        A JSON object (``dict``) of ``dict``/``list``/``str``/``int``/``float``/``bool``/
        ``None``. Struct and ``Part.data`` values are the model's own objects: do not
        mutate them.
    Raises:
        TypeError: ``obj`` is not a wire-model instance.
    """
    if type(obj) not in _MODEL_TYPE_SET:
        raise TypeError(f"not a wire-model instance: {type(obj).__name__}")
    out: dict[str, Any] = CONVERTER.unstructure(obj)
    return out


def decode(data: Any, cls: type[T], *, path: str = "") -> T:
    """Decode a parsed JSON value into ``cls``, strictly (see the module docstring).

    Args:
        data: the value from ``json.loads`` (or built by the HTTP layer from path and
            query parameters), expected to be a JSON object.
        cls: the model class, e.g. ``SendMessageRequest``.
        path: wire path of ``data`` inside a larger document, prefixed to every
            reported path (``""`` = top level).
    Returns:
        A new, validated ``cls`` instance.
    Raises:
        InvalidRequest: ``data`` does not fit ``cls``; the message names the first
            wire paths and ``field_violations`` lists every ``(path, description)``.
    """
    try:
        return CONVERTER.structure(data, cls)
    except RecursionError:
        raise _reject(cls.__name__, [(path, "nested too deeply")]) from None
    except (cattrs.BaseValidationError, ValueError, TypeError, KeyError) as exc:
        raise _reject(cls.__name__, violations(exc, path)) from exc


@attrs.frozen
class Decoded(Generic[T]):
    """A request read tolerantly: its ``value``, and the wire paths of the unknown keys
    that were ignored (``ignored``, at most :data:`MAX_VIOLATIONS`, in field order)."""

    value: T
    ignored: tuple[str, ...] = ()


def decode_request(data: Any, cls: type[T], *, path: str = "") -> Decoded[T]:
    """Decode a request's parsed JSON into ``cls`` tolerantly (A2A §5.7, module docstring).

    Args:
        data, cls, path: as for :func:`decode`.
    Returns:
        The value and the paths of the unknown keys it ignored (empty for most
        requests: those are decoded once, strictly).
    Raises:
        InvalidRequest: ``data`` does not fit ``cls`` for any reason but unknown keys.
    """
    try:
        return Decoded(CONVERTER.structure(data, cls))
    except RecursionError:
        raise _reject(cls.__name__, [(path, "nested too deeply")]) from None
    except (cattrs.BaseValidationError, ValueError, TypeError, KeyError) as exc:
        strict = violations(exc, path)
    ignored = tuple(p for p, d in strict if d.startswith(_UNKNOWN_FIELD))[:MAX_VIOLATIONS]
    try:
        value = TOLERANT_CONVERTER.structure(data, cls)
    except RecursionError:
        raise _reject(cls.__name__, [(path, "nested too deeply")]) from None
    except (cattrs.BaseValidationError, ValueError, TypeError, KeyError) as exc:
        raise _reject(cls.__name__, violations(exc, path)) from exc
    return Decoded(value, ignored)


def encode_json(obj: Any) -> bytes:
    """Encode a model instance as compact, one-line UTF-8 ProtoJSON.

    Used for SSE ``data:`` lines, push bodies and storage. No insignificant
    whitespace; non-ASCII is written as UTF-8, control characters are escaped, so the
    result never holds a CR or LF byte.

    Raises:
        TypeError: ``obj`` is not a wire-model instance.
        ValueError: a Struct/``data`` value holds NaN or an infinity (a caller bug).
    """
    text = json.dumps(encode(obj), ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.encode("utf-8")


class _DuplicateKey(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(f"duplicate object key {key!r}")
            seen.add(key)
    return out


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def decode_json(raw: bytes | str, cls: type[T], *, path: str = "") -> T:
    """Parse JSON text and :func:`decode` it into ``cls``.

    Args:
        raw: UTF-8 bytes (e.g. a request body) or text.
        cls: the model class.
        path: as for :func:`decode`.
    Returns:
        A new, validated ``cls`` instance.
    Raises:
        InvalidRequest: invalid UTF-8, invalid JSON (duplicate keys, ``NaN`` and
            ``Infinity`` included), nesting deeper than the parser allows, or any
            :func:`decode` rejection.
    """
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        data = json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_no_constants)
    except UnicodeDecodeError as exc:
        raise _reject(cls.__name__, [(path, f"not valid UTF-8 ({exc.reason})")]) from None
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno} column {exc.colno}"
        raise _reject(cls.__name__, [(path, f"not valid JSON: {exc.msg} ({where})")]) from None
    except RecursionError:
        raise _reject(cls.__name__, [(path, "nested too deeply")]) from None
    except ValueError as exc:
        raise _reject(cls.__name__, [(path, f"not valid JSON: {exc}")]) from None
    return decode(data, cls, path=path)
