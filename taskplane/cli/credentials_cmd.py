"""``taskplane credentials add|list|revoke|token``: manage the bearer tokens."""

from __future__ import annotations

from pathlib import Path

import click

from taskplane.cli.credentials_file import (
    CredentialsFileError,
    fingerprint,
    mint_token,
    read_entries,
    write_entries,
)
from taskplane.cli.options import credentials_file, credentials_option
from taskplane.cli.output import note
from taskplane.http.auth import PRINCIPAL_PATTERN

RESTART_NOTE = "a running server reads the file only at startup: restart it to apply this"


def _principal(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    if not PRINCIPAL_PATTERN.fullmatch(value):
        raise click.BadParameter(f"{value!r} must match ^[A-Za-z0-9][A-Za-z0-9._:-]{{0,127}}$")
    return value


@click.group()
def credentials() -> None:
    """Manage the bearer tokens in the credentials file.

    The file is A2A_CREDENTIALS_PATH, or --credentials, default
    $XDG_CONFIG_HOME/taskplane/credentials.json. It is rewritten atomically and kept
    at mode 0600. Each token maps to one principal, the owner of the Tasks created
    with it; a principal may have several tokens (rotation).
    """


@credentials.command()
@credentials_option
@click.argument("principal", callback=_principal)
def add(credentials: Path | None, principal: str) -> None:
    """Mint a new random token for PRINCIPAL and print it on stdout.

    Creates the file (and its directories, mode 0700) if it does not exist. The token
    is printed alone on its line, so `TOKEN=$(taskplane credentials add alice)`
    works; `credentials token` prints it again later.
    """
    path = credentials_file(credentials)
    try:
        entries = read_entries(path, missing_ok=True)
        token = mint_token()
        write_entries(path, [*entries, {"token": token, "principal": principal}])
    except CredentialsFileError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(token)
    note(f"added token {fingerprint(token)} for {principal} to {path}; {RESTART_NOTE}")


@credentials.command("list")
@credentials_option
def list_cmd(credentials: Path | None) -> None:
    """List each token's principal and fingerprint (never the token itself).

    The fingerprint is the start of the token's SHA-256, the handle `revoke
    --fingerprint` takes.
    """
    path = credentials_file(credentials)
    try:
        entries = read_entries(path)
    except CredentialsFileError as exc:
        raise click.ClickException(str(exc)) from None
    width = max(len("PRINCIPAL"), *(len(e["principal"]) for e in entries))
    click.echo(f"{'PRINCIPAL':<{width}}  FINGERPRINT")
    for entry in entries:
        click.echo(f"{entry['principal']:<{width}}  {fingerprint(entry['token'])}")


@credentials.command()
@credentials_option
@click.argument("principal", callback=_principal)
@click.option(
    "--fingerprint",
    "wanted",
    help="Revoke only the token with this fingerprint (from `credentials list`; "
    "a unique prefix is enough).",
)
def revoke(credentials: Path | None, principal: str, wanted: str | None) -> None:
    """Remove PRINCIPAL's tokens (all of them, or the one --fingerprint names).

    Refuses when nothing matches, or when the file would be left empty (a server
    needs at least one credential; delete the file instead).
    """
    path = credentials_file(credentials)
    try:
        entries = read_entries(path)
        gone = [
            e
            for e in entries
            if e["principal"] == principal
            and (wanted is None or fingerprint(e["token"]).startswith(_prefixed(wanted)))
        ]
        if not gone:
            raise CredentialsFileError(f"no token of {principal} matches in {path}")
        if wanted is not None and len(gone) > 1:
            raise CredentialsFileError(f"the fingerprint {wanted} matches {len(gone)} tokens")
        kept = [e for e in entries if e not in gone]
        if not kept:
            raise CredentialsFileError(
                f"revoking would leave {path} without any credential; delete the file instead"
            )
        write_entries(path, kept)
    except CredentialsFileError as exc:
        raise click.ClickException(str(exc)) from None
    for entry in gone:
        note(f"revoked token {fingerprint(entry['token'])} of {principal}")
    note(RESTART_NOTE)


@credentials.command()
@credentials_option
@click.argument("principal", callback=_principal)
def token(credentials: Path | None, principal: str) -> None:
    """Print PRINCIPAL's newest token (the last one in the file) on stdout.

    For scripts and the startup banner: `curl -H "Authorization: Bearer
    $(taskplane credentials token local)" ...`.
    """
    path = credentials_file(credentials)
    try:
        entries = [e for e in read_entries(path) if e["principal"] == principal]
    except CredentialsFileError as exc:
        raise click.ClickException(str(exc)) from None
    if not entries:
        raise click.ClickException(f"{path} holds no token for {principal}")
    click.echo(entries[-1]["token"])


def _prefixed(wanted: str) -> str:
    return wanted if wanted.startswith("sha256:") else "sha256:" + wanted
