"""Outbound delivery records, ``prepared -> sending -> delivered | failed |
ambiguous``, once for every backend: the portable statements (``?`` parameters) and
their parameters. A move to a state is an upsert on the delivery id that keeps the
delivery's identity and payload policy and replaces its state, response and error.
An operator resolves only an ``ambiguous`` delivery (:func:`resolution`).
"""

from __future__ import annotations

from taskplane.errors import InvalidRequest
from taskplane.store.records import Delivery, DeliveryState

LOAD = (
    "SELECT delivery_id, payload_digest, state, provider_response_id, error"
    " FROM deliveries WHERE delivery_id = ?"
)
"""One delivery's :class:`~taskplane.store.records.DeliveryRecord` columns; the
parameter is its id."""

SAVE = (
    "INSERT INTO deliveries (delivery_id, task_id, source, operation_id, payload_digest,"
    " recovery, payload_policy, state, provider_response_id, error, updated_at_ms)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (delivery_id) DO UPDATE SET state = excluded.state,"
    " provider_response_id = excluded.provider_response_id, error = excluded.error,"
    " updated_at_ms = excluded.updated_at_ms"
)
"""Insert or move a delivery; its parameters are :func:`save_params`."""


def save_params(
    delivery: Delivery,
    state: DeliveryState,
    now_ms: int,
    response_id: str | None,
    error: str | None,
) -> tuple[object, ...]:
    """The parameters of :data:`SAVE` that put ``delivery`` in ``state`` at ``now_ms``."""
    return (
        delivery.delivery_id,
        delivery.task_id,
        delivery.source,
        delivery.operation_id,
        delivery.payload_digest,
        delivery.recovery,
        delivery.payload_policy,
        state,
        response_id,
        error,
        now_ms,
    )


def resolution(
    delivery_id: str, current: str | None, delivered_as: str | None
) -> tuple[DeliveryState, str | None]:
    """The ``(state, error)`` an operator's resolution moves a delivery to: only an
    ``ambiguous`` delivery is resolved, to ``delivered`` (with the provider response
    ``delivered_as``) or to ``failed`` (sent again).

    Args:
        current: the delivery's state (``None``: no such delivery).
    Raises:
        InvalidRequest: no such delivery, or it is not ``ambiguous``.
    """
    if current is None:
        raise InvalidRequest(f"delivery {delivery_id} does not exist")
    if current != "ambiguous":
        raise InvalidRequest(f"delivery {delivery_id} is {current}, not ambiguous")
    if delivered_as is not None:
        return "delivered", None
    return "failed", "resolved by the operator: send again"


RESOLVE = (
    "UPDATE deliveries SET state = ?, provider_response_id = ?, error = ?,"
    " updated_at_ms = ? WHERE delivery_id = ?"
)
"""Apply a :func:`resolution`: parameters ``(state, delivered_as, error, now_ms,
delivery_id)``."""
