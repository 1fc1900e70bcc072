"""The workflow manifest: which outputs a Task may record (the contracts).

``A2A_WORKFLOW_MANIFEST`` names an exported ``workflow-composition.json``;
``A2A_WORKFLOW`` selects a workflow ``id`` when the manifest holds more than one. Only
the selected workflow is validated: every output name and type must match
:data:`SLUG`. A manifest that breaks a rule fails to load and is logged as
``a2a_workflow_manifest_load_failed`` (design rule "Output artifacts").
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from pathlib import Path

import attrs

log = logging.getLogger("taskplane.bridge.manifest")

SLUG = re.compile(r"^[a-z][a-z0-9]*(?:[._-][a-z0-9]+)*$")


class ManifestError(ValueError):
    """The manifest is unreadable or breaks a rule; the message says which."""


@attrs.frozen
class WorkflowOutputs:
    """The declared outputs of the selected workflow: name -> type slug."""

    workflow_id: str | None
    outputs: Mapping[str, str]

    def type_of(self, name: str) -> str | None:
        """The declared type of output ``name``, or ``None`` if undeclared."""
        return self.outputs.get(name)


NO_OUTPUTS = WorkflowOutputs(None, {})


def parse_manifest(document: object, workflow: str | None, *, where: str) -> WorkflowOutputs:
    """The outputs of ``workflow`` in a parsed manifest ``document``.

    Raises:
        ManifestError: wrong shape, unknown/ambiguous workflow, or a non-slug name/type.
    """
    workflows = document.get("workflows") if isinstance(document, dict) else None
    if not isinstance(workflows, list) or not all(isinstance(w, dict) for w in workflows):
        raise ManifestError(f"{where}: expected an object with a 'workflows' array of objects")
    if workflow is not None:
        chosen = [w for w in workflows if w.get("id") == workflow]
        if not chosen:
            raise ManifestError(f"{where}: no workflow with id {workflow!r} (A2A_WORKFLOW)")
    elif len(workflows) != 1:
        raise ManifestError(f"{where}: {len(workflows)} workflows; set A2A_WORKFLOW to choose one")
    else:
        chosen = workflows
    entry = chosen[0]
    if not isinstance(entry.get("id"), str):
        raise ManifestError(f"{where}: workflow id must be a string")
    outputs = entry.get("outputs", {})
    if not isinstance(outputs, dict):
        raise ManifestError(f"{where}: workflow {entry['id']!r} outputs must be an object")
    declared: dict[str, str] = {}
    for name, spec in outputs.items():
        kind = spec.get("type") if isinstance(spec, dict) else None
        if not SLUG.match(name):
            raise ManifestError(f"{where}: output name {name!r} is not a slug ({SLUG.pattern})")
        if not isinstance(kind, str) or not SLUG.match(kind):
            raise ManifestError(f"{where}: output {name!r} type {kind!r} is not a slug")
        declared[name] = kind
    return WorkflowOutputs(entry["id"], declared)


def load_manifest(path: str | None, workflow: str | None) -> WorkflowOutputs:
    """Load the manifest at ``path`` (blocking file read; call at startup).

    Returns :data:`NO_OUTPUTS` when ``path`` is unset.
    Raises:
        ManifestError: after logging ``a2a_workflow_manifest_load_failed``.
    """
    if not path:
        return NO_OUTPUTS
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
        return parse_manifest(document, workflow, where=path)
    except (OSError, ValueError) as exc:
        log.error(
            "workflow manifest %s failed to load: %s",
            path,
            exc,
            extra={"event": "a2a_workflow_manifest_load_failed", "path": path},
        )
        raise ManifestError(str(exc)) from exc
