"""The startup banner: where the server listens and a request to paste.

Printed on stdout once the listener is up, so it never mixes with the JSON log lines
on stderr. It shows a usable token when one was just minted, and otherwise the exact
command that prints it: tokens stay out of terminals and logs unless asked for.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path

import attrs

from taskplane import __version__

MESSAGE_ID_SHELL = "$(python3 -c 'import uuid; print(uuid.uuid4())')"
"""Shell text that expands to a fresh messageId (a pasted example can be rerun)."""


@attrs.frozen
class Banner:
    """What the banner shows.

    Attributes:
        url: the A2A endpoint clients use (the Agent Card's interface URL).
        try_url: the URL the pasted curl line calls (loopback when ``url`` is a
            bind-all address).
        store_root: the store directory.
        store: the PostgreSQL store and this node, when one is configured
            (``PostgreSQL <conninfo without password>, node <id>``); ``None`` on
            the SQLite store of ``store_root``.
        credentials: the credentials file.
        principals: every principal in it.
        token: a token minted by this start, or ``None`` (then the command that
            prints one is shown).
        warnings: lines to show under the table.
    """

    url: str
    try_url: str
    store_root: Path
    credentials: Path
    principals: frozenset[str]
    token: str | None = None
    warnings: tuple[str, ...] = ()
    store: str | None = None

    def render(self) -> str:
        """The banner text (several lines, ending with a newline)."""
        principal = "local" if "local" in self.principals else min(self.principals)
        show = f"{self_command()} credentials token {shlex.quote(principal)} --credentials " + (
            shlex.quote(str(self.credentials))
        )
        token_line = self.token if self.token is not None else f"printed by: {show}"
        bearer = self.token if self.token is not None else f"$({show})"
        body = (
            '\'{"message":{"messageId":"\'"' + MESSAGE_ID_SHELL + '"\'","role":"ROLE_USER",'
            '"parts":[{"text":"hello"}]}}\''
        )
        lines = [
            f"taskplane {__version__}",
            f"  A2A endpoint : {self.url}  (Agent Card: {self.url}/.well-known/agent-card.json)",
            f"  console      : {self.try_url}/console/  (a web page; sign in with the token)",
            f"  store        : {self.store or self.store_root}",
            *([f"  store root   : {self.store_root}"] if self.store else []),
            f"  credentials  : {self.credentials}{' (new)' if self.token else ''};"
            f" principals: {', '.join(sorted(self.principals))}",
            f"  token        : {token_line}",
            *(f"  warning      : {w}" for w in self.warnings),
            "",
            "Try it:",
            f'  curl -s -H "Authorization: Bearer {bearer}" '
            "-H 'Content-Type: application/json' \\",
            f"    -d {body} {self.try_url}/message:send",
        ]
        return "\n".join(lines) + "\n"


def postgres_store(url: str, node_id: str) -> str:
    """The banner's ``store`` line for a PostgreSQL store at ``url`` (its password
    never shown) served by node ``node_id``."""
    from taskplane.app import postgres_location

    return f"PostgreSQL {postgres_location(url)}, node {node_id}"


def self_command() -> str:
    """How to run this taskplane again from a shell: ``taskplane`` when that name on
    ``PATH`` is this installation, else ``<this python> -m taskplane``."""
    found = shutil.which("taskplane")
    here = Path(sys.executable).resolve().parent
    if found is not None and Path(found).resolve().parent in (here, Path(sys.executable).parent):
        return "taskplane"
    script = Path(sys.argv[0])
    if script.name == "taskplane" and script.is_file() and os.access(script, os.X_OK):
        return shlex.quote(str(script.resolve()))
    return f"{shlex.quote(sys.executable)} -m taskplane"
