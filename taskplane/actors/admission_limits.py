"""Every admission threshold of the plane, in one place.

Design rule "Wake admission is bounded" (and bounded inboxes): is there room for new
work, and if not, does it wait or is it refused? The thresholds that answer it are
defined here and nowhere else; :class:`taskplane.actors.admission.Admission` applies
them, the wake queue and the intake mailbox take their bounds from here.

A leaf module (no imports), so the pure wake queue can use its bound without
depending on the admission object.
"""

from __future__ import annotations

WAKE_QUEUE_SIZE = 128
"""Wakes that may wait behind the running turns (count), reserved slots included.
New work that would pass it waits for a slot or is refused with 503."""

ADMISSION_WAIT_S = 1.0
"""Seconds a send of new work may wait, parked, for a free waiting slot before its 503."""

MAX_ADMISSION_WAITERS = 128
"""Senders that may wait for a slot at once (count); beyond that admission is *closed*
and new work is refused at once."""

CROWDED_WAITERS = 32
"""Senders waiting for a slot (count) from which the plane is *crowded*: further new
work waits at the HTTP edge instead. A few waiting in intake (a busy but not
overloaded server) is cheaper than the edge's extra parse and hand-off; many is what
clients ignoring ``Retry-After`` produce."""

MAX_OVERFLOW_BACKLOG = 1024
"""Overflowed wakes buffered for their durable record (count); beyond that a wake is
left accepted and unwoken, so the next start replays it."""

REFUSALS_PER_S = 200.0
"""Early refusals answered per second at most (refusals/s). Sends of new work beyond
that wait their turn at the edge, parked in arrival order (no CPU)."""

MAX_PARKED_BYTES = 64 * 1024 * 1024
"""Request bodies held by sends waiting their turn at the edge, at most (bytes). A send
whose body would pass it is refused at once, unpaced."""

MAX_CARRIED_VERDICTS = 256
"""Verdicts of sends the edge let through, kept for the plane's own check of the same
send (count); beyond it the oldest is dropped and that send is triaged again."""

INTAKE_INBOX_SIZE = 512
"""Sends that may wait in the intake actor's inbox (count); a send beyond it is refused
with 503 at once (every inbox is bounded)."""

INTAKE_CONCURRENCY = 256
"""Sends the intake actor accepts concurrently (count); the others wait in its inbox."""
