"""A2A v1.0.1 Agent Card and its parts: interfaces, capabilities, skills, security.

A2A v1.0 Field conventions are those of :mod:`taskplane.model.fields`. These types are
the one definition of the card: :mod:`taskplane.http.card` builds this server's card
from them and the codec encodes it for ``GET /.well-known/agent-card.json``.

Pure data: no I/O, no trio.
"""

from __future__ import annotations

from typing import ClassVar

import attrs

from taskplane.model.fields import REQUIRED, JsonObject, check_oneof, nonempty, unset_if_empty

_R = {REQUIRED: True}


@attrs.frozen(kw_only=True)
class AgentInterface:
    """``lf.a2a.v1.AgentInterface``: one endpoint of the agent.

    Attributes:
        url: R, absolute base URL every route path is appended to.
        protocol_binding: R, e.g. ``"HTTP+JSON"``, ``"JSONRPC"``, ``"GRPC"``.
        tenant: the tenant clients must send to this interface, if any.
        protocol_version: R, ``"Major.Minor"``, e.g. ``"1.0"``.
    """

    url: str = attrs.field(validator=nonempty)
    protocol_binding: str = attrs.field(validator=nonempty)
    tenant: str | None = attrs.field(default=None, converter=unset_if_empty)
    protocol_version: str = attrs.field(validator=nonempty)


@attrs.frozen(kw_only=True)
class AgentProvider:
    """``lf.a2a.v1.AgentProvider``: who runs the agent (both fields R, non-empty)."""

    url: str = attrs.field(validator=nonempty)
    organization: str = attrs.field(validator=nonempty)


@attrs.frozen(kw_only=True)
class AgentExtension:
    """``lf.a2a.v1.AgentExtension``: a protocol extension the agent supports (D13).

    Attributes:
        uri: identifies the extension (should embed a version).
        description: how this agent uses it.
        required: ``True``: clients must activate it. ``None`` (absent) and ``False``
            both mean "not required" but are kept apart, like the capability flags, so
            a card round-trips as written (this server's card says ``false``).
        params: extension-specific JSON object.
    """

    uri: str | None = attrs.field(default=None, converter=unset_if_empty)
    description: str | None = attrs.field(default=None, converter=unset_if_empty)
    required: bool | None = None
    params: JsonObject | None = None


@attrs.frozen(kw_only=True)
class AgentCapabilities:
    """``lf.a2a.v1.AgentCapabilities``. The three flags are proto ``optional`` bools.

    ``None`` (absent) and ``False`` both mean "unsupported" (§3.3.4) but are kept
    apart so the card round-trips as written.
    """

    streaming: bool | None = None
    push_notifications: bool | None = None
    extensions: tuple[AgentExtension, ...] = ()
    extended_agent_card: bool | None = None


@attrs.frozen(kw_only=True)
class StringList:
    """``lf.a2a.v1.StringList``: a wrapper so a map can hold lists (``{"list": [...]}``)."""

    list: tuple[str, ...] = ()


@attrs.frozen(kw_only=True)
class SecurityRequirement:
    """``lf.a2a.v1.SecurityRequirement``: scheme name -> required scopes.

    Wire shape: ``{"schemes": {"<scheme name>": {"list": ["scope", ...]}}}``.
    """

    schemes: dict[str, StringList] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class AgentSkill:
    """``lf.a2a.v1.AgentSkill``: one thing the agent can do.

    Attributes:
        id: R, non-empty.
        name: R, non-empty.
        description: R, non-empty.
        tags: R, keywords; may be empty (always emitted).
        examples: example prompts.
        input_modes: media types, overriding the card's defaults.
        output_modes: media types, overriding the card's defaults.
        security_requirements: per-skill security requirements.
    """

    id: str = attrs.field(validator=nonempty)
    name: str = attrs.field(validator=nonempty)
    description: str = attrs.field(validator=nonempty)
    tags: tuple[str, ...] = attrs.field(default=(), metadata=_R)
    examples: tuple[str, ...] = ()
    input_modes: tuple[str, ...] = ()
    output_modes: tuple[str, ...] = ()
    security_requirements: tuple[SecurityRequirement, ...] = ()


