"""http/errors.py: the §11.6 error body and its headers (digest D10.2)."""

from __future__ import annotations

import json

import pytest

import taskplane.errors as errors_module
from taskplane.errors import (
    InvalidRequest,
    Overloaded,
    TaskNotFound,
    TaskplaneError,
    Unauthenticated,
    VersionNotSupported,
)
from taskplane.http.errors import error_body, error_headers, wire_identity


def _all_error_classes() -> list[type[TaskplaneError]]:
    return [
        value
        for value in vars(errors_module).values()
        if isinstance(value, type) and issubclass(value, TaskplaneError)
    ]


def test_task_not_found_body_has_the_documented_shape() -> None:
    body = error_body(TaskNotFound("no task t1", metadata={"taskId": "t1"}))
    assert body == {
        "error": {
            "code": 404,
            "status": "NOT_FOUND",
            "message": "no task t1",
            "details": [
                {
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": "TASK_NOT_FOUND",
                    "domain": "a2a-protocol.org",
                    "metadata": {"taskId": "t1"},
                }
            ],
        }
    }


def test_metadata_is_omitted_when_empty() -> None:
    (info,) = error_body(VersionNotSupported("no"))["error"]["details"]
    assert "metadata" not in info
    assert info["reason"] == "VERSION_NOT_SUPPORTED"


def test_metadata_values_are_always_strings() -> None:
    exc = InvalidRequest("x", metadata={"limit": 5, "ok": True})  # type: ignore[dict-item]
    (info,) = error_body(exc)["error"]["details"]
    assert info["metadata"] == {"limit": "5", "ok": "True"}


def test_field_violations_become_a_bad_request_detail() -> None:
    exc = InvalidRequest(
        "bad",
        field_violations=[
            ("$.message.task_id", "expected str"),
            ("$", "extra fields found (bogus)"),
            ("pageSize", "must be between 1 and 100"),
            ("page_size", "is not a known parameter"),
        ],
    )
    details = error_body(exc)["error"]["details"]
    assert [d["@type"] for d in details] == [
        "type.googleapis.com/google.rpc.ErrorInfo",
        "type.googleapis.com/google.rpc.BadRequest",
    ]
    assert details[1]["fieldViolations"] == [
        {"field": "message.taskId", "description": "expected str"},
        {"field": "", "description": "extra fields found (bogus)"},
        {"field": "pageSize", "description": "must be between 1 and 100"},
        # Not a codec path: a wire name is reported exactly as the caller sent it.
        {"field": "page_size", "description": "is not a known parameter"},
    ]


@pytest.mark.parametrize("cls", _all_error_classes(), ids=lambda c: c.__name__)
def test_every_error_class_renders_code_equal_to_its_http_status(
    cls: type[TaskplaneError],
) -> None:
    exc = cls("message text")
    body = error_body(exc)
    assert body["error"]["code"] == wire_identity(cls).http_status
    assert body["error"]["status"] == wire_identity(cls).grpc_status
    assert body["error"]["details"][0]["reason"] == wire_identity(cls).reason
    assert body["error"]["details"][0]["domain"] == "a2a-protocol.org"
    json.dumps(body, allow_nan=False)  # JSON-ready


def test_body_is_fresh_each_call() -> None:
    exc = TaskNotFound("t", metadata={"taskId": "t"})
    first = error_body(exc)
    first["error"]["details"][0]["metadata"]["taskId"] = "changed"
    assert error_body(exc)["error"]["details"][0]["metadata"] == {"taskId": "t"}
    assert exc.metadata == {"taskId": "t"}


def test_headers_carry_retry_after_when_set() -> None:
    assert error_headers(Overloaded("full", retry_after_s=3)) == {"Retry-After": "3"}
    assert error_headers(InvalidRequest("x", retry_after_s=0)) == {"Retry-After": "0"}


def test_headers_challenge_on_401() -> None:
    assert error_headers(Unauthenticated("who?")) == {
        "WWW-Authenticate": 'Bearer realm="taskplane"'
    }


def test_headers_empty_for_plain_errors() -> None:
    assert error_headers(TaskNotFound("t")) == {}
