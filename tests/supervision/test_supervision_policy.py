"""RestartPolicy, ChildSpec and RestartIntensityExceeded: domains and pure helpers."""

from __future__ import annotations

import math
import pickle
from functools import partial

import attrs
import pytest
import trio

import taskplane.supervision as sup
from taskplane.supervision import (
    ChildSpec,
    CrashReport,
    RestartIntensityExceeded,
    RestartPolicy,
    RestartType,
)


async def _noop(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    task_status.started()


def test_defaults_follow_otp() -> None:
    policy = RestartPolicy()
    assert (policy.max_restarts, policy.period_s) == (1, 5.0)
    assert policy.backoff_s == 0.0
    assert policy.backoff_delay_s(1) == 0.0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_restarts": -1},
        {"max_restarts": True},
        {"max_restarts": 1.5},
        {"period_s": 0},
        {"period_s": -1.0},
        {"period_s": math.nan},
        {"period_s": "5"},
        {"backoff_s": -0.1},
        {"backoff_s": 2.0, "backoff_cap_s": 1.0},
    ],
)
def test_policy_rejects_bad_values(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        RestartPolicy(**kwargs)  # type: ignore[arg-type]


def test_policy_is_frozen_and_allows_an_infinite_period() -> None:
    policy = RestartPolicy(max_restarts=0, period_s=math.inf)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        policy.max_restarts = 3  # type: ignore[misc]


def test_backoff_is_capped_exponential() -> None:
    policy = RestartPolicy(backoff_s=0.5, backoff_cap_s=3.0)
    assert [policy.backoff_delay_s(n) for n in range(0, 7)] == [0.0, 0.5, 1.0, 2.0, 3.0, 3.0, 3.0]
    assert policy.backoff_delay_s(10_000) == 3.0  # no overflow on a long window


def test_child_spec_validates_and_defaults_to_transient() -> None:
    spec = ChildSpec("a", partial(_noop))
    assert spec.restart_type is RestartType.TRANSIENT
    with pytest.raises(ValueError):
        ChildSpec("", _noop)
    with pytest.raises(TypeError):
        ChildSpec("a", "not callable")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        ChildSpec("a", _noop, "permanent")  # type: ignore[arg-type]


def test_restart_intensity_exceeded_names_the_child_and_pickles() -> None:
    policy = RestartPolicy(max_restarts=2, period_s=10)
    err = RestartIntensityExceeded("owner:t1", 3, policy)
    assert (err.child, err.restarts_in_window, err.policy) == ("owner:t1", 3, policy)
    assert "owner:t1" in str(err) and "max_restarts=2" in str(err)
    again = pickle.loads(pickle.dumps(err))
    assert (again.child, again.restarts_in_window, again.policy) == ("owner:t1", 3, policy)


def test_crash_report_keeps_strings_not_the_exception() -> None:
    class Local(Exception):
        pass

    report = CrashReport.from_exception("a", ValueError("x"), at=1.5, restarts_in_window=2)
    assert report == CrashReport("a", "ValueError", "ValueError('x')", 1.5, 2, False)
    assert hash(report) == hash(CrashReport("a", "ValueError", "ValueError('x')", 1.5, 2))
    local = CrashReport.from_exception("a", Local(), at=0.0, restarts_in_window=1)
    assert local.error_type == f"{__name__}.{Local.__qualname__}"


def test_public_surface_is_explicit() -> None:
    expected = {
        "CRASH_REPORT_BUFFER_SIZE",
        "ChildSpec",
        "CrashReport",
        "LOGGER_NAME",
        "RestartIntensityExceeded",
        "RestartPolicy",
        "RestartType",
        "StartFn",
        "supervise",
    }
    public = {name for name in vars(sup) if not name.startswith("_")}
    modules = {"policy", "reports", "supervisor"}
    assert public - modules == expected


def test_supervision_imports_only_trio_attrs_and_stdlib() -> None:
    """Design rule "Import layers": supervision stays generic (the backoff leaf imports
    nothing)."""
    import ast
    import sys
    from pathlib import Path

    allowed = {"trio", "attrs", "taskplane.errors", "taskplane.backoff"}
    package = Path(sup.__file__).parent
    for path in sorted(package.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                ok = top in sys.stdlib_module_names or top in allowed or name in allowed
                assert ok, f"{path.name} imports {name}"
