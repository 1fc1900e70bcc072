"""The public Agent Card served at ``GET /.well-known/agent-card.json``.

A2A §8: an ``AgentCard`` in ProtoJSON. This server declares two interfaces at the
same URL and protocol version 1.0: HTTP+JSON first (preferred), then JSON-RPC
(served at ``POST /`` of that URL; most clients' default binding), streaming on,
push notifications off (design document, "Surface"), bearer authentication, and
the ``elicitation/v1`` and ``outfitter-task/v1`` extensions (elicitation first, as
upstream lists them). §8.6: the card SHOULD be served with ``Cache-Control``
``max-age`` and an ``ETag``; :func:`card_headers` gives both.

The card is built from the wire model's own types (:mod:`taskplane.model.card`) and
encoded by the one codec (rule "one codec"), so one definition describes it.

Pure: builds values and strings only.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any, Final, TypeAlias
from urllib.parse import urlsplit

import attrs

from taskplane.extensions import ELICITATION_URI, OUTFITTER_TASK_URI
from taskplane.model.card import (
    AgentCapabilities,
    AgentCard,
    AgentExtension,
    AgentInterface,
    AgentSkill,
    HTTPAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
    StringList,
)
from taskplane.model.codec import encode

PROTOCOL_BINDING: Final = "HTTP+JSON"
JSONRPC_BINDING: Final = "JSONRPC"
PROTOCOL_BINDINGS: Final = (PROTOCOL_BINDING, JSONRPC_BINDING)
"""The interfaces of the card, in order of preference."""
PROTOCOL_VERSION: Final = "1.0"
BEARER_SCHEME_NAME: Final = "bearer"
CARD_MAX_AGE_S: Final = 300
DEFAULT_MODES: Final = ("text/plain", "application/json")

CardExtension: TypeAlias = AgentExtension
"""One ``capabilities.extensions`` entry: ``uri``, ``description``, ``required``
(data-only extensions are not required)."""

CardSkill: TypeAlias = AgentSkill
"""One ``skills`` entry; this server's card needs at least one tag per skill."""

BEARER_SCHEME: Final = SecurityScheme(
    http_auth_security_scheme=HTTPAuthSecurityScheme(
        scheme="Bearer",
        description=(
            "Send Authorization: Bearer <token>. Tokens are issued by the "
            "operator; each maps to one principal that scopes its tasks."
        ),
    )
)
"""The one security scheme, required for every call (no scopes)."""

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


def agent_card(
    *,
    public_url: str,
    name: str,
    description: str,
    version: str,
    extensions: Sequence[CardExtension] = TASKPLANE_EXTENSIONS,
    skills: Sequence[CardSkill] = SCRIPTED_SKILLS,
) -> AgentCard:
    """Build this server's Agent Card.

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
        The :data:`PROTOCOL_BINDINGS` interfaces, at ``public_url`` and protocol
        version 1.0, ``streaming`` true,
        ``pushNotifications`` false, the :data:`BEARER_SCHEME` required for every
        call, :data:`DEFAULT_MODES` for input and output, and ``extensions`` and
        ``skills`` as given; every extension states ``required`` (``None`` becomes
        ``False``), so a client never has to guess.

    Raises:
        ValueError: ``public_url`` is not an absolute http(s) URL without query or
            fragment; ``name``, ``description`` or ``version`` is empty or blank; a
            skill has no tags.
    """
    url = _interface_url(public_url)
    for field, value in (("name", name), ("description", description), ("version", version)):
        if not value.strip():
            raise ValueError(f"the Agent Card {field} must not be empty")
    for skill in skills:
        if not skill.tags:
            raise ValueError(f"skill {skill.id!r} needs at least one tag")
    return AgentCard(
        name=name,
        description=description,
        supported_interfaces=tuple(
            AgentInterface(url=url, protocol_binding=binding, protocol_version=PROTOCOL_VERSION)
            for binding in PROTOCOL_BINDINGS
        ),
        version=version,
        capabilities=AgentCapabilities(
            streaming=True,
            push_notifications=False,
            extensions=tuple(attrs.evolve(ext, required=bool(ext.required)) for ext in extensions),
        ),
        security_schemes={BEARER_SCHEME_NAME: BEARER_SCHEME},
        security_requirements=(SecurityRequirement(schemes={BEARER_SCHEME_NAME: StringList()}),),
        default_input_modes=DEFAULT_MODES,
        default_output_modes=DEFAULT_MODES,
        skills=tuple(skills),
    )


def agent_card_json(
    *,
    public_url: str,
    name: str,
    description: str,
    version: str,
    extensions: Sequence[CardExtension] = TASKPLANE_EXTENSIONS,
    skills: Sequence[CardSkill] = SCRIPTED_SKILLS,
) -> dict[str, Any]:
    """:func:`agent_card` (same arguments and errors) encoded as a ProtoJSON dict.

    Returns:
        A fresh JSON-ready dict with keys ``name``, ``description``,
        ``supportedInterfaces``, ``version``, ``capabilities``, ``securitySchemes``,
        ``securityRequirements`` (``[{"schemes": {"bearer": {}}}]``: an empty
        ``StringList``, no scopes), ``defaultInputModes``, ``defaultOutputModes`` and
        ``skills``.
    """
    return encode(
        agent_card(
            public_url=public_url,
            name=name,
            description=description,
            version=version,
            extensions=extensions,
            skills=skills,
        )
    )


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
