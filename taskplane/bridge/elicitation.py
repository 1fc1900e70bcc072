"""``elicitation/v1`` requested-schema validation (docs/http-api.md, strict variant).

A ``requestedSchema`` is a flat object schema (the MCP elicitation subset for typed,
non-sensitive input). Anything outside the allowed keywords is rejected with a
message naming the keyword, before anything is recorded.
"""

from __future__ import annotations

import math
from typing import Any

from taskplane.errors import ToolError

_FORMATS = frozenset({"email", "uri", "date", "date-time"})
_COMMON = frozenset({"type", "title", "description"})
_BY_TYPE = {
    "string": _COMMON | {"default", "minLength", "maxLength", "format", "enum", "enumNames"},
    "number": _COMMON | {"default", "minimum", "maximum"},
    "integer": _COMMON | {"default", "minimum", "maximum"},
    "boolean": _COMMON | {"default"},
}


def _fail(where: str, why: str) -> ToolError:
    return ToolError(f"requestedSchema{where}: {why}")


def validate_requested_schema(schema: Any) -> None:
    """Check ``schema`` against the elicitation/v1 subset.

    Raises:
        ToolError: the first rule broken, naming its path.
    """
    if not isinstance(schema, dict):
        raise _fail("", "must be an object")
    extra = set(schema) - {"type", "properties", "required"}
    if extra:
        raise _fail("", f"unsupported keyword {sorted(extra)[0]!r}")
    if schema.get("type") != "object":
        raise _fail(".type", 'must be "object"')
    props = schema.get("properties")
    if not isinstance(props, dict):
        raise _fail(".properties", "must be an object")
    for name, prop in props.items():
        _check_property(f".properties.{name}", prop)
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        raise _fail(".required", "must be an array of property names")
    if len(set(required)) != len(required):
        raise _fail(".required", "has duplicates")
    unknown = [r for r in required if r not in props]
    if unknown:
        raise _fail(".required", f"names undeclared property {unknown[0]!r}")


def _check_property(where: str, prop: Any) -> None:
    if not isinstance(prop, dict):
        raise _fail(where, "must be an object")
    kind = prop.get("type")
    if kind not in _BY_TYPE:
        raise _fail(f"{where}.type", "must be string, number, integer or boolean")
    extra = set(prop) - _BY_TYPE[kind]
    if extra:
        raise _fail(where, f"unsupported keyword {sorted(extra)[0]!r}")
    for key in ("title", "description"):
        if key in prop and not isinstance(prop[key], str):
            raise _fail(f"{where}.{key}", "must be a string")
    if kind == "string":
        _check_string(where, prop)
    elif kind in ("number", "integer"):
        _check_number(where, prop, integer=kind == "integer")
    elif "default" in prop and not isinstance(prop["default"], bool):
        raise _fail(f"{where}.default", "must be a boolean")


def _check_string(where: str, prop: dict[str, Any]) -> None:
    for key in ("minLength", "maxLength"):
        value = prop.get(key)
        if value is not None and (type(value) is not int or not 0 <= value <= 2**53 - 1):
            raise _fail(f"{where}.{key}", "must be a non-negative integer")
    if prop.get("minLength", 0) > prop.get("maxLength", math.inf):
        raise _fail(where, "minLength exceeds maxLength")
    if "format" in prop and prop["format"] not in _FORMATS:
        raise _fail(f"{where}.format", f"must be one of {sorted(_FORMATS)}")
    enum = prop.get("enum")
    if enum is not None and (
        not isinstance(enum, list)
        or not enum
        or not all(isinstance(e, str) for e in enum)
        or len(set(enum)) != len(enum)
    ):
        raise _fail(f"{where}.enum", "must be a non-empty array of unique strings")
    names = prop.get("enumNames")
    if names is not None and (
        enum is None
        or not isinstance(names, list)
        or len(names) != len(enum)
        or not all(isinstance(n, str) for n in names)
    ):
        raise _fail(f"{where}.enumNames", "needs enum and one string per enum value")
    if "default" in prop:
        default = prop["default"]
        if not isinstance(default, str) or (enum is not None and default not in enum):
            raise _fail(f"{where}.default", "must be a string (one of enum, if given)")


def _check_number(where: str, prop: dict[str, Any], *, integer: bool) -> None:
    def ok(value: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        return math.isfinite(value) and (not integer or float(value).is_integer())

    for key in ("minimum", "maximum", "default"):
        if key in prop and not ok(prop[key]):
            raise _fail(
                f"{where}.{key}", "must be a finite " + ("integer" if integer else "number")
            )
    low, high = prop.get("minimum", -math.inf), prop.get("maximum", math.inf)
    if low > high:
        raise _fail(where, "minimum exceeds maximum")
    if "default" in prop and not low <= prop["default"] <= high:
        raise _fail(f"{where}.default", "is outside minimum..maximum")
