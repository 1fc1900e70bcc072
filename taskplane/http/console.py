"""The browser console's static files, served at ``/console/`` without a token.

The console (``taskplane/console/``: an HTML page, JavaScript modules, one style
sheet) is a client of the public HTTP+JSON API like any other: the page itself is
public, and every API call it makes carries the person's bearer token. The files are
read once, when the app is built, into an immutable table ``name -> StaticFile``. A
request names one entry of that table or is answered 404: no part of a request path
ever reaches the file system, so there is no directory listing and no path traversal.

Every file is answered with its media type, ``Cache-Control: no-cache`` and a strong
``ETag`` (so a reload costs a ``304``), and a ``Content-Security-Policy`` that allows
only this origin (``default-src 'self'``; no inline script or style, no plugin, no
framing), so the page cannot load or send anything elsewhere.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from importlib import resources
from types import MappingProxyType

import attrs
from quart import Response

from taskplane.errors import RouteNotFound
from taskplane.http.card import etag_matches

PREFIX = "/console/"
"""Where the console lives; ``/console`` (no slash) redirects here."""
INDEX = "index.html"
MEDIA_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}
"""The file suffixes served, and their ``Content-Type``; other files are not served."""
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'"
)
"""Same origin only: the page talks to this server's API and nothing else."""


def is_console_path(path: str) -> bool:
    """``True`` for ``/console`` and everything below ``/console/``."""
    return path == PREFIX.rstrip("/") or path.startswith(PREFIX)


@attrs.frozen
class StaticFile:
    """One console file: its bytes, ``Content-Type`` and ``ETag`` (quoted SHA-256 prefix)."""

    body: bytes
    media_type: str
    etag: str


@attrs.frozen
class ConsoleFiles:
    """The console's files by name (flat: ``index.html``, ``main.js``, ...)."""

    files: Mapping[str, StaticFile]

    @classmethod
    def load(cls) -> ConsoleFiles:
        """Read the files shipped in the package's ``console`` directory.

        Only regular files with a suffix of :data:`MEDIA_TYPES` are kept.

        Raises:
            FileNotFoundError: the package ships no ``console/index.html``.
        """
        root = resources.files("taskplane").joinpath("console")
        files: dict[str, StaticFile] = {}
        for entry in root.iterdir():
            media_type = MEDIA_TYPES.get("." + entry.name.rpartition(".")[2])
            if entry.is_file() and media_type is not None:
                body = entry.read_bytes()
                digest = hashlib.sha256(body).hexdigest()[:32]
                files[entry.name] = StaticFile(body, media_type, f'"{digest}"')
        if INDEX not in files:
            raise FileNotFoundError(f"the console's {INDEX} is missing from the package")
        return cls(MappingProxyType(files))

    def lookup(self, path: str) -> StaticFile:
        """The file for the request ``path`` (``/console/`` is the index).

        Raises:
            RouteNotFound: ``path`` names no console file (subdirectories, ``..``,
                encoded separators and unknown names alike).
        """
        name = path[len(PREFIX) :] if path.startswith(PREFIX) else None
        found = self.files.get(name or INDEX) if name is not None else None
        if found is None:
            raise RouteNotFound(f"no console file at {path}; the console is at {PREFIX}")
        return found


def console_response(files: ConsoleFiles, path: str, if_none_match: str | None) -> Response:
    """The answer to ``GET``/``HEAD`` of ``path`` (a console path).

    ``/console`` is a ``308`` to ``/console/``; a file whose ``ETag`` matches
    ``if_none_match`` is a ``304`` without a body.

    Raises:
        RouteNotFound: no such console file (answered as the usual §11.6 404).
    """
    if not path.startswith(PREFIX):
        return Response(b"", 308, headers={"Location": PREFIX})
    found = files.lookup(path)
    headers = {
        "Cache-Control": "no-cache",
        "ETag": found.etag,
        "Content-Security-Policy": CONTENT_SECURITY_POLICY,
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
    }
    if etag_matches(if_none_match, found.etag):
        return Response(b"", 304, headers=headers)
    return Response(found.body, 200, headers=headers, content_type=found.media_type)
