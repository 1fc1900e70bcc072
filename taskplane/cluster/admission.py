"""Admission to the wake queue shared by every node: the same questions, answered
from what this node last read of the cluster-wide bound.

Design rule "Wake admission is bounded", on several nodes: the bound itself is exact
and lives in the database (each acceptance takes one of ``WAKE_QUEUE_SIZE`` slot rows
in its own transaction, or records nothing and answers 503:
:mod:`taskplane.store.postgres.wakes`). What the HTTP edge and intake ask before that
(:class:`~taskplane.actors.admission_contract.AdmissionGate`,
:class:`~taskplane.actors.admission_contract.IntakeGate`) must cost no round trip, so
:class:`ClusterAdmission` answers from :class:`SharedBound`: the slots taken at the
cluster wake actor's last read (every ``POLL_S``, 250 ms, on a claim of the periodic
poll), plus this node's acceptances committing now, plus those it saw commit since,
less the slots its own claims freed since. It may be
stale by one poll: a send let through to a bound that filled meanwhile is refused by
the database (503, nothing recorded); a send refused early waits for a slot first
(``ADMISSION_WAIT_S``), and each read that finds free slots wakes the waiting senders.

The claim index stays per node (:mod:`taskplane.actors.claim_filter`); claims made
through other nodes reach it through :meth:`ClusterAdmission.claimed`. The states,
verdicts, carrying, pacing and parking are one process's
(:class:`~taskplane.actors.admission.Admission`), unchanged.
"""

from __future__ import annotations

from taskplane.actors import wake_queue
from taskplane.actors.admission import Admission
from taskplane.actors.admission_limits import WAKE_QUEUE_SIZE
from taskplane.actors.owner_client import OwnerClient
from taskplane.actors.wake_queue import Wake, WakeQueue
from taskplane.bridge.runtime import AgentRuntime


class SharedBound(WakeQueue):
    """The cluster-wide bound as this node knows it: a :class:`WakeQueue` that holds no
    wakes, whose ``waiting`` is the slots taken at the last read (:meth:`seen`), plus
    those this node's committed acceptances took since (:meth:`used`), less those its
    claims freed since (:meth:`freed`), plus the reservations of its acceptances
    committing now (``reserved``)."""

    def __init__(self, limit: int = WAKE_QUEUE_SIZE) -> None:
        super().__init__(limit)
        self.taken = 0

    @property
    def waiting(self) -> int:
        """Slots taken as last known, reserved ones included."""
        return self.taken + self.reserved

    def seen(self, taken: int) -> None:
        """A read of the database found ``taken`` slots taken."""
        self.taken = taken

    def freed(self, slots: int) -> None:
        """This node's claims freed ``slots`` slots since the last read."""
        self.taken = max(0, self.taken - slots)

    def used(self) -> None:
        """A reservation's acceptance committed: its wake holds a slot now."""
        self.release()
        self.taken += 1

    def admit(
        self, wake: Wake, *, reserved: bool = False, force: bool = False
    ) -> wake_queue.Admission:
        """Never called: wakes are rows (the database admits them)."""
        raise NotImplementedError("the shared bound holds no wakes")


class ClusterAdmission(Admission):
    """:class:`~taskplane.actors.admission.Admission` over :class:`SharedBound`:
    implements both gates with their guarantees (nothing synchronous does I/O; the
    bound's answers come from the last read). A wake never overflows here: the
    database refuses the acceptance instead."""

    def __init__(self, bound: SharedBound, owners: OwnerClient, runtime: AgentRuntime) -> None:
        super().__init__(bound, owners, runtime)
        self.bound = bound

    def seen(self, taken: int) -> None:
        """A read found ``taken`` slots taken: remember it and give each free slot to
        a sender waiting for one."""
        self.bound.seen(taken)
        self.signal_room()

    def freed(self, slots: int) -> None:
        """This node's claims freed ``slots`` slots (between two reads): give each
        to a sender waiting for one."""
        if slots:
            self.bound.freed(slots)
            self.signal_room()
