"""Recording one acknowledgement of an accepted provider item (a receipt reaction, a
notification marked read) through the plane.

The acknowledgement is a provider mutation at most once
(:meth:`~taskplane.sources.base.SourceContext.deliver`). Design rule "Failure is
visible": a transient failure is raised, so the caller retries the item that needs
it; a definite refusal does not undo the accepted Task, so it is logged once as
``source_ack_failed`` and the item counts as taken. Which errors are transient is each
source's own ``retry_later``; what the mutation is stays in the source."""

from __future__ import annotations

import logging
from collections.abc import Callable

from taskplane.actors.outbound import Send
from taskplane.sources.base import SourceContext


async def acknowledge(
    ctx: SourceContext,
    task_id: str,
    operation_id: str,
    payload: str,
    send: Send,
    *,
    retry_later: Callable[[BaseException], bool],
    log: logging.Logger,
    what: str,
    source: str,
) -> None:
    """``ctx.deliver(task_id, operation_id, payload, send)``; a refusal is logged.

    Args:
        what: the acknowledgement's name in the warning (``"the receipt of post <id>"``).
        source: the source's name in the warning's ``source`` field.

    Raises:
        the delivery's error when ``retry_later`` keeps it (nothing is logged then).
    """
    try:
        await ctx.deliver(task_id, operation_id, payload, send)
    except Exception as exc:
        if retry_later(exc):
            raise
        log.warning(
            "%s was refused: %s",
            what,
            exc,
            extra={"event": "source_ack_failed", "source": source},
        )
