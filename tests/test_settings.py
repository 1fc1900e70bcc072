"""The settings loader: one parser per kind, flags applied to the records, the
documentation's table equal to the declarations, and no environment reads outside
the loader and the command line."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import attrs
import click
import pytest

from taskplane.cli.options import (
    FLAG_VARIABLES,
    StoreLocation,
    agent_settings,
    server_config,
    store_location,
)
from taskplane.settings import (
    RECORDS,
    AgentConfigError,
    ConfigError,
    Var,
    declared,
    load,
    load_agent,
    load_server,
    load_sources,
    number_text,
    parse,
    store_url,
)

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "taskplane"
CONFIGURATION = ROOT / "docs" / "configuration.md"


def _all_vars() -> dict[str, tuple[Var, attrs.Attribute[Any]]]:
    out: dict[str, tuple[Var, attrs.Attribute[Any]]] = {}
    for record in RECORDS:
        fields = attrs.fields_dict(record)
        for name, var in declared(record).items():
            assert var.name not in out, f"{var.name} is declared twice"
            out[var.name] = (var, fields[name])
    return out


# ---- integers -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("+800", id="plus-sign"),
        pytest.param("10_000", id="underscore-separator"),
        pytest.param("\uff18\uff10\uff10", id="full-width-digits"),
        pytest.param("\u0668\u0660\u0660", id="arabic-indic-digits"),
        pytest.param("-1", id="negative"),
        pytest.param("1e3", id="exponent"),
        pytest.param("0x1f", id="hexadecimal"),
        pytest.param("1.5", id="fraction"),
        pytest.param("8 0", id="inner-space"),
        pytest.param("65536", id="above-range"),
        pytest.param("abc", id="not-a-number"),
    ],
)
def test_an_integer_is_ascii_digits_in_range_else_refused_naming_variable_value_and_range(
    value: str,
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_server({"A2A_PORT": value})
    assert str(caught.value) == f"A2A_PORT={value!r} must be an integer from 0 to 65535"


def test_an_integer_may_have_spaces_around_it_and_empty_means_the_default() -> None:
    assert load_server({"A2A_PORT": " 8790 "}).port == 8790
    assert load_server({"A2A_PORT": ""}).port == 8788
    assert load_server({"A2A_PORT": "0"}).port == 0


def test_a_minus_sign_is_accepted_only_where_the_bounds_allow_negatives() -> None:
    signed = Var("TEST_OFFSET", "int", low=-5, high=5)
    assert parse(signed, "-3") == -3
    with pytest.raises(ConfigError, match=r"TEST_OFFSET='\+3' must be an integer from -5 to 5"):
        parse(signed, "+3")


def test_zero_or_a_range_names_both_in_its_refusal() -> None:
    with pytest.raises(ConfigError) as caught:
        load_server({"TASKPLANE_GC_GEN0": "699"})
    assert str(caught.value) == (
        "TASKPLANE_GC_GEN0='699' must be 0 or an integer from 700 to 10000000"
    )


def test_an_agent_integer_is_refused_as_an_agent_error_naming_the_variable() -> None:
    with pytest.raises(AgentConfigError) as caught:
        load_agent({"A2A_TURN_TIMEOUT_MS": "10_000"})
    assert isinstance(caught.value, ConfigError)
    assert str(caught.value) == (
        "A2A_TURN_TIMEOUT_MS='10_000' must be an integer from 0 to 86400000"
    )


@pytest.mark.parametrize("value", ["1e2", "nan", "inf", "+5", "0.5", "86401"])
def test_a_number_of_seconds_is_ascii_decimal_in_range(value: str) -> None:
    environ = {"OUTFITTER_CHANNELS": "github", "GITHUB_TOKEN": "t"}
    with pytest.raises(ConfigError, match=f"GITHUB_POLL_INTERVAL_S='{re.escape(value)}'"):
        load_sources({**environ, "GITHUB_POLL_INTERVAL_S": value})
    github = load_sources({**environ, "GITHUB_POLL_INTERVAL_S": "2.5"}).github
    assert github is not None and github.poll_interval_s == 2.5


# ---- urls, lists, sources -----------------------------------------------------------


def test_source_urls_are_checked_and_lose_their_trailing_slash() -> None:
    environ = {"OUTFITTER_CHANNELS": "slack", "SLACK_APP_TOKEN": "a", "SLACK_BOT_TOKEN": "b"}
    slack = load_sources({**environ, "SLACK_API_URL": "http://127.0.0.1:9/api/"}).slack
    assert slack is not None and slack.api_url == "http://127.0.0.1:9/api"
    with pytest.raises(ConfigError, match=r"SLACK_API_URL='slack\.com' must be an absolute"):
        load_sources({**environ, "SLACK_API_URL": "slack.com"})


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("http://[::1", "Invalid IPv6 URL"),
        ("http://x:abc", "Port could not be cast"),
        ("http://x:99999", "Port out of range"),
        ("http://a b", "space or a control character"),
        ("http://user@x/", "user name or password"),
        ("http://x/?", "without query or fragment"),
        ("http://x/#", "without query or fragment"),
    ],
)
def test_a_public_url_that_is_not_a_plain_absolute_url_names_the_variable(
    value: str, why: str
) -> None:
    with pytest.raises(ConfigError, match=rf"^A2A_PUBLIC_URL={re.escape(repr(value))} .*{why}"):
        load_server({"A2A_PUBLIC_URL": value})


def test_a_url_with_a_password_is_refused_without_showing_the_password() -> None:
    with pytest.raises(ConfigError) as caught:
        load_server({"A2A_PUBLIC_URL": "http://user:hunter2@x/"})
    message = str(caught.value)
    assert message.startswith("A2A_PUBLIC_URL='http://user:***@x/' ") and "hunter2" not in message
    assert "user name or password" in message
    with pytest.raises(ConfigError) as broken:  # unparsable, but holding credentials
        load_server({"A2A_PUBLIC_URL": "http://user:hunter2@[::1"})
    assert "hunter2" not in str(broken.value)


SECRETS = {
    "RELAY_TOKEN": {"OUTFITTER_CHANNELS": "relay", "RELAY_URL": "http://r"},
    "GITHUB_TOKEN": {"OUTFITTER_CHANNELS": "github"},
    "SLACK_APP_TOKEN": {"OUTFITTER_CHANNELS": "slack", "SLACK_BOT_TOKEN": "b"},
    "SLACK_BOT_TOKEN": {"OUTFITTER_CHANNELS": "slack", "SLACK_APP_TOKEN": "a"},
    "JMAP_PASSWORD": {"OUTFITTER_CHANNELS": "jmap", "JMAP_SESSION_URL": "http://j"},
    "JMAP_TOKEN": {"OUTFITTER_CHANNELS": "jmap", "JMAP_SESSION_URL": "http://j"},
    "MATTERMOST_TOKEN": {"OUTFITTER_CHANNELS": "mattermost", "MATTERMOST_URL": "http://m"},
    "ZULIP_API_KEY": {"OUTFITTER_CHANNELS": "zulip", "ZULIP_SITE": "http://z"},
    "FORGEJO_TOKEN": {"OUTFITTER_CHANNELS": "forgejo", "FORGEJO_URL": "http://f"},
    "CHATTO_TOKEN": {"OUTFITTER_CHANNELS": "chatto", "CHATTO_URL": "http://c"},
}


def _secret_of(record: object, name: str) -> object:
    for field in attrs.fields(type(record)):
        var = field.metadata.get("taskplane.setting")
        if var is not None and var.name == name:
            return getattr(record, field.name)
        value = getattr(record, field.name)
        if attrs.has(type(value)):
            found = _secret_of(value, name)
            if found is not None:
                return found
    return None


@pytest.mark.parametrize("name", sorted(SECRETS))
def test_a_source_secret_loses_the_white_space_around_it(name: str) -> None:
    record = load_sources({**SECRETS[name], name: " tok-123\n"})
    assert _secret_of(record, name) == "tok-123"


@pytest.mark.parametrize("name", sorted(SECRETS))
@pytest.mark.parametrize(
    ("bad", "kind"), [("tok\x01en", "a control"), ("tök", "a non-ASCII"), ("a\nb", "a control")]
)
def test_a_source_secret_with_a_control_or_non_ascii_character_is_refused_unshown(
    name: str, bad: str, kind: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_sources({**SECRETS[name], name: bad})
    message = str(caught.value)
    assert message.startswith(f"{name} holds {kind} character") and bad not in message
    assert bad.strip()[:2] not in message.split("(")[0].removeprefix(name)


def test_the_other_secrets_follow_the_same_rule() -> None:
    with pytest.raises(ConfigError, match=r"^TASKPLANE_STORE_URL holds a non-ASCII") as caught:
        store_url({"TASKPLANE_STORE_URL": "postgresql://u:pässword@h/db"})
    assert "pässword" not in str(caught.value)
    assert store_url({"TASKPLANE_STORE_URL": " host=h dbname=d\n"}) == "host=h dbname=d"
    with pytest.raises(ConfigError, match=r"^OPENAI_API_KEY holds a control"):
        load_agent(
            {"A2A_AGENT_RUNTIME": "openai", "A2A_AGENT_MODEL": "m", "OPENAI_API_KEY": "k\x7f"}
        )


@pytest.mark.parametrize(
    "name", ["RELAY_URL", "CHATTO_URL", "MATTERMOST_URL", "ZULIP_SITE", "FORGEJO_URL"]
)
def test_a_base_url_with_a_query_or_fragment_is_refused(name: str) -> None:
    source = {"RELAY_URL": "relay", "CHATTO_URL": "chatto", "MATTERMOST_URL": "mattermost"}
    source |= {"ZULIP_SITE": "zulip", "FORGEJO_URL": "forgejo"}
    for value in ("http://x/a?b=1", "http://x/a#top"):
        with pytest.raises(ConfigError, match=rf"^{name}=.* without query or fragment"):
            load_sources({"OUTFITTER_CHANNELS": source[name], name: value})


def test_a_url_loses_the_spaces_around_it_and_its_trailing_slash() -> None:
    assert load_server({"A2A_PUBLIC_URL": " http://x:8/a/ "}).public_url == "http://x:8/a"


def test_auto_detection_keeps_a_malformed_source_aside_and_reads_no_unselected_one() -> None:
    sources = load_sources(
        {"GITHUB_TOKEN": "t", "GITHUB_POLL_INTERVAL_S": "soon", "SLACK_API_URL": "bad"}
    )
    assert sources.selected == () and not sources.explicit
    ((name, error),) = sources.failed
    assert name == "github" and "GITHUB_POLL_INTERVAL_S='soon'" in error


def test_lists_are_stripped_and_folded_where_declared() -> None:
    sources = load_sources(
        {
            "GITHUB_TOKEN": "t",
            "GITHUB_NOTIFY_ORGS": " Acme, ,python-trio ",
            "OUTFITTER_CHANNELS": "GitHub,github",
        }
    )
    assert sources.selected == ("github",) and sources.github is not None
    assert sources.github.notify_orgs == ("acme", "python-trio")


# ---- flags --------------------------------------------------------------------------


def test_a_flag_wins_and_its_variable_is_not_read() -> None:
    environ = {"A2A_PORT": "not a port", "A2A_CREDENTIALS_PATH": "/c.json"}
    config = server_config({"port": 9000, "listen": False, "host": None}, environ)
    assert (config.port, config.a2a_server) == (9000, False)
    agent = agent_settings({"agent_concurrency": 3}, {"A2A_AGENT_CONCURRENCY": "many"})
    assert agent.concurrency == 3


def test_the_store_url_comes_from_its_flag_or_variable_and_stays_out_of_the_repr() -> None:
    environ = {"A2A_CREDENTIALS_PATH": "/c.json", "A2A_PUBLIC_URL": "https://agents.example"}
    assert server_config({}, environ).store_url is None  # unset: the SQLite store
    url = "postgresql://taskplane:s3cret@db.example/taskplane"
    config = server_config({}, {**environ, "TASKPLANE_STORE_URL": url})
    assert config.store_url == url and "s3cret" not in repr(config)
    flagged = server_config(
        {"store_url": "postgresql:///other"}, {**environ, "TASKPLANE_STORE_URL": url}
    )
    assert flagged.store_url == "postgresql:///other"


def test_the_operator_commands_find_the_store_as_serve_does() -> None:
    url = "postgresql://taskplane:s3cret@db.example/taskplane"
    environ = {"CHANNELS_TASK_STORE_PATH": "/srv/store"}
    assert store_location(None, None, environ) == StoreLocation(Path("/srv/store"), None)
    found = store_location(None, None, {**environ, "TASKPLANE_STORE_URL": url})
    assert (found.url, found.root) == (url, Path("/srv/store")) and "s3cret" not in repr(found)
    flagged = store_location(Path("/x"), "postgresql:///other", {"TASKPLANE_STORE_URL": url})
    assert (flagged.root, flagged.url) == (Path("/x"), "postgresql:///other")
    assert store_url({"TASKPLANE_STORE_URL": "  "}) is None  # empty counts as unset


def test_a_flag_obeys_its_variables_rule_and_the_error_names_the_variable() -> None:
    with pytest.raises(click.ClickException, match="A2A_PUBLIC_URL='ftp://x' must be an absolute"):
        server_config({"public_url": "ftp://x"}, {"A2A_CREDENTIALS_PATH": "/c.json"})


def test_the_serve_defaults_listen_and_find_the_credentials_file_under_xdg() -> None:
    config = server_config({}, {"XDG_CONFIG_HOME": "/cfg", "XDG_DATA_HOME": "/data"})
    assert config.a2a_server
    assert config.credentials_path == "/cfg/taskplane/credentials.json"
    assert config.store_root == Path("/data/outfitter/channels/task-plane")


def test_every_flag_names_a_declared_variable() -> None:
    assert set(FLAG_VARIABLES.values()) <= set(_all_vars())


def test_load_builds_every_part() -> None:
    settings = load({"A2A_AGENT_RUNTIME": "python", "A2A_AGENT_CALLABLE": "m:f"})
    assert settings.agent.runtime == "python" and not settings.server.a2a_server
    assert settings.sources.channels is None


# ---- the documentation --------------------------------------------------------------


def _table() -> dict[str, tuple[str, str]]:
    """Variable -> (default cell, unit cell) of the configuration table."""
    text = CONFIGURATION.read_text(encoding="utf-8")
    section = text.split("## Flags and environment variables", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, tuple[str, str]] = {}
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        for name in re.findall(r"`([A-Z0-9_]+)`", cells[0]):
            rows[name] = (cells[2], cells[3])
    return rows


def _default_text(var: Var, field: attrs.Attribute[Any]) -> str:
    if var.default_doc is not None:
        return var.default_doc
    default = field.default
    if isinstance(default, bool):
        return "on" if default else "off"
    if default is None or default == ():
        return "unset"
    if isinstance(default, float):
        return f"`{number_text(default)}`"
    return f"`{default}`"


def test_the_documented_variables_are_the_declared_ones() -> None:
    declared_names = set(_all_vars())
    assert set(_table()) == declared_names
    project = {n for n in declared_names if not n.startswith("XDG_")}
    # + TASKPLANE_CORS_ORIGINS, TASKPLANE_A2A_COMPAT (issue 17), RELAY_URL, RELAY_TOKEN,
    # CHATTO_URL, CHATTO_TOKEN (issue 20); + TASKPLANE_NODE_ID, TASKPLANE_LEASE_TTL_S
    # (issue 16)
    assert len(project) == 79


@pytest.mark.parametrize("name", sorted(_all_vars()))
def test_each_documented_default_and_unit_is_the_declared_one(name: str) -> None:
    var, field = _all_vars()[name]
    default_cell, unit_cell = _table()[name]
    assert default_cell.startswith(_default_text(var, field)), (default_cell, var)
    assert var.unit in unit_cell, (unit_cell, var)
    if var.kind in ("int", "float"):
        bounds = f"`{number_text(var.low)}`..`{number_text(var.high)}`"
        kind = "integer" if var.kind == "int" else "a number"
        assert kind in unit_cell and bounds in unit_cell, (unit_cell, var)
        if var.zero_ok:
            assert f"`0` or {bounds}" in unit_cell, (unit_cell, var)
    for choice in var.choices:
        assert f"`{choice}`" in unit_cell, (unit_cell, choice)


# ---- only the loader and the command line read the environment -----------------------

READERS = ("settings", "cli")


def _environment_reads(path: Path, root: Path = PACKAGE) -> list[str]:
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        where = f"{path.relative_to(root)}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv", "environb"):
            found.append(f"{where} .{node.attr}")
        elif isinstance(node, ast.Name) and node.id in ("environ", "getenv"):
            found.append(f"{where} {node.id}")
        elif isinstance(node, ast.arg) and node.arg == "environ":
            found.append(f"{where} parameter environ")
        elif isinstance(node, ast.ImportFrom) and node.module == "os":
            names = {a.name for a in node.names} & {"environ", "getenv", "environb"}
            found.extend(f"{where} from os import {n}" for n in sorted(names))
    return found


def test_only_the_settings_loader_and_the_command_line_read_the_environment() -> None:
    reads = [
        read
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.relative_to(PACKAGE).parts[0] not in READERS
        for read in _environment_reads(path)
    ]
    assert reads == [], "read the settings record instead:\n" + "\n".join(reads)


def test_the_environment_check_sees_every_form_of_read(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import os\nfrom os import getenv\n"
        "def f(environ):\n    return os.environ.get('X'), getenv('Y')\n",
        encoding="utf-8",
    )
    reads = _environment_reads(probe, tmp_path)
    assert sorted(r.split(" ", 1)[1] for r in reads) == [
        ".environ",
        "from os import getenv",
        "getenv",
        "parameter environ",
    ], reads


# ---- cluster settings (a shared store) -------------------------------------------------


def test_the_node_id_and_lease_length_have_their_defaults_and_bounds() -> None:
    config = load_server({})
    assert (config.node_id, config.lease_ttl_s) == (None, 15.0)  # None: generated per start
    named = load_server({"TASKPLANE_NODE_ID": "web-1.eu", "TASKPLANE_LEASE_TTL_S": "2.5"})
    assert (named.node_id, named.lease_ttl_s) == ("web-1.eu", 2.5)
    for value in ("1.9", "301", "-3", "soon"):
        with pytest.raises(ConfigError) as caught:
            load_server({"TASKPLANE_LEASE_TTL_S": value})
        assert str(caught.value) == (
            f"TASKPLANE_LEASE_TTL_S={value!r} must be a number from 2 to 300"
        )
    with pytest.raises(ConfigError, match="TASKPLANE_NODE_ID='web 1' must be 1-128 letters"):
        load_server({"TASKPLANE_NODE_ID": "web 1"})


def test_a_store_url_requires_the_public_url_every_node_shares() -> None:
    url = "postgresql:///taskplane"
    with pytest.raises(ConfigError) as caught:
        load_server({"TASKPLANE_STORE_URL": url})
    assert str(caught.value).startswith("A2A_PUBLIC_URL is required with TASKPLANE_STORE_URL")
    given = load_server({"TASKPLANE_STORE_URL": url, "A2A_PUBLIC_URL": "https://a.example/"})
    assert given.public_url == "https://a.example"
    assert load_server({}).store_url is None  # the SQLite store needs none
