"""http/errors.py: the one table of wire identities (HTTP status, google.rpc.Code
name, ErrorInfo reason) keyed by error class.

The expected values are the identities every error answered before the table moved
out of the error classes: every answer stays byte-for-byte the same.
"""

from __future__ import annotations

import pytest

import taskplane.actors.outbound as outbound
import taskplane.errors as errors
from taskplane.errors import TaskplaneError
from taskplane.http.errors import WIRE_IDENTITIES, WireIdentity, error_body, wire_identity

EXPECTED: dict[str, tuple[int, str, str]] = {
    "TaskplaneError": (500, "INTERNAL", "INTERNAL"),
    "InvalidRequest": (400, "INVALID_ARGUMENT", "INVALID_ARGUMENT"),
    "Unauthenticated": (401, "UNAUTHENTICATED", "UNAUTHENTICATED"),
    "RouteNotFound": (404, "NOT_FOUND", "NOT_FOUND"),
    "MethodNotAllowed": (405, "UNIMPLEMENTED", "METHOD_NOT_ALLOWED"),
    "MethodNotImplemented": (501, "UNIMPLEMENTED", "METHOD_NOT_IMPLEMENTED"),
    "RequestTimeout": (408, "DEADLINE_EXCEEDED", "REQUEST_TIMEOUT"),
    "UpgradeNotSupported": (400, "INVALID_ARGUMENT", "UPGRADE_NOT_SUPPORTED"),
    "DuplicateMessageId": (409, "ALREADY_EXISTS", "DUPLICATE_MESSAGE_ID"),
    "PayloadTooLarge": (413, "INVALID_ARGUMENT", "PAYLOAD_TOO_LARGE"),
    "UnsupportedMediaType": (415, "INVALID_ARGUMENT", "UNSUPPORTED_MEDIA_TYPE"),
    "Overloaded": (503, "UNAVAILABLE", "UNAVAILABLE"),
    "StoreUnavailable": (503, "UNAVAILABLE", "UNAVAILABLE"),
    "Internal": (500, "INTERNAL", "INTERNAL"),
    "ActorGone": (503, "UNAVAILABLE", "UNAVAILABLE"),
    "VersionConflict": (503, "UNAVAILABLE", "VERSION_CONFLICT"),
    "Fenced": (503, "UNAVAILABLE", "FENCED"),
    "StoreLocked": (500, "INTERNAL", "INTERNAL"),
    "StoreVersionError": (500, "INTERNAL", "INTERNAL"),
    "TaskNotFound": (404, "NOT_FOUND", "TASK_NOT_FOUND"),
    "TaskNotCancelable": (400, "FAILED_PRECONDITION", "TASK_NOT_CANCELABLE"),
    "PushNotificationNotSupported": (501, "UNIMPLEMENTED", "PUSH_NOTIFICATION_NOT_SUPPORTED"),
    "UnsupportedOperation": (400, "FAILED_PRECONDITION", "UNSUPPORTED_OPERATION"),
    "VersionNotSupported": (400, "FAILED_PRECONDITION", "VERSION_NOT_SUPPORTED"),
    "ToolError": (400, "FAILED_PRECONDITION", "TOOL_ERROR"),
    "DeliveryFailed": (502, "UNAVAILABLE", "DELIVERY_FAILED"),
    "ProviderUnavailable": (503, "UNAVAILABLE", "AGENT_PROVIDER_UNAVAILABLE"),
    "DeliveryAmbiguous": (502, "DATA_LOSS", "DELIVERY_AMBIGUOUS"),
    "DeliveryConflict": (409, "ALREADY_EXISTS", "DELIVERY_CONFLICT"),
}


def _class(name: str) -> type[TaskplaneError]:
    found = getattr(errors, name, None) or getattr(outbound, name)
    assert isinstance(found, type) and issubclass(found, TaskplaneError)
    return found


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_class_keeps_its_identity(name: str) -> None:
    cls = _class(name)
    assert wire_identity(cls) == WireIdentity(*EXPECTED[name])
    assert wire_identity(cls("message text")) == WireIdentity(*EXPECTED[name])
    error = error_body(cls("message text"))["error"]
    assert (error["code"], error["status"], error["details"][0]["reason"]) == EXPECTED[name]


def test_every_concrete_class_has_its_own_entry() -> None:
    assert {cls.__name__ for cls in WIRE_IDENTITIES} == set(EXPECTED)


def test_a_class_not_listed_answers_as_its_nearest_listed_base() -> None:
    class Narrower(errors.TaskNotFound):
        pass

    assert wire_identity(Narrower("x")) == WireIdentity(404, "NOT_FOUND", "TASK_NOT_FOUND")
    # The branches are not wire identities: they answer as the base, 500 INTERNAL.
    assert wire_identity(errors.Transient("x")) == WireIdentity(500, "INTERNAL", "INTERNAL")
    assert wire_identity(errors.Refused("x")) == WireIdentity(500, "INTERNAL", "INTERNAL")