@attrs.frozen(kw_only=True)
class AgentCardSignature:
    """``lf.a2a.v1.AgentCardSignature``: one JWS signature over the card (§8.4).

    Attributes:
        protected: R, base64url JWS protected header.
        signature: R, base64url signature.
        header: unprotected JWS header (JSON object).
    """

    protected: str = attrs.field(validator=nonempty)
    signature: str = attrs.field(validator=nonempty)
    header: JsonObject | None = None


# --- security schemes ------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class APIKeySecurityScheme:
    """``lf.a2a.v1.APIKeySecurityScheme``. ``location``: ``query``/``header``/``cookie``."""

    description: str | None = attrs.field(default=None, converter=unset_if_empty)
    location: str = attrs.field(validator=nonempty)
    name: str = attrs.field(validator=nonempty)


@attrs.frozen(kw_only=True)
class HTTPAuthSecurityScheme:
    """``lf.a2a.v1.HTTPAuthSecurityScheme``. ``scheme``: e.g. ``"Bearer"``."""

    description: str | None = attrs.field(default=None, converter=unset_if_empty)
    scheme: str = attrs.field(validator=nonempty)
    bearer_format: str | None = attrs.field(default=None, converter=unset_if_empty)


@attrs.frozen(kw_only=True)
class AuthorizationCodeOAuthFlow:
    """``lf.a2a.v1.AuthorizationCodeOAuthFlow``. ``scopes``: name -> description."""

    authorization_url: str = attrs.field(validator=nonempty)
    token_url: str = attrs.field(validator=nonempty)
    refresh_url: str | None = attrs.field(default=None, converter=unset_if_empty)
    scopes: dict[str, str] = attrs.field(factory=dict, metadata=_R)
    pkce_required: bool = False


@attrs.frozen(kw_only=True)
class ClientCredentialsOAuthFlow:
    """``lf.a2a.v1.ClientCredentialsOAuthFlow``. ``scopes``: name -> description."""

    token_url: str = attrs.field(validator=nonempty)
    refresh_url: str | None = attrs.field(default=None, converter=unset_if_empty)
    scopes: dict[str, str] = attrs.field(factory=dict, metadata=_R)


@attrs.frozen(kw_only=True)
class ImplicitOAuthFlow:
    """``lf.a2a.v1.ImplicitOAuthFlow`` (deprecated upstream; kept for parsing cards)."""

    authorization_url: str | None = attrs.field(default=None, converter=unset_if_empty)
    refresh_url: str | None = attrs.field(default=None, converter=unset_if_empty)
    scopes: dict[str, str] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class PasswordOAuthFlow:
    """``lf.a2a.v1.PasswordOAuthFlow`` (deprecated upstream; kept for parsing cards)."""

    token_url: str | None = attrs.field(default=None, converter=unset_if_empty)
    refresh_url: str | None = attrs.field(default=None, converter=unset_if_empty)
    scopes: dict[str, str] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class DeviceCodeOAuthFlow:
    """``lf.a2a.v1.DeviceCodeOAuthFlow``. ``scopes``: name -> description."""

    device_authorization_url: str = attrs.field(validator=nonempty)
    token_url: str = attrs.field(validator=nonempty)
    refresh_url: str | None = attrs.field(default=None, converter=unset_if_empty)
    scopes: dict[str, str] = attrs.field(factory=dict, metadata=_R)


@attrs.frozen(kw_only=True)
class OAuthFlows:
    """``lf.a2a.v1.OAuthFlows``: exactly one flow (oneof ``flow``).

    Raises:
        FieldError: on construction, unless exactly one member is set.
    """

    ONEOF: ClassVar[tuple[str, ...]] = (
        "authorization_code",
        "client_credentials",
        "implicit",
        "password",
        "device_code",
    )

    authorization_code: AuthorizationCodeOAuthFlow | None = None
    client_credentials: ClientCredentialsOAuthFlow | None = None
    implicit: ImplicitOAuthFlow | None = None
    password: PasswordOAuthFlow | None = None
    device_code: DeviceCodeOAuthFlow | None = None

    def __attrs_post_init__(self) -> None:
        check_oneof(self)


