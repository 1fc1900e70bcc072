"""The public Agent Card served at ``GET /.well-known/agent-card.json``.

A2A §8: an ``AgentCard`` in ProtoJSON. This server declares one HTTP+JSON
interface at protocol version 1.0, streaming on, push notifications off (design
document, "Surface"), bearer authentication, and the ``elicitation/v1`` and
``outfitter-task/v1`` extensions (elicitation first, as
upstream lists them). §8.6: the card SHOULD be served with ``Cache-Control``
``max-age`` and an ``ETag``; :func:`card_headers` gives both.

Pure: builds dicts and strings only.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any, Final
from urllib.parse import urlsplit

import attrs

from taskplane.extensions import ELICITATION_URI, OUTFITTER_TASK_URI

PROTOCOL_BINDING: Final = "HTTP+JSON"
PROTOCOL_VERSION: Final = "1.0"
BEARER_SCHEME_NAME: Final = "bearer"
CARD_MAX_AGE_S: Final = 300
DEFAULT_MODES: Final = ("text/plain", "application/json")


@attrs.frozen
class CardExtension:
    """One ``AgentExtension`` entry of ``capabilities.extensions``.

    Attributes:
        uri: the extension URI (carries the version).
        description: how this agent uses it.
        required: whether clients must activate it; data-only extensions are not.
    """

    uri: str
    description: str
    required: bool = False


@attrs.frozen
class CardSkill:
    """One ``AgentSkill``; ``tags`` must hold at least one tag.

    Attributes:
        id: stable identifier.
        name: short human-readable name.
        description: what the skill does.
        tags: keywords (tuple of strings, at least one).
        examples: sample prompts (may be empty; then omitted from the card).
    """

    id: str
    name: str
    description: str
    tags: tuple[str, ...]
    examples: tuple[str, ...] = ()


TASKPLANE_EXTENSIONS: Final = (
    CardExtension(
        uri=ELICITATION_URI,
        description=(
            "Typed questions: while a task is INPUT_REQUIRED the agent may attach a "
            "requestedSchema (an MCP elicitation subset) next to the plain-text question; "
            "sent only to callers that activate this extension."
        ),
    ),
    CardExtension(
        uri=OUTFITTER_TASK_URI,
        description=(
            "Server-scoped task locators, caller idempotency metadata, and declared "
            "workflow outputs recorded as artifacts."
        ),
    ),
)
"""The extensions this server declares, in card order."""

SCRIPTED_SKILLS: Final = (
    CardSkill(
        id="echo",
        name="Echo",
        description="Completes the task with a response artifact that repeats the message text.",
        tags=("demo", "echo"),
        examples=("hello",),
    ),
    CardSkill(
        id="ask",
        name="Ask for input",
        description=(
            "'ask: <question>' pauses the task in INPUT_REQUIRED with the question "
            "('form: <question>' adds an elicitation/v1 schema); answering with a message "
            "on the same taskId completes it."
        ),
        tags=("demo", "input-required", "multi-turn"),
        examples=("ask: Which branch should I use?", "form: What is your name?"),
    ),
    CardSkill(
        id="ping",
        name="Ping",
        description="'ping' is answered with a direct message 'pong'; no task is created.",
        tags=("demo", "message"),
        examples=("ping",),
    ),
)
"""Skills of the built-in scripted agent runtime."""


def agent_card_json(
    *,
    public_url: str,
    name: str,
    description: str,
    version: str,
    extensions: Sequence[CardExtension] = TASKPLANE_EXTENSIONS,
    skills: Sequence[CardSkill] = SCRIPTED_SKILLS,
) -> dict[str, Any]:
    """Build the public Agent Card as a ProtoJSON dict.

    Args:
        public_url: the absolute ``http``/``https`` base URL every route is appended
            to (``A2A_PUBLIC_URL``, default ``http://<A2A_HOST>:<A2A_PORT>``); a
            trailing ``/`` is dropped.
        name: ``A2A_AGENT_NAME`` (non-empty).
        description: ``A2A_AGENT_DESCRIPTION`` (non-empty).
        version: the agent's own version, ``A2A_AGENT_VERSION`` (non-empty); not the
            protocol version.
        extensions: ``capabilities.extensions`` entries, in order.
        skills: the ``skills`` entries, in order.

    Returns:
        A fresh dict with keys ``name``, ``description``, ``supportedInterfaces``
        (one ``{url, protocolBinding: "HTTP+JSON", protocolVersion: "1.0"}``),
        ``version``, ``capabilities`` (``streaming: true``, ``pushNotifications:
        false``, ``extensions`` as ``{uri, description, required}``),
        ``securitySchemes`` (``bearer`` -> ``httpAuthSecurityScheme``),
        ``securityRequirements`` (``[{"schemes": {"bearer": {}}}]``: an empty
        ``StringList``, no scopes), ``defaultInputModes``/``defaultOutputModes``
        (``text/plain``, ``application/json``) and ``skills``.

    Raises:
        ValueError: ``public_url`` is not an absolute http(s) URL without query or
            fragment; ``name``, ``description`` or ``version`` is empty; a skill has
            no tags.
    """
    url = _interface_url(public_url)
    for field, value in (("name", name), ("description", description), ("version", version)):
        if not value.strip():
            raise ValueError(f"the Agent Card {field} must not be empty")
    return {
        "name": name,
        "description": description,
        "supportedInterfaces": [
            {"url": url, "protocolBinding": PROTOCOL_BINDING, "protocolVersion": PROTOCOL_VERSION}
        ],
        "version": version,
        "capabilities": {
            "streaming": True,
            "pushNotifications": False,
            "extensions": [
                {"uri": ext.uri, "description": ext.description, "required": ext.required}
                for ext in extensions
            ],
        },
        "securitySchemes": {
            BEARER_SCHEME_NAME: {
                "httpAuthSecurityScheme": {
                    "scheme": "Bearer",
                    "description": (
                        "Send Authorization: Bearer <token>. Tokens are issued by the "
                        "operator; each maps to one principal that scopes its tasks."
                    ),
                }
            }
        },
        "securityRequirements": [{"schemes": {BEARER_SCHEME_NAME: {}}}],
        "defaultInputModes": list(DEFAULT_MODES),
        "defaultOutputModes": list(DEFAULT_MODES),
        "skills": [_skill_json(skill) for skill in skills],
    }


def card_headers(card_json: Mapping[str, Any]) -> dict[str, str]:
    """Caching headers for the card (§8.6).

    Args:
        card_json: the card exactly as served.

    Returns:
        ``Cache-Control: public, max-age=300`` (seconds) and a strong ``ETag``: the
        quoted lowercase hex SHA-256 of the card's canonical JSON (keys sorted, no
        whitespace, UTF-8), so it changes exactly when the content does.
    """
    canonical = json.dumps(
        card_json, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")
    return {
        "Cache-Control": f"public, max-age={CARD_MAX_AGE_S}",
        "ETag": f'"{hashlib.sha256(canonical).hexdigest()}"',
    }


def etag_matches(if_none_match: str | None, etag: str) -> bool:
    """Whether ``If-None-Match`` lets the card be answered with ``304 Not Modified``.

    Args:
        if_none_match: the request header (``*`` or comma-separated entity tags), or
            ``None`` when absent.
        etag: the current ``ETag`` value (quoted), from :func:`card_headers`.

    Returns:
        ``True`` when the header is ``*`` or lists ``etag``, comparing weakly as
        RFC 9110 §13.1.2 requires (a ``W/`` prefix is ignored).
    """
    if not if_none_match:
        return False
    if if_none_match.strip() == "*":
        return True
    wanted = etag.removeprefix("W/")
    return any(
        candidate.strip().removeprefix("W/") == wanted for candidate in if_none_match.split(",")
    )


def _interface_url(public_url: str) -> str:
    parts = urlsplit(public_url)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise ValueError(
            f"the public URL must be an absolute http(s) URL without query or fragment, "
            f"got {public_url!r}"
        )
    return public_url.rstrip("/")


def _skill_json(skill: CardSkill) -> dict[str, Any]:
    if not skill.tags:
        raise ValueError(f"skill {skill.id!r} needs at least one tag")
    entry: dict[str, Any] = {
        "id": skill.id,
        "name": skill.name,
        "description": skill.description,
        "tags": list(skill.tags),
    }
    if skill.examples:
        entry["examples"] = list(skill.examples)
    return entry
