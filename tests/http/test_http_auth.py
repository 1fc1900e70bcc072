"""http/auth.py: the credentials file and bearer authentication."""

from __future__ import annotations

import hmac
import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from taskplane.errors import Unauthenticated
from taskplane.http.auth import Credentials, write_first_run_credentials
from taskplane.http.errors import wire_identity
from taskplane.settings import ServerSettings as Config

TOKEN_A = "tok-a-0123456789"
TOKEN_B = "tok-b-0123456789"


def _write(path: Path, document: Any) -> Path:
    path.write_text(json.dumps(document), encoding="utf-8")
    path.chmod(0o600)  # a credentials file readable by others is refused
    return path


@pytest.fixture
def creds(tmp_path: Path) -> Credentials:
    path = _write(
        tmp_path / "creds.json",
        {
            "credentials": [
                {"token": TOKEN_A, "principal": "alice"},
                {"token": TOKEN_B, "principal": "bob"},
                {"token": "tok-a-rotated", "principal": "alice"},
            ]
        },
    )
    return Credentials.load(path)


def test_authenticate_maps_each_token_to_its_principal(creds: Credentials) -> None:
    assert creds.authenticate(f"Bearer {TOKEN_A}") == "alice"
    assert creds.authenticate(f"Bearer {TOKEN_B}") == "bob"
    assert creds.authenticate("Bearer tok-a-rotated") == "alice"
    assert creds.principals == frozenset({"alice", "bob"})


@pytest.mark.parametrize(
    "header", [f"bearer {TOKEN_A}", f"BEARER {TOKEN_A}", f"  Bearer   {TOKEN_A}  "]
)
def test_scheme_is_case_insensitive_and_whitespace_tolerated(
    creds: Credentials, header: str
) -> None:
    assert creds.authenticate(header) == "alice"


@pytest.mark.parametrize(
    "header",
    [
        None,
        "",
        "   ",
        "Bearer",
        "Bearer ",
        f"Basic {TOKEN_A}",
        TOKEN_A,
        f"Bearer {TOKEN_A} extra",
        f"Bearer {TOKEN_A.upper()}",
        "Bearer unknown",
        "Bearer t\u00f6ken",  # non-ASCII must not crash compare_digest
        "Bearer \ud800",
    ],
)
def test_rejections_are_unauthenticated(creds: Credentials, header: str | None) -> None:
    with pytest.raises(Unauthenticated) as info:
        creds.authenticate(header)
    assert TOKEN_A not in str(info.value)
    assert wire_identity(info.value).http_status == 401


def test_every_entry_is_compared_even_after_a_match(
    creds: Credentials, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    real = hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        calls.append(1)
        return bool(real(a, b))

    monkeypatch.setattr(hmac, "compare_digest", counting)
    assert creds.authenticate(f"Bearer {TOKEN_A}") == "alice"  # the first entry
    assert len(calls) == 3


def test_repr_does_not_reveal_tokens(creds: Credentials) -> None:
    assert TOKEN_A not in repr(creds)
    assert "tok-a" not in repr(creds)


def test_from_environ_reads_the_named_file(tmp_path: Path) -> None:
    path = _write(tmp_path / "c.json", {"credentials": [{"token": "t", "principal": "p"}]})
    loaded = Credentials.from_settings(Config.from_environ({"A2A_CREDENTIALS_PATH": str(path)}))
    assert loaded.authenticate("Bearer t") == "p"
    assert loaded.source == str(path)


def test_from_environ_requires_the_variable() -> None:
    with pytest.raises(ValueError, match="A2A_CREDENTIALS_PATH"):
        Credentials.from_settings(Config.from_environ({}))


def test_missing_file_names_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope.json"
    with pytest.raises(ValueError, match=r"nope\.json"):
        Credentials.load(missing)


@pytest.mark.parametrize("raw", [b"{not json", b"\xff\xfe", b""])
def test_unparsable_file_names_the_path(tmp_path: Path, raw: bytes) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(raw)
    path.chmod(0o600)
    with pytest.raises(ValueError, match=r"bad\.json: .*not valid JSON"):
        Credentials.load(path)


P = "principal"


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        ([], "top level must be a JSON object"),
        ({}, "'credentials' must be an array"),
        ({"credentials": {}}, "'credentials' must be an array"),
        ({"credentials": []}, "'credentials' is empty"),
        ({"credentials": [], "extra": 1}, "unknown top-level key"),
        ({"credentials": ["x"]}, r"credentials\[0\] must be an object"),
        ({"credentials": [{P: "p"}]}, r"credentials\[0\]\.token must be a non-empty"),
        ({"credentials": [{"token": "", P: "p"}]}, r"credentials\[0\]\.token must be a non"),
        ({"credentials": [{"token": 5, P: "p"}]}, r"credentials\[0\]\.token must be a non"),
        ({"credentials": [{"token": "a b", P: "p"}]}, r"credentials\[0\]\.token must be visible"),
        ({"credentials": [{"token": "t\u00e9", P: "p"}]}, r"\[0\]\.token must be visible"),
        ({"credentials": [{"token": "t"}]}, r"credentials\[0\]\.principal must be a non-empty"),
        ({"credentials": [{"token": "t", P: ""}]}, r"\[0\]\.principal must be a non-empty"),
        ({"credentials": [{"token": "t", P: ["p"]}]}, r"\[0\]\.principal must be a non-empty"),
        ({"credentials": [{"token": "t", P: "-p"}]}, r"credentials\[0\]\.principal '-p' must"),
        ({"credentials": [{"token": "t", P: "a b"}]}, r"\[0\]\.principal 'a b' must match"),
        ({"credentials": [{"token": "t", P: "p\n"}]}, r"\[0\]\.principal 'p\\n' must match"),
        ({"credentials": [{"token": "t", P: "a" * 129}]}, r"\[0\]\.principal 'a+' must match"),
        ({"credentials": [{"token": "t", P: "p", "role": "x"}]}, r"\[0\]: unknown key\(s\): role"),
        (
            {
                "credentials": [
                    {"token": "t1", P: "p"},
                    {"token": "t2", P: "q"},
                    {"token": "t1", P: "r"},
                ]
            },
            r"credentials\[2\]\.token repeats the token of credentials\[0\]",
        ),
    ],
)
def test_invalid_documents_are_refused_naming_file_and_entry(
    tmp_path: Path, document: Any, expected: str
) -> None:
    path = _write(tmp_path / "creds.json", document)
    with pytest.raises(ValueError, match=expected) as info:
        Credentials.load(path)
    assert str(info.value).startswith(str(path))
    assert "t1" not in str(info.value)  # a token value never appears


