"""Setting declarations and the one parser per kind of value.

A setting is an attrs field whose metadata holds a :class:`Var`: the environment
variable's name, the kind of value, its unit and bounds, and how the documentation
writes a default computed at load time. :func:`build` fills a record from a mapping of
variables (and the values flags give), calling one parser per kind; every refusal is a
:class:`ConfigError` naming the variable, the value and what is accepted.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final, Literal, TypeVar
from urllib.parse import urlsplit, urlunsplit

import attrs
from attrs import AttrsInstance

Kind = Literal["int", "float", "switch", "url", "list", "choice", "text", "path", "command"]

VAR: Final = "taskplane.setting"
"""The attrs metadata key of a field's :class:`Var`."""
TRUE: Final = ("1", "true", "yes", "on")
FALSE: Final = ("0", "false", "no", "off")
OFF_WORDS: Final = ("off", "none")
"""A list setting with choices that holds one of these selects nothing."""

_DIGITS = re.compile(r"[0-9]+", re.ASCII)
_SIGNED_DIGITS = re.compile(r"-?[0-9]+", re.ASCII)
_DECIMAL = re.compile(r"[0-9]+(?:\.[0-9]*)?|\.[0-9]+", re.ASCII)

R = TypeVar("R", bound=AttrsInstance)


class ConfigError(ValueError):
    """A setting is missing or malformed; the message names its variable."""


class AgentConfigError(ConfigError):
    """An agent setting is missing or malformed; the message names the variable."""


@attrs.frozen
class Var:
    """What a setting reads and accepts.

    Attributes:
        name: the environment variable (a contract: never renamed).
        kind: which parser reads it.
        unit: the unit or form the documentation's table names (``seconds``, ...).
        low, high: inclusive bounds of ``int`` and ``float`` settings.
        zero_ok: ``0`` is accepted below ``low`` (it means "off" or "the default").
        choices: the accepted values of a ``choice`` or ``list`` setting.
        lower: a ``list`` setting's items are folded to lower case.
        plain: a ``url`` setting refuses a query or a fragment.
        secret: the value is a credential (:func:`parse_secret`), never shown in an
            error or a ``repr``.
        default_doc: how the documentation writes a default computed at load time.
    """

    name: str
    kind: Kind
    unit: str = ""
    low: float | None = None
    high: float | None = None
    zero_ok: bool = False
    choices: tuple[str, ...] = ()
    lower: bool = False
    plain: bool = False
    secret: bool = False
    default_doc: str | None = None


def setting(
    name: str,
    kind: Kind,
    default: Any = None,
    *,
    factory: Callable[[], Any] | None = None,
    secret: bool = False,
    **var: Any,
) -> Any:
    """An attrs field read from variable ``name`` (``var`` as for :class:`Var`), with
    ``default`` (or ``factory``) when a record is built by hand; ``secret`` keeps the
    value out of the record's ``repr`` and out of every error, and reads it with
    :func:`parse_secret`."""
    metadata = {VAR: Var(name, kind, secret=secret, **var)}
    if factory is not None:
        return attrs.field(factory=factory, repr=not secret, metadata=metadata)
    return attrs.field(default=default, repr=not secret, metadata=metadata)


def declared(cls: type) -> dict[str, Var]:
    """The settings of record class ``cls``: field name to :class:`Var`."""
    return {f.name: f.metadata[VAR] for f in attrs.fields(cls) if VAR in f.metadata}


def build(
    cls: type[R],
    variables: Mapping[str, str],
    *,
    given: Mapping[str, object] | None = None,
    defaults: Mapping[str, object] | None = None,
    error: type[ConfigError] = ConfigError,
) -> R:
    """A ``cls`` record read from ``variables``.

    Args:
        given: field name to a flag's value; it wins over the variable, which is then
            not read at all. The value goes through the field's parser as text
            (``True``/``False`` as ``1``/``0``), so a flag and its variable obey one rule.
        defaults: field name to a default computed by the caller, used when neither a
            flag nor the variable gives a value (an empty variable counts as unset).
        error: the :class:`ConfigError` subclass raised.
    Raises:
        ConfigError: of class ``error``; a malformed value, naming its variable.
    """
    values: dict[str, object] = {}
    for field in attrs.fields(cls):
        var: Var | None = field.metadata.get(VAR)
        if var is None:
            continue
        flag = (given or {}).get(field.name)
        raw = _flag_text(flag) if flag is not None else variables.get(var.name)
        if raw is None or not raw.strip():
            if defaults and field.name in defaults:
                values[field.alias] = defaults[field.name]
            continue
        try:
            values[field.alias] = parse(var, raw)
        except ConfigError as exc:
            raise (exc if type(exc) is error else error(str(exc))) from None
    return cls(**values)


def _flag_text(value: object) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def parse(var: Var, raw: str) -> Any:
    """``raw`` (non-empty) read as ``var`` says.

    Raises:
        ConfigError: the value is malformed or out of bounds; the message names
            ``var.name``, the value and what is accepted.
    """
    if var.secret:
        return parse_secret(var.name, raw)
    if var.kind == "int":
        return parse_int(var, raw)
    if var.kind == "float":
        return parse_float(var, raw)
    if var.kind == "switch":
        return parse_switch(var.name, raw)
    if var.kind == "url":
        return parse_url(var, raw)
    if var.kind == "list":
        return parse_list(var, raw)
    if var.kind == "choice":
        return parse_choice(var, raw)
    if var.kind == "path":
        return Path(raw).expanduser()
    if var.kind == "command":
        return parse_command(var.name, raw)
    return raw


def number_text(value: float | None) -> str:
    """``value`` as the documentation writes it: ``86400000``, ``60``, ``2.5``."""
    assert value is not None
    return str(int(value)) if float(value).is_integer() else str(value)


