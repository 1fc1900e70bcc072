"""Golden ProtoJSON vectors (reference codec over the a2a-sdk types) against our codec.

The vectors are copied into ``tests/model/vectors/`` (see its README); when the shared
reference folder is present beside the repo, a test checks the copy has not drifted.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from taskplane.errors import InvalidRequest
from taskplane.http.errors import wire_identity
from taskplane.model.codec import MODEL_TYPES, decode, decode_json, encode, encode_json

VECTORS = Path(__file__).parent / "vectors"
SHARED_VECTORS = Path(__file__).resolve().parents[2] / ".." / "shared" / "a2a" / "vectors"
TYPES = {cls.__name__: cls for cls in MODEL_TYPES}

VALID = sorted((VECTORS / "valid").glob("*.json"))
INVALID = sorted((VECTORS / "invalid").glob("*.json"))

# The reference codec drops zero-valued fields even when REQUIRED; we always emit R
# fields (digest D1 [REC], §3.1.4 for nextPageToken), so re-encoding adds these.
ADDED_REQUIRED: dict[str, dict[str, Any]] = {
    "list_tasks_response.json": {"nextPageToken": ""},
}

# Where each invalid vector must be reported (wire path of the first violation).
INVALID_PATHS = {
    "history_length_string_word.json": "historyLength",
    "message_parts_not_array.json": "parts",
    "message_unknown_role.json": "role",
    "part_two_oneof_members.json": "url",
    "task_state_wrong_type.json": "state",
    "timestamp_not_rfc3339.json": "timestamp",
    "unknown_field.json": "bogus",
}


def _canon(v: Any) -> Any:
    """JSON value with numbers compared by value (1 == 1.0) but booleans kept apart."""
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return (type(v).__name__, v)
    if isinstance(v, int | float):
        return ("number", float(v))
    if isinstance(v, list):
        return ("array", tuple(_canon(x) for x in v))
    if isinstance(v, dict):
        return ("object", frozenset((k, _canon(x)) for k, x in v.items()))
    raise TypeError(f"not JSON: {type(v).__name__}")


def _load(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_text("utf-8"))
    return doc


def test_vectors_are_present() -> None:
    assert len(VALID) >= 17
    assert len(INVALID) >= 7
    assert {p.name for p in INVALID} == set(INVALID_PATHS)


def test_vector_copy_matches_shared_reference() -> None:
    if not SHARED_VECTORS.is_dir():
        pytest.skip(f"no shared reference folder at {SHARED_VECTORS}")
    for kind in ("valid", "invalid"):
        ours = {p.name: p.read_bytes() for p in (VECTORS / kind).glob("*.json")}
        theirs = {p.name: p.read_bytes() for p in (SHARED_VECTORS / kind).glob("*.json")}
        assert ours == theirs, f"tests/model/vectors/{kind} differs from the shared vectors"


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.stem)
def test_valid_vector_round_trips(path: Path) -> None:
    doc = _load(path)
    cls = TYPES[doc["type"]]
    obj: Any = decode(doc["json"], cls)
    assert type(obj) is cls
    expected = {**doc["json"], **ADDED_REQUIRED.get(path.name, {})}
    assert _canon(encode(obj)) == _canon(expected)
    # Same through JSON text, both directions.
    assert decode_json(json.dumps(doc["json"]), cls) == obj
    assert decode_json(encode_json(obj), cls) == obj


@pytest.mark.parametrize("path", INVALID, ids=lambda p: p.stem)
def test_invalid_vector_is_rejected(path: Path) -> None:
    doc = _load(path)
    cls = TYPES[doc["type"]]
    with pytest.raises(InvalidRequest) as caught:
        decode(doc["json"], cls)
    error = caught.value
    assert wire_identity(error).http_status == 400
    assert wire_identity(error).grpc_status == "INVALID_ARGUMENT"
    paths = [p for p, _ in error.field_violations]
    assert INVALID_PATHS[path.name] in paths
    assert INVALID_PATHS[path.name] in error.message
    with pytest.raises(InvalidRequest):
        decode_json(json.dumps(doc["json"]).encode("utf-8"), cls)
