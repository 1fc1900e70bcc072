"""ListTasks ordering and page tokens, the same for every store backend.

Tasks are listed newest ``status.timestamp`` first (ties: greater task id first).
Each backend stores the timestamp as :func:`status_ts` (RFC 3339, UTC, millisecond
precision), whose byte order is time order, and compares it and the task id
bytewise. A page token is the (timestamp, task id) of the last Task on the page,
opaque to clients: base64url of a JSON pair, without padding.
"""

from __future__ import annotations

import base64
import binascii
import json
from datetime import UTC, datetime

from taskplane.errors import InvalidRequest
from taskplane.model.types import Task


def format_ts(value: datetime) -> str:
    """``value`` as sortable RFC 3339 text (UTC, ms), e.g. ``2027-01-15T08:00:00.000Z``."""
    value = value.astimezone(UTC)
    return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"


def status_ts(task: Task) -> str:
    """The sortable RFC 3339 (ms, UTC) form of ``task.status.timestamp``."""
    return format_ts(task.status.timestamp or datetime.fromtimestamp(0, UTC))


def encode_token(ts: str, task_id: str) -> str:
    """The page token that resumes after the Task (``ts``, ``task_id``)."""
    raw = json.dumps([ts, task_id], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_token(token: str) -> tuple[str, str]:
    """The (timestamp, task id) cursor of ``token``.

    Raises:
        InvalidRequest: ``token`` is not one this server issued.
    """
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        ts, task_id = json.loads(raw)
        if isinstance(ts, str) and isinstance(task_id, str):
            return ts, task_id
    except (binascii.Error, ValueError, TypeError):
        pass
    raise InvalidRequest(
        "pageToken is not a token this server issued",
        field_violations=[("pageToken", "unknown page token")],
    )