def int_range(var: Var) -> str:
    """The accepted integers of ``var`` in words: ``an integer from 1 to 64``."""
    words = f"an integer from {number_text(var.low)} to {number_text(var.high)}"
    return f"0 or {words}" if var.zero_ok else words


def parse_int(var: Var, raw: str) -> int:
    """ASCII decimal digits only, within ``var.low..var.high`` (or ``0`` with
    ``zero_ok``): no ``+``, no ``_`` separators, no other script's digits, and a
    ``-`` only when ``low`` is negative."""
    assert var.low is not None and var.high is not None
    value = raw.strip()
    pattern = _SIGNED_DIGITS if var.low < 0 else _DIGITS
    number = int(value) if pattern.fullmatch(value) else None
    ok = number is not None and (var.low <= number <= var.high or (var.zero_ok and number == 0))
    if not ok or number is None:
        raise ConfigError(f"{var.name}={value!r} must be {int_range(var)}")
    return number


def parse_float(var: Var, raw: str) -> float:
    """ASCII decimal digits with an optional fraction (``2.5``), within the bounds."""
    assert var.low is not None and var.high is not None
    value = raw.strip()
    number = float(value) if _DECIMAL.fullmatch(value) else None
    if number is None or not var.low <= number <= var.high:
        raise ConfigError(
            f"{var.name}={value!r} must be a number from {number_text(var.low)} "
            f"to {number_text(var.high)}"
        )
    return number


def parse_switch(name: str, raw: str) -> bool:
    """``1 true yes on`` or ``0 false no off``, in any case, spaces around ignored."""
    value = raw.strip().lower()
    if value in TRUE:
        return True
    if value in FALSE:
        return False
    raise ConfigError(
        f"{name}={raw!r} is not understood; use one of {', '.join(TRUE)} (on) "
        f"or {', '.join(FALSE)} (off)"
    )


def parse_secret(name: str, raw: str) -> str:
    """A credential (token, API key, password, store URL): white space around it is
    dropped (a trailing newline from ``$(cat file)`` or an editor), and what is left
    must be printable ASCII (space to ``~``): a control character or a non-ASCII one
    cannot travel in an HTTP header, and a library refusing it would print the value.

    Raises:
        ConfigError: naming ``name`` and the offending character's position and kind,
            never the value.
    """
    value = raw.strip()
    for index, char in enumerate(value):
        if not " " <= char <= "~":
            kind = "a non-ASCII" if ord(char) > 127 else "a control"
            raise ConfigError(
                f"{name} holds {kind} character at position {index + 1} (the value is not"
                " shown); a secret must be printable ASCII"
            )
    return value


def _shown(value: str) -> str:
    """``value`` with the password of a URL replaced by ``***``: what an error may
    show of a URL setting."""
    try:
        parts = urlsplit(value)
        if parts.password is None:
            return value
        host = parts.netloc.rpartition("@")[2]
        return urlunsplit(parts._replace(netloc=f"{parts.username}:***@{host}"))
    except ValueError:
        return "(not shown: it looks like it holds credentials)" if "@" in value else value


def parse_url(var: Var, raw: str) -> str:
    """An absolute ``http``/``https`` URL with a host, a valid port if any, no spaces and
    no user name or password (and with ``plain``, no query or fragment, not even an
    empty one); spaces around it and a trailing ``/`` are dropped.

    Raises:
        ConfigError: naming the variable, the value (its password, if any, shown as
            ``***``) and what is wrong with it.
    """
    value = raw.strip()
    shown = _shown(value)
    rule = " without query or fragment" if var.plain else ""
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError for a port that is not 0-65535
    except ValueError as exc:
        raise ConfigError(f"{var.name}={shown!r} must be an absolute http(s) URL ({exc})") from None
    wrong = None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        wrong = ""
    elif any(c.isspace() or not c.isprintable() for c in value):
        wrong = " (it contains a space or a control character)"
    elif parts.username is not None or parts.password is not None:
        wrong = " (a user name or password does not belong in it)"
    elif var.plain and ("?" in value or "#" in value):
        wrong = " (it is a base URL: the client builds the paths below it)"
    if wrong is not None:
        raise ConfigError(f"{var.name}={shown!r} must be an absolute http(s) URL{rule}{wrong}")
    return value.rstrip("/")


def parse_list(var: Var, raw: str) -> tuple[str, ...]:
    """A comma list; items are stripped, empty items dropped. With ``choices``, one of
    ``off``/``none`` is the empty list and every item must be a choice."""
    items = tuple(i.strip() for i in raw.split(",") if i.strip())
    if var.lower:
        items = tuple(i.lower() for i in items)
    if not var.choices:
        return items
    if raw.strip().lower() in OFF_WORDS:
        return ()
    unknown = [i for i in items if i not in var.choices]
    if unknown:
        raise ConfigError(
            f"{var.name} names unknown {var.unit} {', '.join(unknown)};"
            f" known: {', '.join(var.choices)}, or {'/'.join(OFF_WORDS)}"
        )
    return tuple(dict.fromkeys(items))


def parse_choice(var: Var, raw: str) -> str:
    """One of ``var.choices``, in any case, spaces around ignored."""
    value = raw.strip()
    for choice in var.choices:
        if value.casefold() == choice.casefold():
            return choice
    raise ConfigError(f"{var.name}={value!r} is not one of {', '.join(var.choices)}")


def parse_command(name: str, raw: str) -> tuple[str, ...]:
    """A command line split like a POSIX shell's (no shell runs)."""
    try:
        return tuple(shlex.split(raw))
    except ValueError as exc:
        raise ConfigError(f"{name}: {exc}") from None
