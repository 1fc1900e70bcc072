"""taskplane/errors.py: errors grouped by what the caller can do.

A caller picks a branch with ``isinstance``: ``Transient`` (retry the same request
later), ``Refused`` (the request itself is refused), or neither (a fault). The tree
drawn in the module docstring names every class, and no class carries a wire
identity (that is ``taskplane.http.errors``).
"""

from __future__ import annotations

import re

import pytest

import taskplane.actors.outbound as outbound
import taskplane.errors as errors
from taskplane.errors import Refused, TaskplaneError, Transient

TRANSIENT = {
    "VersionConflict",
    "Overloaded",
    "StoreUnavailable",
    "ActorGone",
    "ProviderUnavailable",
    "DeliveryFailed",
    "RequestTimeout",
}
REFUSED = {
    "InvalidRequest",
    "Unauthenticated",
    "RouteNotFound",
    "MethodNotAllowed",
    "MethodNotImplemented",
    "UpgradeNotSupported",
    "DuplicateMessageId",
    "PayloadTooLarge",
    "UnsupportedMediaType",
    "TaskNotFound",
    "TaskNotCancelable",
    "PushNotificationNotSupported",
    "UnsupportedOperation",
    "VersionNotSupported",
    "ToolError",
    "DeliveryConflict",
}
NEITHER = {"Internal", "Fenced", "StoreLocked", "StoreVersionError", "DeliveryAmbiguous"}


def _classes() -> dict[str, type[TaskplaneError]]:
    found: dict[str, type[TaskplaneError]] = {}
    for module in (errors, outbound):
        for name, value in vars(module).items():
            if (
                isinstance(value, type)
                and issubclass(value, TaskplaneError)
                and value.__module__ == module.__name__
                and value not in (TaskplaneError, Transient, Refused)
            ):
                found[name] = value
    return found


def test_every_error_class_is_in_exactly_one_expected_group() -> None:
    assert set(_classes()) == TRANSIENT | REFUSED | NEITHER
    assert not (TRANSIENT & REFUSED or TRANSIENT & NEITHER or REFUSED & NEITHER)


@pytest.mark.parametrize("name", sorted(TRANSIENT | REFUSED | NEITHER))
def test_isinstance_picks_the_branch(name: str) -> None:
    exc = _classes()[name]("message text")
    assert isinstance(exc, TaskplaneError)
    assert isinstance(exc, Transient) is (name in TRANSIENT)
    assert isinstance(exc, Refused) is (name in REFUSED)
    assert exc.message == str(exc) == "message text"


def test_the_branches_are_disjoint() -> None:
    assert not issubclass(Transient, Refused) and not issubclass(Refused, Transient)


def test_transient_conditions_say_when_to_retry() -> None:
    assert errors.Overloaded("full").retry_after_s == 1
    assert errors.StoreUnavailable("disk").retry_after_s == 1
    assert errors.Overloaded("full", retry_after_s=3).retry_after_s == 3
    assert errors.ActorGone("gone").retry_after_s is None


@pytest.mark.parametrize("name", sorted(TRANSIENT | REFUSED | NEITHER | {"Transient", "Refused"}))
def test_no_error_class_carries_a_wire_identity(name: str) -> None:
    cls = _classes().get(name) or getattr(errors, name)
    for attribute in ("http_status", "grpc_status", "reason"):
        assert not hasattr(cls, attribute), f"{name}.{attribute}"


def test_the_docstring_tree_names_every_class() -> None:
    doc = errors.__doc__ or ""
    drawn = set(re.findall(r"[├└]── (\w+)", doc))
    assert drawn == TRANSIENT | REFUSED | NEITHER | {"Transient", "Refused"}
