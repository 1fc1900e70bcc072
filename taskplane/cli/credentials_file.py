"""Read and rewrite the credentials file (``A2A_CREDENTIALS_PATH``) for the CLI.

Every write is atomic and private: a new temporary file (mode 0600) in the same
directory, fsynced, then renamed over the old one, and the directory fsynced; missing
parent directories are created with mode 0700. Every document written is validated
first by the same rules the server applies at startup.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from pathlib import Path
from typing import Any

from taskplane.durable_file import make_private_dirs, replace_file
from taskplane.http.auth import FIRST_RUN_TOKEN_BYTES, Credentials

Entry = dict[str, str]
FINGERPRINT_HEX = 12
"""Hex digits of a token's SHA-256 shown by ``credentials list`` (48 bits)."""


class CredentialsFileError(Exception):
    """The file cannot be read, is invalid, or the change is refused; says why."""


def fingerprint(token: str) -> str:
    """``sha256:<12 hex>``: names a token without revealing it."""
    digest = hashlib.sha256(token.encode("ascii", "replace")).hexdigest()
    return f"sha256:{digest[:FINGERPRINT_HEX]}"


def read_entries(path: Path, *, missing_ok: bool = False) -> list[Entry]:
    """The file's entries, validated.

    Raises:
        CredentialsFileError: the file is missing (unless ``missing_ok``: then ``[]``),
            unreadable or breaks a rule (the message never holds a token).
    """
    if missing_ok and not path.exists():
        return []
    try:
        document: Any = json.loads(path.read_bytes().decode("utf-8"))
        Credentials.from_json(document, source=str(path))
    except OSError as exc:
        raise CredentialsFileError(
            f"cannot read the credentials file {path} (A2A_CREDENTIALS_PATH / "
            f"--credentials): {exc.strerror or exc}"
        ) from None
    except ValueError as exc:
        raise CredentialsFileError(str(exc)) from None
    return [dict(item) for item in document["credentials"]]


def mint_token() -> str:
    """A fresh random bearer token (256 bits, URL-safe)."""
    return secrets.token_urlsafe(FIRST_RUN_TOKEN_BYTES)


def write_entries(path: Path, entries: list[Entry]) -> None:
    """Replace the file's content with ``entries`` (validated, atomic, 0600).

    Raises:
        CredentialsFileError: the entries break a rule, or the write failed (the
            old file is then unchanged).
    """
    document = {"credentials": entries}
    try:
        Credentials.from_json(document, source=str(path))
    except ValueError as exc:
        raise CredentialsFileError(str(exc)) from None
    payload = (json.dumps(document, indent=2) + "\n").encode("utf-8")
    try:
        make_private_dirs(path.parent)
        replace_file(path, payload, private=True)
    except OSError as exc:
        raise CredentialsFileError(
            f"cannot write the credentials file {path}: {exc.strerror or exc}"
        ) from None
