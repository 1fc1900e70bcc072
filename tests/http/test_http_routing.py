"""The route table and the app's error handlers (http/routing.py, http/app.py).

Every operation the path grammar can name is served: the public ones by the app
itself, the others by an endpoint bound to a handler with its body policy. Errors
are answered by one handler per family, through Quart's hooks: a TaskplaneError as
itself, anything unexpected logged and answered 500, and a trio exception group by
its leaf (quart-trio unwraps it). The plane here is a stub whose reads raise.
"""

from __future__ import annotations

import logging
import typing
from typing import Any

import httpx
import pytest

from taskplane.errors import TaskNotFound
from taskplane.http import routing
from taskplane.http.app import create_app
from taskplane.http.card import agent_card_json
from taskplane.http.handlers import Handlers
from taskplane.scope import Scope
from taskplane.server import edge_app
from tests.support.plane import PUBLIC_URL, credentials, in_process_client


class NeverCrowded:
    """Admission that never sends a request to the early refusal."""

    crowded = False


class RaisingPlane:
    """Stands in for the plane: never crowded, and every Task read raises ``error``."""

    admission = NeverCrowded()

    def __init__(self, error: BaseException) -> None:
        self.error = error

    async def get_task(self, scope: Scope, task_id: str) -> Any:
        raise self.error


def app_raising(error: BaseException, *, served: bool = False) -> Any:
    card = agent_card_json(public_url=PUBLIC_URL, name="t", description="t", version="1")
    handlers = Handlers(RaisingPlane(error), blocking_timeout_s=1)
    build = edge_app if served else create_app
    return build(handlers, credentials(), card, supported_extensions=())


def test_every_operation_is_public_or_bound_to_an_endpoint() -> None:
    bound = routing.endpoints(Handlers(RaisingPlane(RuntimeError()), blocking_timeout_s=1))
    assert set(bound).isdisjoint(routing.PUBLIC)
    # issue 17: the JSON-RPC front door dispatches to the bound operations themselves.
    assert routing.FRONT_DOORS.isdisjoint(set(bound) | routing.PUBLIC)
    assert set(bound) | routing.PUBLIC | routing.FRONT_DOORS == set(
        typing.get_args(routing.Operation)
    )
    assert set(routing.TEMPLATES) == set(typing.get_args(routing.Operation))


def test_only_sends_take_a_json_body_and_cancel_and_subscribe_may_omit_it() -> None:
    bound = routing.endpoints(Handlers(RaisingPlane(RuntimeError()), blocking_timeout_s=1))
    policies = {operation: endpoint.body for operation, endpoint in bound.items()}
    assert policies == {
        "send": "json",
        "stream": "json",
        "cancel": "json-or-empty",
        "subscribe": "json-or-empty",
        "list": "none",
        "get": "none",
        "push": "none",
        "extended_card": "none",
    }


@pytest.mark.parametrize(
    ("path", "operation", "tenant", "task_id"),
    [
        ("/tasks/abc:subscribe", "subscribe", "", "abc"),
        ("/tasks/abc:cancel", "cancel", "", "abc"),
        ("/tasks/abc", "get", "", "abc"),
        ("/acme/tasks/abc", "get", "acme", "abc"),
        ("/.well-known/agent-card.json", "card", "", None),
    ],
)
def test_match_reads_the_operation_tenant_and_task(
    path: str, operation: str, tenant: str, task_id: str | None
) -> None:
    route = routing.match("GET" if operation != "cancel" else "POST", path)
    assert (route.operation, route.tenant, route.task_id) == (operation, tenant, task_id)


async def test_a_taskplane_error_is_answered_as_itself() -> None:
    async with in_process_client(app_raising(TaskNotFound("no task t1"))) as client:
        response = await client.get("/tasks/t1")
    assert response.status_code == 404
    assert response.json()["error"]["details"][0]["reason"] == "TASK_NOT_FOUND"


async def test_an_unexpected_error_is_logged_and_answered_500(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="taskplane.http")
    async with in_process_client(app_raising(RuntimeError("bug"), served=True)) as client:
        response = await client.get("/tasks/t1")
    assert response.status_code == 500
    error = response.json()["error"]
    assert (error["status"], error["message"]) == ("INTERNAL", "internal error: RuntimeError")
    events = {getattr(r, "event", None): r for r in caplog.records}
    assert events["http_internal_error"].exc_info is not None
    access = events["http_request"]
    assert (access.status, access.reason, access.route) == (500, "INTERNAL", "/tasks/{id}")


async def test_an_exception_group_is_answered_by_its_leaf() -> None:
    group = ExceptionGroup("from a nursery", [TaskNotFound("no task t1")])
    async with in_process_client(app_raising(group)) as client:
        response = await client.get("/tasks/t1")
    assert response.status_code == 404
    assert response.json()["error"]["details"][0]["reason"] == "TASK_NOT_FOUND"


async def test_an_exception_group_of_bugs_is_answered_500() -> None:
    group = ExceptionGroup("from a nursery", [RuntimeError("bug")])
    async with in_process_client(app_raising(group)) as client:
        response = await client.get("/tasks/t1")
    assert response.status_code == 500
    assert response.json()["error"]["status"] == "INTERNAL"


async def test_the_bare_app_answers_without_its_middleware() -> None:
    transport = httpx.ASGITransport(app=app_raising(RuntimeError()))
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        response = await client.get("/healthz")
    assert response.status_code == 200


async def test_a_method_no_rule_takes_is_405_with_the_paths_allow() -> None:
    async with in_process_client(app_raising(RuntimeError(), served=True)) as client:
        response = await client.request("TRACE", "/tasks")
        unknown = await client.request("TRACE", "/nowhere")
    assert response.status_code == 405
    assert response.headers["Allow"] == "GET, HEAD"
    assert response.json()["error"]["details"][0]["reason"] == "METHOD_NOT_ALLOWED"
    assert unknown.status_code == 404
    assert unknown.json()["error"]["details"][0]["reason"] == "NOT_FOUND"


async def test_invented_methods_share_one_metrics_label_and_log_as_other(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = app_raising(RuntimeError(), served=True)
    caplog.set_level("INFO", logger="taskplane.http")
    async with in_process_client(app) as client:
        for i in range(30):
            assert (await client.request(f"ZZ{i}", "/nope")).status_code == 404
        assert (await client.request("Q" * 3000, "/nope")).status_code == 404
        scrape = (await client.get("/metrics")).text
    lines = [line for line in scrape.splitlines() if line.startswith("taskplane_http_requests")]
    assert not any("ZZ" in line or "QQ" in line for line in lines)
    assert any('method="other"' in line and "} 31.0" in line for line in lines), lines
    logged = [
        r.__dict__["method"] for r in caplog.records if r.__dict__.get("event") == "http_request"
    ]
    assert logged.count("other") == 31
