"""Leaders: work that only one node of a shared store does at a time, under a lease.

Design rule "Leader work runs under a lease": each native source
(``source:<name>``: one node polls the provider or holds its socket), the result
deliverer (``deliverer``) and store maintenance (``maintenance``) run on the node
that holds their lease (:mod:`taskplane.store.postgres.leases`: database time, an
epoch per term). :meth:`Leadership.lead` competes for a lease and runs its child
only while it holds it:

- it tries to acquire every third of the lease length, and starts the child (a
  fresh *term*, with the lease's epoch as :attr:`Term.fence`) once it has;
- it renews every third of the lease length; each renewal that succeeds moves the
  term's deadline to ``sent + ttl - margin`` on the monotonic clock (``sent``: when
  the renewal was sent, which is before the database computed its new expiry), so
  a node that cannot renew, whatever the reason (the database is unreachable, the
  process was paused), cancels its child *before* the lease can expire on database
  time and move to another node;
- a renewal the database refuses (the lease moved), or a fenced write the child
  reports (:meth:`Term.deposed`), ends the term at once;
- after a term ends that way it competes again (a new term has a higher epoch, so
  writes of the old one are refused). A child that returns, or raises, ends the
  leadership: the lease is released (so another node may take it without waiting
  for it to expire) and the return or the error is the caller's.

Time is trio's clock (a ``MockClock`` in tests). On a SQLite store there are no
leases: the composition root runs the same children directly.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import attrs
import trio

from taskplane.cluster.counters import ClusterCounters
from taskplane.store.source_store import LeaseFence

log = logging.getLogger("taskplane.cluster")

MARGIN_FRACTION = 0.2
"""The part of the lease length a term ends before its lease could expire (clock
drift between this node and the database, and the time a cancelled child takes)."""
RELEASE_TIMEOUT_FRACTION = 1 / 3
"""How long (as a part of the lease length) a release may take before it is given up
(the lease then simply expires)."""


class LeaseStore(Protocol):
    """The leases of one node on the shared store (each call is one transaction on
    database time; each may raise ``StoreUnavailable``)."""

    node_id: str

    async def acquire(self, name: str, ttl_s: float) -> int | None:
        """The new epoch of lease ``name``, now this node's for ``ttl_s`` seconds, or
        ``None`` while another node holds it."""
        ...

    async def renew(self, name: str, epoch: int, ttl_s: float) -> bool:
        """Extend this node's lease at ``epoch``; ``False`` if it is no longer held."""
        ...

    async def release(self, name: str, epoch: int) -> None:
        """End this node's lease at ``epoch`` now."""
        ...


@attrs.define(eq=False)
class Term:
    """One node's hold of one lease, from acquisition to loss.

    Attributes:
        fence: the lease and epoch every write of this term is fenced by.
        lost: the term ended because the lease moved or could not be renewed.
    """

    fence: LeaseFence
    _scope: trio.CancelScope
    lost: bool = False

    def deposed(self) -> None:
        """A write fenced by this term was refused (the lease moved): end the term
        now; the leader competes again."""
        self.lost = True
        self._scope.cancel()


Child = Callable[..., Awaitable[object]]
"""A leader's work, called as ``await child(term, task_status=...)`` once per term."""