@pytest.mark.parametrize("principal", ["a", "A9", "svc:ci.bot-1_x", "x" * 128])
def test_valid_principals(principal: str) -> None:
    creds = Credentials.from_json(
        {"credentials": [{"token": "t", "principal": principal}]}, source="inline"
    )
    assert creds.authenticate("Bearer t") == principal


@pytest.fixture
def umask_zero() -> Any:
    previous = os.umask(0)
    try:
        yield
    finally:
        os.umask(previous)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.usefixtures("umask_zero")
def test_first_run_creates_private_dirs_and_file(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "credentials.json"
    token = write_first_run_credentials(path)
    assert token is not None and len(token) >= 43
    assert _mode(tmp_path / "a") == 0o700
    assert _mode(tmp_path / "a" / "b") == 0o700
    assert _mode(path) == 0o600
    creds = Credentials.load(path)
    assert creds.authenticate(f"Bearer {token}") == "local"
    assert json.loads(path.read_text()) == {"credentials": [{"token": token, "principal": "local"}]}
    assert sorted(p.name for p in path.parent.iterdir()) == ["credentials.json"]


def test_first_run_leaves_existing_parent_modes_alone(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    write_first_run_credentials(tmp_path / "credentials.json")
    assert _mode(tmp_path) == 0o755


def test_first_run_never_overwrites(tmp_path: Path) -> None:
    path = tmp_path / "credentials.json"
    first = write_first_run_credentials(path)
    before = path.read_bytes()
    assert first is not None
    assert write_first_run_credentials(path) is None
    assert path.read_bytes() == before


def test_first_run_keeps_an_operator_file(tmp_path: Path) -> None:
    path = tmp_path / "credentials.json"
    path.write_text("not even json")
    assert write_first_run_credentials(path) is None
    assert path.read_text() == "not even json"


def test_first_run_tokens_differ(tmp_path: Path) -> None:
    one = write_first_run_credentials(tmp_path / "1.json")
    two = write_first_run_credentials(tmp_path / "2.json")
    assert one and two and one != two


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o644, 0o660, 0o602])
def test_a_file_others_may_read_or_write_is_refused_with_the_chmod_that_fixes_it(
    tmp_path: Path, mode: int
) -> None:
    path = _write(tmp_path / "creds.json", {"credentials": [{"token": "t", "principal": "p"}]})
    path.chmod(mode)
    with pytest.raises(ValueError) as refused:
        Credentials.load(path)
    message = str(refused.value)
    assert str(path) in message and f"{mode:04o}" in message
    assert f"chmod 600 {path}" in message
    assert '"t"' not in message


@pytest.mark.parametrize("mode", [0o600, 0o400])
def test_an_owner_only_file_loads(tmp_path: Path, mode: int) -> None:
    path = _write(tmp_path / "creds.json", {"credentials": [{"token": "t", "principal": "p"}]})
    path.chmod(mode)
    assert Credentials.load(path).authenticate("Bearer t") == "p"
