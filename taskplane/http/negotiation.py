"""Per-request negotiation: protocol version, extensions and media types.

* ``A2A-Version`` (docs/conformance.md): absent, empty, ``1.0`` or
  ``1.0.<patch>`` is served; anything else fails with ``VERSION_NOT_SUPPORTED``.
* ``A2A-Extensions``: the client lists the URIs it wants active;
  the server activates the supported subset and ignores the rest.
* Media types (docs/conformance.md): JSON request bodies in
  any ``application/json`` or ``application/*+json`` form; responses are
  ``application/json`` unless ``Accept`` asks for ``application/a2a+json``.

Pure functions over header strings: no I/O, no Quart, no trio.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

from taskplane.errors import UnsupportedMediaType, VersionNotSupported

VERSION_HEADER: Final = "A2A-Version"
"""Header name, and also the query parameter name (§3.6.1)."""
EXTENSIONS_HEADER: Final = "A2A-Extensions"
SUPPORTED_VERSION: Final = "1.0"
COMPAT_VERSION: Final = "0.3"
"""Also served with ``TASKPLANE_A2A_COMPAT=0.3`` (:mod:`taskplane.http.compat03`)."""
JSON_MEDIA_TYPE: Final = "application/json"
A2A_JSON_MEDIA_TYPE: Final = "application/a2a+json"

# Major.Minor with an optional patch, which MUST NOT influence negotiation (§3.6).
_SUPPORTED_VERSION = re.compile(r"1\.0(?:\.[0-9]+)?")
_COMPAT_VERSION = re.compile(r"0\.3(?:\.[0-9]+)?")
# RFC 9110 §5.6.2 token characters, for media type and subtype names.
_TOKEN = r"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
_JSON_SUBTYPE = re.compile(rf"(?:{_TOKEN}\+)?json")
_MEDIA_TYPE = re.compile(rf"({_TOKEN})/({_TOKEN})")
_QUALITY = re.compile(r"(?:0(?:\.[0-9]{0,3})?|1(?:\.0{0,3})?)")
_MAX_ECHO_CHARS = 64


def check_version(
    header_value: str | None, query_value: str | None, *, compat03: bool = False
) -> str:
    """Refuse a request whose ``A2A-Version`` this server does not speak; return the
    version it is served as (``"1.0"``, or ``"0.3"`` with ``compat03``).

    Both places a client may put the version (§3.6.1) are checked; each must be
    acceptable on its own. The header is a comma-separated list (RFC 9110 §5.3:
    several header lines are one value joined with commas, so ``1.0`` on two lines
    and ``1.0, 1.0`` on one are the same request): every non-blank member must be
    acceptable.

    Args:
        header_value: the ``A2A-Version`` header, its lines joined with ``","``, or
            ``None`` when absent.
        query_value: the ``A2A-Version`` query parameter, or ``None`` when absent.
        compat03: ``TASKPLANE_A2A_COMPAT=0.3``: ``0.3`` (or ``0.3.<patch>``) is served
            too, and absent or empty means ``0.3`` (§3.6.2); a request naming ``1.0``
            is ``1.0``.

    Raises:
        VersionNotSupported: a value that is present, non-blank and neither ``1.0``
            nor ``1.0.<digits>`` (surrounding whitespace ignored). The message names
            the value (cut to 64 characters) and the supported ``1.0``; ErrorInfo
            metadata carries ``supportedVersions: "1.0"``.

    Note:
        Without ``compat03``, absent or empty means "served" as 1.0
        (docs/design-rules.md), not the spec's literal "0.3" reading.
    """
    versions = [] if header_value is None else header_value.split(",")
    if query_value is not None:
        versions.append(query_value)
    supported = f"{SUPPORTED_VERSION}, {COMPAT_VERSION}" if compat03 else SUPPORTED_VERSION
    served = COMPAT_VERSION if compat03 else SUPPORTED_VERSION
    for value in versions:
        version = value.strip()
        if not version:
            continue
        if _SUPPORTED_VERSION.fullmatch(version):
            served = SUPPORTED_VERSION
        elif not (compat03 and _COMPAT_VERSION.fullmatch(version)):
            raise VersionNotSupported(
                f"A2A-Version {_echo(version)} is not supported; this server supports {supported}",
                metadata={"supportedVersions": supported},
            )
    return served


def activate_extensions(header_value: str | None, supported: Sequence[str]) -> tuple[str, ...]:
    """Choose the extensions active for one request.

    Args:
        header_value: the ``A2A-Extensions`` header: comma-separated extension URIs,
            spaces/tabs around each allowed, empty items skipped. ``None`` when
            absent. URIs compare exactly (case-sensitive, §3.2.6). A client that
            sent several header lines should pass them joined with ``","``.
        supported: the URIs this server implements, in its preferred order.

    Returns:
        The requested URIs that are supported, each once, in the order of
        ``supported``. Unknown or unsupported URIs are ignored (§4.6.3): no error.
        The result is what the response echoes in its ``A2A-Extensions`` header.
    """
    if not header_value:
        return ()
    requested = {item.strip(" \t") for item in header_value.split(",")}
    requested.discard("")
    return tuple(dict.fromkeys(uri for uri in supported if uri in requested))


def check_request_content_type(content_type: str | None, has_body: bool) -> None:
    """Refuse a request body that is not declared as JSON.

    Args:
        content_type: the request ``Content-Type`` header, or ``None`` when absent.
        has_body: whether the request carries at least one body byte.

    Accepted: ``application/json``, ``application/a2a+json`` and any other
    ``application/<name>+json`` (case-insensitive), with parameters; a ``charset``
    parameter, if given, must be ``utf-8`` (RFC 8259 §8.1: JSON is UTF-8). A missing
    or blank ``Content-Type`` is accepted only with an empty body: bodiless
    ``:cancel``/``:subscribe`` POSTs.

    Raises:
        UnsupportedMediaType: (415) a non-JSON type, a malformed header, a charset
            other than UTF-8, or a body without ``Content-Type``. The message names
            the received value (cut to 64 characters).
    """
    if content_type is None or not content_type.strip():
        if has_body:
            raise UnsupportedMediaType(
                "a request body needs Content-Type: application/json (or application/a2a+json)"
            )
        return
    media_type, params = _split_media_type(content_type)
    parsed = _MEDIA_TYPE.fullmatch(media_type)
    if (
        parsed is None
        or parsed.group(1).lower() != "application"
        or not _JSON_SUBTYPE.fullmatch(parsed.group(2).lower())
    ):
        raise UnsupportedMediaType(
            f"Content-Type {_echo(content_type.strip())} is not supported; "
            "send application/json or application/a2a+json"
        )
    charset = params.get("charset")
    if charset is not None and charset.lower() not in ("utf-8", "utf8"):
        raise UnsupportedMediaType(
            f"charset {_echo(charset)} is not supported; JSON request bodies must be UTF-8"
        )


def response_media_type(accept_header: str | None) -> str:
    """Pick the ``Content-Type`` for a JSON response (success or error body).

    Args:
        accept_header: the request ``Accept`` header, or ``None`` when absent.

    Returns:
        ``"application/a2a+json"`` only when ``Accept`` names it explicitly with a
        non-zero quality that is not lower than an explicit ``application/json``
        entry; otherwise ``"application/json"`` (wildcards such as ``*/*`` or
        ``application/*`` choose ``application/json``, which the TCK requires).
        Malformed entries are skipped, never an error: an unsatisfiable ``Accept``
        is answered in ``application/json`` rather than with 406.
    """
    if not accept_header:
        return JSON_MEDIA_TYPE
    a2a_quality = json_quality = 0.0
    for media_range in accept_header.split(","):
        media_type, params = _split_media_type(media_range)
        quality = _quality(params.get("q"))
        if media_type == A2A_JSON_MEDIA_TYPE:
            a2a_quality = max(a2a_quality, quality)
        elif media_type == JSON_MEDIA_TYPE:
            json_quality = max(json_quality, quality)
    if a2a_quality > 0 and a2a_quality >= json_quality:
        return A2A_JSON_MEDIA_TYPE
    return JSON_MEDIA_TYPE


def _split_media_type(value: str) -> tuple[str, dict[str, str]]:
    # "Type/Sub ; a=1; charset=\"UTF-8\"" -> ("type/sub", {"a": "1", "charset": "UTF-8"})
    head, *raw_params = value.split(";")
    params: dict[str, str] = {}
    for raw in raw_params:
        name, sep, param_value = raw.partition("=")
        if sep:
            params[name.strip().lower()] = param_value.strip().strip('"')
    return head.strip().lower(), params


def _quality(raw: str | None) -> float:
    if raw is None:
        return 1.0
    return float(raw) if _QUALITY.fullmatch(raw) else 0.0


def _echo(value: str) -> str:
    # Quote a client-supplied value for a message without letting it grow the body.
    if len(value) > _MAX_ECHO_CHARS:
        value = value[:_MAX_ECHO_CHARS] + "..."
    return repr(value)
