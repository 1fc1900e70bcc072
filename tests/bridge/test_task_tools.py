"""The task tools through the real plane: data parts as compact JSON, declared outputs
recorded before the response, invalid output sets recording nothing, and the
workflow manifest's selection and slug rules (upstream tool and manifest gates)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from taskplane.app import PlaneOptions, open_plane
from taskplane.bridge.manifest import (
    NO_OUTPUTS,
    ManifestError,
    WorkflowOutputs,
    load_manifest,
    parse_manifest,
)
from taskplane.bridge.scripted import ScriptedRuntime
from taskplane.bridge.tool_api import TaskTools
from taskplane.bridge.tools import clip
from taskplane.errors import ToolError
from taskplane.model.types import Message
from tests.support.plane import MANIFEST, auth, make_app

COMPLETED = "TASK_STATE_COMPLETED"
WORKING = "TASK_STATE_WORKING"

Turn = Callable[[str, TaskTools], Awaitable[None]]


class _Runtime(ScriptedRuntime):
    """Runs ``turn`` for every wake (no direct Messages)."""

    def __init__(self, turn: Turn) -> None:
        self.turn = turn

    def triage(self, message: Message) -> None:
        return None

    async def run_turn(self, task_id: str, prompt: str, tools: TaskTools) -> None:  # type: ignore[override]
        await self.turn(task_id, tools)


@asynccontextmanager
async def _client(
    root: Path, turn: Turn, outputs: WorkflowOutputs | None = None
) -> AsyncIterator[httpx.AsyncClient]:
    if outputs is None:
        outputs = parse_manifest(MANIFEST, None, where="tests")
    async with open_plane(
        root,
        public_url="http://127.0.0.1:8788",
        outputs=outputs,
        options=PlaneOptions(runtime=_Runtime(turn)),
    ) as plane:
        transport = httpx.ASGITransport(app=make_app(plane))
        async with httpx.AsyncClient(transport=transport, base_url="http://t", headers=auth()) as c:
            yield c


async def _send(
    client: httpx.AsyncClient, parts: list[dict[str, Any]], message_id: str
) -> dict[str, Any]:
    body = {"message": {"messageId": message_id, "role": "ROLE_USER", "parts": parts}}
    response = await client.post("/message:send", json=body)
    assert response.status_code == 200, response.text
    task: dict[str, Any] = response.json()["task"]
    return task


async def test_a_data_part_reaches_the_agent_as_compact_json(tmp_path: Path) -> None:
    seen: list[str] = []

    async def turn(task_id: str, tools: TaskTools) -> None:
        seen.append((await tools.a2a_read_task(task_id)).text)
        await tools.a2a_complete_task(task_id, "read")

    data = {"repo": "octo/cat", "numbers": [1, 2], "nested": {"ok": True, "é": None}}
    async with _client(tmp_path, turn) as client:
        await _send(client, [{"text": "see data"}, {"data": data}], "data-1")
    lines = seen[0].splitlines()
    assert '| {"repo":"octo/cat","numbers":[1,2],"nested":{"ok":true,"é":null}}' in lines
    assert json.loads(lines[lines.index("| see data") + 1][2:]) == data


async def test_a2a_complete_task_records_declared_outputs_before_the_response(
    tmp_path: Path,
) -> None:
    async def turn(task_id: str, tools: TaskTools) -> None:
        await tools.a2a_complete_task(
            task_id, "opened", outputs=[{"output": "pull-request", "value": {"number": 9}}]
        )

    async with _client(tmp_path, turn) as client:
        task = await _send(client, [{"text": "ship it"}], "outputs-1")
    assert task["status"]["state"] == COMPLETED
    assert [a["artifactId"] for a in task["artifacts"]] == [
        f"output-pull-request-{task['id']}",
        f"response-{task['id']}",
    ]
    assert task["artifacts"][0]["parts"] == [{"data": {"number": 9}}]


INVALID_OUTPUT_SETS = [
    pytest.param(
        {"outcome": "rejected", "outputs": [{"output": "pull-request", "value": {"n": 1}}]},
        None,
        "rejected",
        id="outputs-with-rejected",
    ),
    pytest.param(
        {
            "outputs": [
                {"output": "pull-request", "value": {"n": 1}},
                {"output": "pull-request", "value": {"n": 2}},
            ]
        },
        None,
        "once",
        id="duplicate-output-name",
    ),
    pytest.param(
        {
            "outputs": [
                {"output": "pull-request", "value": {"n": 1}},
                {"output": "release", "value": {"n": 2}},
            ]
        },
        None,
        "not declared",
        id="undeclared-output",
    ),
    pytest.param(
        {"outputs": [{"output": "pull-request", "value": {"n": 1}}]},
        NO_OUTPUTS,
        "set A2A_WORKFLOW_MANIFEST",
        id="no-manifest-loaded",
    ),
]


@pytest.mark.parametrize(("arguments", "outputs", "message"), INVALID_OUTPUT_SETS)
async def test_invalid_output_sets_record_nothing(
    tmp_path: Path, arguments: dict[str, Any], outputs: WorkflowOutputs | None, message: str
) -> None:
    refusals: list[ToolError] = []
    after: list[dict[str, Any]] = []

    async def turn(task_id: str, tools: TaskTools) -> None:
        try:
            await tools.a2a_complete_task(task_id, "done", **arguments)
        except ToolError as exc:
            refusals.append(exc)
        task = (await tools.a2a_read_task(task_id)).details["task"]
        after.append({"state": task.status.state.name, "artifacts": len(task.artifacts)})
        await tools.a2a_complete_task(task_id, "finished without outputs")

    async with _client(tmp_path, turn, outputs) as client:
        task = await _send(client, [{"text": "try"}], "invalid-1")
    assert len(refusals) == 1 and message in str(refusals[0])
    assert after == [{"state": WORKING, "artifacts": 0}]
    assert [a["name"] for a in task["artifacts"]] == ["response"]


def _manifest(tmp_path: Path, document: object) -> str:
    path = tmp_path / "workflow-composition.json"
    path.write_text(json.dumps(document))
    return str(path)


def _workflow(wid: str, outputs: dict[str, Any]) -> dict[str, Any]:
    return {"id": wid, "outputs": outputs}


PR = {"from": "open-pr", "type": "pull-request"}


def test_workflow_outputs_load_for_absent_single_and_named_workflows(tmp_path: Path) -> None:
    assert load_manifest(None, None) == NO_OUTPUTS
    single = _manifest(tmp_path, {"workflows": [_workflow("ship", {"pull-request": PR})]})
    assert load_manifest(single, None) == WorkflowOutputs("ship", {"pull-request": "pull-request"})
    two = _manifest(
        tmp_path,
        {"workflows": [_workflow("ship", {"pull-request": PR}), _workflow("triage", {})]},
    )
    assert load_manifest(two, "triage") == WorkflowOutputs("triage", {})
    with pytest.raises(ManifestError, match="2 workflows; set A2A_WORKFLOW"):
        load_manifest(two, None)
    with pytest.raises(ManifestError, match="no workflow with id 'missing'"):
        load_manifest(two, "missing")


@pytest.mark.parametrize(
    ("outputs", "message"),
    [
        ({"Pull_Request": PR}, "output name 'Pull_Request' is not a slug"),
        ({"pr": {"from": "x", "type": "Pull Request"}}, "type 'Pull Request' is not a slug"),
        ({"pr": {"from": "x", "type": 7}}, "type 7 is not a slug"),
        ({"-pr": PR}, "is not a slug"),
    ],
)
def test_non_slug_output_names_and_types_are_rejected(
    tmp_path: Path, outputs: dict[str, Any], message: str
) -> None:
    path = _manifest(tmp_path, {"workflows": [_workflow("ship", outputs)]})
    with pytest.raises(ManifestError, match=message):
        load_manifest(path, None)


def test_only_the_selected_workflow_is_validated(tmp_path: Path) -> None:
    document = {
        "workflows": [_workflow("ship", {"pull-request": PR}), _workflow("bad", {"Bad Name": PR})]
    }
    assert load_manifest(_manifest(tmp_path, document), "ship").outputs == {
        "pull-request": "pull-request"
    }


def test_clip_keeps_a_short_text_and_marks_a_cut_one_within_the_limit() -> None:
    assert clip("short", 10) == "short"
    cut = clip("z" * 5_000, 2_000)
    assert len(cut) <= 2_000
    kept = cut.index("\n[")
    assert cut == "z" * kept + f"\n[{5_000 - kept} more characters cut]"
