"""http/card.py and extensions.py: the public Agent Card (digest D6)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from taskplane.extensions import (
    ELICITATION_KEY,
    ELICITATION_URI,
    OUTFITTER_TASK_KEY,
    OUTFITTER_TASK_URI,
)
from taskplane.http.card import (
    CardExtension,
    CardSkill,
    agent_card_json,
    card_headers,
    etag_matches,
)

VECTORS = Path(__file__).resolve().parents[1] / "model" / "vectors" / "valid"


def _card(**overrides: Any) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "public_url": "http://127.0.0.1:8788",
        "name": "taskplane",
        "description": "A resident agent behind a durable task plane.",
        "version": "0.1.0",
    }
    kwargs.update(overrides)
    return agent_card_json(**kwargs)


def test_extension_identifiers_are_exact() -> None:
    assert OUTFITTER_TASK_URI == (
        "https://github.com/ai-outfitter/channels/a2a-extensions/outfitter-task/v1"
    )
    assert (
        ELICITATION_URI == "https://github.com/ai-outfitter/channels/a2a-extensions/elicitation/v1"
    )
    assert OUTFITTER_TASK_KEY == "outfitter-task/v1"
    assert ELICITATION_KEY == "elicitation/v1"


def test_card_shape() -> None:
    card = _card()
    assert card["name"] == "taskplane"
    assert card["version"] == "0.1.0"
    # Both bindings at the same URL, HTTP+JSON first (issue 17: JSON-RPC added).
    assert card["supportedInterfaces"] == [
        {"url": "http://127.0.0.1:8788", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
        {"url": "http://127.0.0.1:8788", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
    ]
    capabilities = card["capabilities"]
    assert capabilities["streaming"] is True
    assert capabilities["pushNotifications"] is False
    assert [(e["uri"], e["required"]) for e in capabilities["extensions"]] == [
        (ELICITATION_URI, False),
        (OUTFITTER_TASK_URI, False),
    ]
    assert all(e["description"] for e in capabilities["extensions"])
    assert card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"] == "Bearer"
    assert card["securityRequirements"] == [{"schemes": {"bearer": {}}}]
    assert card["defaultInputModes"] == ["text/plain", "application/json"]
    assert card["defaultOutputModes"] == ["text/plain", "application/json"]
    assert [s["id"] for s in card["skills"]] == ["echo", "ask", "ping"]
    assert all(s["tags"] and s["name"] and s["description"] for s in card["skills"])


def test_card_uses_only_keys_of_the_golden_card() -> None:
    vector = VECTORS / "agent_card.json"
    if not vector.exists():
        pytest.skip(f"golden vectors not available at {VECTORS}")
    golden = json.loads(vector.read_text())["json"]
    card = _card()
    assert set(card) == set(golden)
    assert set(card["capabilities"]) == set(golden["capabilities"])


def test_card_is_valid_protojson_for_the_reference_parser() -> None:
    a2a_pb2 = pytest.importorskip("a2a.types.a2a_pb2")
    json_format = pytest.importorskip("google.protobuf.json_format")
    message = json_format.ParseDict(_card(), a2a_pb2.AgentCard())
    assert message.supported_interfaces[0].protocol_binding == "HTTP+JSON"
    assert message.capabilities.streaming is True
    assert message.capabilities.HasField("push_notifications")


def test_card_is_json_ready_and_fresh() -> None:
    first = _card()
    json.dumps(first, allow_nan=False)
    first["capabilities"]["extensions"].clear()
    assert len(_card()["capabilities"]["extensions"]) == 2


def test_trailing_slash_is_dropped() -> None:
    url = _card(public_url="https://agent.example.com/a2a/")["supportedInterfaces"][0]["url"]
    assert url == "https://agent.example.com/a2a"


@pytest.mark.parametrize(
    "url", ["", "127.0.0.1:8788", "/a2a", "ftp://h/", "http://", "http://h/?x=1", "http://h/#f"]
)
def test_bad_public_url(url: str) -> None:
    with pytest.raises(ValueError, match="public URL"):
        _card(public_url=url)


@pytest.mark.parametrize("field", ["name", "description", "version"])
def test_empty_required_strings(field: str) -> None:
    with pytest.raises(ValueError, match=field):
        _card(**{field: " "})


def test_custom_extensions_and_skills() -> None:
    card = _card(
        extensions=[CardExtension(uri="urn:x", description="d", required=True)],
        skills=[CardSkill(id="s", name="S", description="does s", tags=("t",), examples=("e",))],
    )
    assert card["capabilities"]["extensions"] == [
        {"uri": "urn:x", "description": "d", "required": True}
    ]
    assert card["skills"] == [
        {"id": "s", "name": "S", "description": "does s", "tags": ["t"], "examples": ["e"]}
    ]


def test_skill_without_tags_is_refused() -> None:
    with pytest.raises(ValueError, match="tag"):
        _card(skills=[CardSkill(id="s", name="S", description="d", tags=())])


def test_headers_cache_and_strong_etag() -> None:
    card = _card()
    headers = card_headers(card)
    assert headers["Cache-Control"] == "public, max-age=300"
    etag = headers["ETag"]
    assert etag.startswith('"') and etag.endswith('"') and not etag.startswith("W/")
    assert len(etag) == 66
    reordered = dict(reversed(list(copy.deepcopy(card).items())))
    assert card_headers(reordered)["ETag"] == etag  # canonical: key order does not matter
    assert card_headers(_card(version="0.1.1"))["ETag"] != etag


def test_etag_matches() -> None:
    etag = card_headers(_card())["ETag"]
    assert etag_matches(etag, etag)
    assert etag_matches(f'"other", {etag}', etag)
    assert etag_matches(f"W/{etag}", etag)
    assert etag_matches("*", etag)
    assert not etag_matches(None, etag)
    assert not etag_matches("", etag)
    assert not etag_matches('"other"', etag)
