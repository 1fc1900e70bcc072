"""Bearer-token authentication from the ``A2A_CREDENTIALS_PATH`` file.

Design rules "Resident-agent bridge" and "Surface": authentication is
bearer-token; each token maps to one principal, and every Task and dedupe record is
scoped to that principal. The file (docs/configuration.md) is JSON::

    {"credentials": [{"token": "<secret>", "principal": "<name>"}, ...]}

Several tokens may map to one principal (rotation); one token never maps to two.

Blocking I/O: :meth:`Credentials.load` and :func:`write_first_run_credentials` read
and write files synchronously. Call them at startup, before ``trio.run`` (or through
``trio.to_thread.run_sync``), never from a request handler (rule "blocking I/O off the loop").
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import shlex
import stat
from pathlib import Path
from typing import Any, Final

import attrs

from taskplane.durable_file import create_file, make_private_dirs
from taskplane.errors import Unauthenticated
from taskplane.settings import ServerSettings

CREDENTIALS_PATH_ENV: Final = "A2A_CREDENTIALS_PATH"
PRINCIPAL_PATTERN: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
"""A principal, matched in full: 1-128 chars, ASCII letters, digits and ``._:-``."""
FIRST_RUN_PRINCIPAL: Final = "local"
FIRST_RUN_TOKEN_BYTES: Final = 32

# RFC 9110 §11.4 credentials: a token is 1*VCHAR (visible ASCII, no spaces); anything
# else can never arrive in an ``Authorization: Bearer`` header, so refuse it at load.
_TOKEN_PATTERN = re.compile(r"[\x21-\x7e]+")
_ENTRY_KEYS = frozenset({"token", "principal"})


@attrs.frozen
class _Entry:
    principal: str
    token_sha256: bytes = attrs.field(repr=False)


@attrs.frozen
class Credentials:
    """The validated token table. Immutable; safe to share across tasks.

    Tokens are kept only as SHA-256 digests, so equal-length digests are compared in
    :meth:`authenticate` and neither the token values nor their lengths leak through
    timing.

    Attributes:
        source: where the table came from (the file path), for messages and logs.
    """

    source: str
    _entries: tuple[_Entry, ...] = attrs.field(repr=False, alias="entries")

    @property
    def principals(self) -> frozenset[str]:
        """Every distinct principal in the table."""
        return frozenset(entry.principal for entry in self._entries)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Credentials:
        """Read and validate the credentials file at ``path``.

        Args:
            path: the JSON file (``{"credentials": [{"token", "principal"}, ...]}``).

        Returns:
            The validated table.

        Raises:
            ValueError: the file cannot be read, is readable or writable by group or
                others (rule "Secrets stay private at rest": the message names the
                ``chmod 600`` that fixes it, as ssh does for keys), is not UTF-8 JSON,
                or breaks a rule of :meth:`from_json`; the message names the file
                and, for a bad entry, its index (``credentials[2].principal ...``).
                Token values never appear in messages.

        Concurrency: blocking file read (see the module docstring).
        """
        source = os.fspath(path)
        try:
            with open(source, "rb") as file:
                _check_private(source, os.fstat(file.fileno()).st_mode)
                raw = file.read()
        except OSError as exc:
            raise ValueError(
                f"{source}: cannot read the credentials file: {exc.strerror or exc}"
            ) from exc
        try:
            document = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"{source}: the credentials file is not valid JSON: {exc}") from exc
        return cls.from_json(document, source=source)

    @classmethod
    def from_settings(cls, settings: ServerSettings) -> Credentials:
        """Load the file named by ``settings.credentials_path`` (``A2A_CREDENTIALS_PATH``).

        Raises:
            ValueError: the path is not set (it is required whenever the listener
                runs, docs/configuration.md), or :meth:`load` fails.
        """
        if not settings.credentials_path:
            raise ValueError(f"{CREDENTIALS_PATH_ENV} is not set; it must name a credentials file")
        return cls.load(settings.credentials_path)

    @classmethod
    def from_json(cls, document: Any, *, source: str) -> Credentials:
        """Validate an already-parsed credentials document.

        Rules (each violation is a ``ValueError`` naming ``source`` and the entry):
        the top level is an object whose only key is ``credentials``; that is a
        non-empty array; every entry is an object with exactly the string keys
        ``token`` and ``principal``; a token is non-empty visible ASCII without spaces
        (it must fit an ``Authorization: Bearer`` header); a principal matches
        ``^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$``; no token appears twice.

        Args:
            document: the parsed JSON value.
            source: the file path (or another label) used in error messages.
        """
        if not isinstance(document, dict):
            raise ValueError(f"{source}: the top level must be a JSON object")
        extra = sorted(set(document) - {"credentials"})
        if extra:
            raise ValueError(f"{source}: unknown top-level key(s): {', '.join(extra)}")
        items = document.get("credentials")
        if not isinstance(items, list):
            raise ValueError(f"{source}: 'credentials' must be an array")
        if not items:
            raise ValueError(f"{source}: 'credentials' is empty; no caller could authenticate")
        entries: list[_Entry] = []
        first_index_of: dict[bytes, int] = {}
        for index, item in enumerate(items):
            where = f"{source}: credentials[{index}]"
            if not isinstance(item, dict):
                raise ValueError(f"{where} must be an object")
            unknown = sorted(set(item) - _ENTRY_KEYS)
            if unknown:
                raise ValueError(f"{where}: unknown key(s): {', '.join(unknown)}")
            token, principal = item.get("token"), item.get("principal")
            if not isinstance(token, str) or not token:
                raise ValueError(f"{where}.token must be a non-empty string")
            if not _TOKEN_PATTERN.fullmatch(token):
                raise ValueError(
                    f"{where}.token must be visible ASCII without spaces or control characters"
                )
            if not isinstance(principal, str) or not principal:
                raise ValueError(f"{where}.principal must be a non-empty string")
            if not PRINCIPAL_PATTERN.fullmatch(principal):
                raise ValueError(
                    f"{where}.principal {principal!r} must match "
                    f"^[A-Za-z0-9][A-Za-z0-9._:-]{{0,127}}$"
                )
            digest = hashlib.sha256(token.encode("ascii")).digest()
            if digest in first_index_of:
                raise ValueError(
                    f"{where}.token repeats the token of credentials[{first_index_of[digest]}]"
                )
            first_index_of[digest] = index
            entries.append(_Entry(principal=principal, token_sha256=digest))
        return cls(source=source, entries=tuple(entries))

    def authenticate(self, authorization_header: str | None) -> str:
        """Map an ``Authorization`` header to its principal.

        Args:
            authorization_header: the raw header value, e.g. ``"Bearer abc..."``, or
                ``None`` when absent. The scheme is case-insensitive (RFC 9110 §11.1);
                the token is case-sensitive; surrounding whitespace is ignored.

        Returns:
            The principal the token maps to.

        Raises:
            Unauthenticated: the header is missing or empty, its scheme is not
                ``Bearer``, it carries no token (or more than one), or the token is
                unknown. The message never echoes the presented token.

        Concurrency: pure CPU, constant in the number of entries: the presented token's
        digest is compared with ``hmac.compare_digest`` against every entry, with no
        early exit on a match.
        """
        if authorization_header is None or not authorization_header.strip():
            raise Unauthenticated("missing bearer token (Authorization: Bearer <token>)")
        scheme, _, rest = authorization_header.strip().partition(" ")
        if scheme.lower() != "bearer":
            raise Unauthenticated("the Authorization scheme must be Bearer")
        token = rest.strip(" \t")
        if not token or any(ch in token for ch in " \t"):
            raise Unauthenticated("malformed bearer credentials; expected one token")
        presented = hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()
        principal: str | None = None
        for entry in self._entries:
            match = hmac.compare_digest(entry.token_sha256, presented)
            if match:
                principal = entry.principal
        if principal is None:
            raise Unauthenticated("unknown bearer token")
        return principal


def _check_private(source: str, mode: int) -> None:
    """Refuse a credentials file that anyone but its owner may read or write.

    Raises:
        ValueError: ``mode`` grants group or other bits; the message names the file,
            its mode and the command that fixes it.
    """
    if stat.S_IMODE(mode) & 0o077:
        raise ValueError(
            f"{source}: the credentials file is accessible by group or others "
            f"(mode {stat.S_IMODE(mode):04o}); it holds bearer tokens, so fix it with: "
            f"chmod 600 {shlex.quote(source)}"
        )


def write_first_run_credentials(path: str | os.PathLike[str]) -> str | None:
    """Create a one-entry credentials file for the quickstart, unless one exists.

    The file holds a fresh ``secrets.token_urlsafe(32)`` token (256 bits) for the
    principal ``local``. Missing parent directories are created with mode 0700 (only
    those created here; existing ones are left alone); the file gets mode 0600.

    Atomicity: the content is written and fsynced to a private temporary file in the
    target directory, then hard-linked to ``path``; the link fails if ``path``
    appeared meanwhile, so an existing file is never overwritten and no reader ever
    sees a partial file.

    Args:
        path: where the credentials file belongs (normally ``A2A_CREDENTIALS_PATH``).

    Returns:
        The new token, to be shown once to the operator; ``None`` when a file (or
        anything else) already exists at ``path``: nothing is changed then.

    Raises:
        OSError: a directory or the file could not be created (permissions, disk
            full, a filesystem without hard links).

    Concurrency: blocking file I/O with fsync (see the module docstring).
    """
    target = Path(os.fspath(path))
    if os.path.lexists(target):
        return None
    make_private_dirs(target.parent)
    token = secrets.token_urlsafe(FIRST_RUN_TOKEN_BYTES)
    document = {"credentials": [{"token": token, "principal": FIRST_RUN_PRINCIPAL}]}
    payload = (json.dumps(document, indent=2) + "\n").encode("utf-8")
    return token if create_file(target, payload, private=True) else None