@attrs.frozen
class Leadership:
    """Competes for leases on ``leases`` with lease length ``ttl_s`` seconds;
    ``counters.leader_terms`` counts the terms it starts."""

    leases: LeaseStore
    ttl_s: float
    counters: ClusterCounters = attrs.Factory(ClusterCounters)

    @property
    def period_s(self) -> float:
        """Seconds between two acquisition attempts, and between two renewals."""
        return self.ttl_s / 3

    @property
    def margin_s(self) -> float:
        """Seconds a term ends before its last renewal's lease could expire."""
        return self.ttl_s * MARGIN_FRACTION

    async def lead(
        self,
        name: str,
        child: Child,
        *,
        task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Run ``child`` whenever this node holds lease ``name`` (see the module).

        ``task_status.started()`` is called once: when the first term's child calls
        its own ``started(value)`` (``value`` forwarded), or as soon as this node
        finds the lease held elsewhere or the store unreachable (it follows).

        Returns when a term's child returns. Raises what a term's child raises
        (the lease released first). Cancel-safe: cancelling ends the term and
        releases the lease (shielded, bounded).
        """
        status = _Once(task_status)
        while True:
            sent = trio.current_time()
            try:
                epoch = await self.leases.acquire(name, self.ttl_s)
            except Exception as exc:  # the store is away: follow, retry
                log.warning(
                    "lease %s could not be acquired: %s",
                    name,
                    exc,
                    extra={"event": "lease_unavailable", "lease": name, "error": str(exc)},
                )
                epoch = None
            if epoch is None:
                status.started(None)
                await trio.sleep(self.period_s)
                continue
            self.counters.leader_terms += 1
            log.info(
                "node %s leads %s (epoch %d)",
                self.leases.node_id,
                name,
                epoch,
                extra={
                    "event": "leader_elected",
                    "lease": name,
                    "epoch": epoch,
                    "node": self.leases.node_id,
                },
            )
            if await self._term(name, epoch, sent, child, status):
                return
            log.warning(
                "node %s no longer leads %s (epoch %d)",
                self.leases.node_id,
                name,
                epoch,
                extra={
                    "event": "leader_deposed",
                    "lease": name,
                    "epoch": epoch,
                    "node": self.leases.node_id,
                },
            )

    async def _term(self, name: str, epoch: int, sent: float, child: Child, status: _Once) -> bool:
        """Run one term; ``True`` when the child returned (leadership ends), ``False``
        when the lease was lost (compete again). Raises what the child raised."""
        scope = trio.CancelScope(deadline=sent + self.ttl_s - self.margin_s)
        term = Term(LeaseFence(name, self.leases.node_id, epoch), scope)
        finished = False
        try:
            with scope:
                async with trio.open_nursery() as nursery:

                    async def run_child(
                        *, task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED
                    ) -> None:
                        nonlocal finished
                        await child(term, task_status=task_status)
                        finished = True
                        nursery.cancel_scope.cancel()  # stop renewing

                    nursery.start_soon(self._renew, term, scope)
                    if status.pending:
                        status.started(await nursery.start(run_child))
                    else:
                        nursery.start_soon(run_child)
        except BaseExceptionGroup as group:
            raise _single(group) from None
        finally:
            await self._release(name, epoch)
        if finished:
            return True
        term.lost = True
        return False

    async def _renew(self, term: Term, scope: trio.CancelScope) -> None:
        """Renew every :attr:`period_s` until the lease is lost (cancels the term)."""
        name, epoch = term.fence.name, term.fence.epoch
        while True:
            await trio.sleep(self.period_s)
            sent = trio.current_time()
            try:
                held = await self.leases.renew(name, epoch, self.ttl_s)
            except Exception as exc:  # retried; the deadline bounds it
                log.warning(
                    "lease %s could not be renewed: %s",
                    name,
                    exc,
                    extra={"event": "lease_renewal_failed", "lease": name, "error": str(exc)},
                )
                continue
            if not held:
                term.lost = True
                scope.cancel()
                return
            scope.deadline = max(scope.deadline, sent + self.ttl_s - self.margin_s)

    async def _release(self, name: str, epoch: int) -> None:
        with trio.CancelScope(shield=True):
            with trio.move_on_after(self.ttl_s * RELEASE_TIMEOUT_FRACTION):
                try:
                    await self.leases.release(name, epoch)
                except Exception as exc:  # the lease expires on its own
                    log.warning(
                        "lease %s could not be released: %s",
                        name,
                        exc,
                        extra={"event": "lease_release_failed", "lease": name},
                    )


def _single(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The one error a term's nursery raised (only the child raises; the renewal loop
    never does), as the child raised it; the group itself if there are several."""
    leaves: list[BaseException] = []
    pending: list[BaseException] = [group]
    while pending:
        exc = pending.pop()
        if isinstance(exc, BaseExceptionGroup):
            pending.extend(exc.exceptions)
        else:
            leaves.append(exc)
    return leaves[0] if len(leaves) == 1 else group


class _Once:
    """Calls ``started`` on a task status at most once."""

    def __init__(self, task_status: trio.TaskStatus[Any]) -> None:
        self._status = task_status
        self.pending = True

    def started(self, value: object) -> None:
        if self.pending:
            self.pending = False
            self._status.started(value)