@attrs.frozen(kw_only=True)
class OAuth2SecurityScheme:
    """``lf.a2a.v1.OAuth2SecurityScheme``. ``flows`` is R."""

    description: str | None = attrs.field(default=None, converter=unset_if_empty)
    flows: OAuthFlows
    oauth2_metadata_url: str | None = attrs.field(default=None, converter=unset_if_empty)


@attrs.frozen(kw_only=True)
class OpenIdConnectSecurityScheme:
    """``lf.a2a.v1.OpenIdConnectSecurityScheme``. ``open_id_connect_url`` is R."""

    description: str | None = attrs.field(default=None, converter=unset_if_empty)
    open_id_connect_url: str = attrs.field(validator=nonempty)


@attrs.frozen(kw_only=True)
class MutualTlsSecurityScheme:
    """``lf.a2a.v1.MutualTlsSecurityScheme``."""

    description: str | None = attrs.field(default=None, converter=unset_if_empty)


@attrs.frozen(kw_only=True)
class SecurityScheme:
    """``lf.a2a.v1.SecurityScheme``: exactly one scheme (oneof ``scheme``).

    Raises:
        FieldError: on construction, unless exactly one member is set.
    """

    ONEOF: ClassVar[tuple[str, ...]] = (
        "api_key_security_scheme",
        "http_auth_security_scheme",
        "oauth2_security_scheme",
        "open_id_connect_security_scheme",
        "mtls_security_scheme",
    )

    api_key_security_scheme: APIKeySecurityScheme | None = None
    http_auth_security_scheme: HTTPAuthSecurityScheme | None = None
    oauth2_security_scheme: OAuth2SecurityScheme | None = None
    open_id_connect_security_scheme: OpenIdConnectSecurityScheme | None = None
    mtls_security_scheme: MutualTlsSecurityScheme | None = None

    def __attrs_post_init__(self) -> None:
        check_oneof(self)


# --- the card ----------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class AgentCard:
    """``lf.a2a.v1.AgentCard``: the agent's self-description.

    Attributes:
        name: R, non-empty.
        description: R, non-empty.
        supported_interfaces: R, at least one; the first is preferred.
        provider: who runs the agent.
        version: R, non-empty; the agent's own version.
        documentation_url: proto ``optional`` string (``""`` is kept).
        capabilities: R.
        security_schemes: scheme name -> scheme.
        security_requirements: requirements for every call.
        default_input_modes: R, media types; may be empty (always emitted).
        default_output_modes: R, media types; may be empty (always emitted).
        skills: R; may be empty (always emitted).
        signatures: JWS signatures (§8.4).
        icon_url: proto ``optional`` string (``""`` is kept).

    Raises:
        FieldError: an R string empty or ``supported_interfaces`` empty.
    """

    name: str = attrs.field(validator=nonempty)
    description: str = attrs.field(validator=nonempty)
    supported_interfaces: tuple[AgentInterface, ...] = attrs.field(validator=nonempty)
    provider: AgentProvider | None = None
    version: str = attrs.field(validator=nonempty)
    documentation_url: str | None = None
    capabilities: AgentCapabilities
    security_schemes: dict[str, SecurityScheme] = attrs.field(factory=dict)
    security_requirements: tuple[SecurityRequirement, ...] = ()
    default_input_modes: tuple[str, ...] = attrs.field(default=(), metadata=_R)
    default_output_modes: tuple[str, ...] = attrs.field(default=(), metadata=_R)
    skills: tuple[AgentSkill, ...] = attrs.field(default=(), metadata=_R)
    signatures: tuple[AgentCardSignature, ...] = ()
    icon_url: str | None = None
