"""The rows an acceptance writes beside its Task: the CLAIM record (and the
:class:`Claim` read back from it), the origin with its ``outfitter-task/v1`` locator,
the ``task.activation`` evidence, and the stored JSON of every journal and
evidence record.

Pure functions (no connection): every backend's acceptance paths build their rows
here, so the CLAIM, origin and evidence shapes are one rule in one place.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import attrs

from taskplane.store.records import Activation, EvidenceRecord, Locator, short_hash


def claim_record(
    act: Activation,
    route: str,
    task_id: str | None,
    context_id: str | None,
    outcome_json: str | None,
    now_ms: int,
) -> dict[str, object]:
    """The CLAIM's fields: the dedupe authority (provider key, digest, route, input)."""
    record: dict[str, object] = {
        "providerKey": act.provider_key,
        "taskId": task_id,
        "contextId": context_id,
        "intendedRoute": route,
        "digest": act.digest,
        "input": {
            "principal": act.scope.principal,
            "tenant": act.scope.tenant,
            "source": act.source,
            "providerEventId": act.dedupe_key,
            "conversationKey": act.conversation_key,
            "receivedAt": act.received_at_ms,
        },
        "claimedAt": now_ms,
    }
    if outcome_json is not None:
        record["outcome"] = outcome_json
    return record


def origin(act: Activation, locator: Locator, task_id: str) -> tuple[str, dict[str, str]]:
    """The origin id and ``taskLocator`` of ``act``'s Task ``task_id``."""
    origin_id = "origin-" + short_hash(
        act.activation_id,
        locator.agent_interface,
        locator.protocol_binding,
        locator.protocol_version,
        act.scope.tenant,
        task_id,
    )
    return origin_id, locator.for_task(act.scope.tenant, task_id)


def activation_evidence(
    act: Activation, task_id: str, task_locator: dict[str, str]
) -> EvidenceRecord:
    """The ``task.activation`` evidence of ``act`` (digest and locator)."""
    return EvidenceRecord(
        "task.activation",
        {
            "activationId": act.activation_id,
            "taskId": task_id,
            "contentDigest": act.digest,
            "locator": task_locator,
        },
        activation_id=act.activation_id,
        task_id=task_id,
    )


def record_json(kind: str, activation: str, record: Mapping[str, Any]) -> str:
    """The stored JSON of one journal record (``kind`` and ``activationId`` added)."""
    return json.dumps({"kind": kind, "activationId": activation, **record}, sort_keys=True)


def evidence_json(record: EvidenceRecord, now_ms: int) -> str:
    """The stored JSON of one evidence record (``recordType``, ``recordedAt`` added)."""
    fields = {"recordType": record.record_type, **record.fields, "recordedAt": now_ms}
    return json.dumps(fields, sort_keys=True)


@attrs.frozen
class Claim:
    """A stored CLAIM: who claimed what, and the outcome a duplicate gets back.

    Attributes:
        route: ``"created"``, ``"continued"`` or ``"direct"`` (a direct Message reply).
        task_id: the Task created or continued (``None`` for ``direct``).
        outcome_message_json: the direct reply Message, ProtoJSON, verbatim.
    """

    activation_id: str
    digest: str
    route: str
    task_id: str | None
    context_id: str | None
    outcome_message_json: str | None


def read_claim(activation_id: str, stored_json: str) -> Claim:
    """The :class:`Claim` of a CLAIM row (its activation id and stored JSON, as
    :func:`claim_record` and :func:`record_json` wrote it)."""
    record = json.loads(stored_json)
    return Claim(
        activation_id=activation_id,
        digest=record["digest"],
        route=record["intendedRoute"],
        task_id=record.get("taskId"),
        context_id=record.get("contextId"),
        outcome_message_json=record.get("outcome"),
    )
