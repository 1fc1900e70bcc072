"""What to supervise and how hard to try: restart types, restart policy, child specs.

The vocabulary follows the OTP supervisor design principles (``sup_princ``), mapped onto
trio (docs/design-rules.md): a child is an actor-shaped async callable, a restart is a fresh
call of that callable, and "the supervisor gives up" is an exception raised into the
parent nursery. Nothing here touches trio at runtime; the types are plain records.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable
from typing import Any

import attrs

from taskplane.backoff import backoff_delay_s

__all__ = [
    "ChildSpec",
    "RestartIntensityExceeded",
    "RestartPolicy",
    "RestartType",
    "StartFn",
]

StartFn = Callable[..., Awaitable[object]]
"""An actor-shaped async callable (rule "actors report started").

It is called as ``await start(task_status=status)`` and must accept that keyword-only
argument, as ``async def run(*, task_status=trio.TASK_STATUS_IGNORED)`` does. Bind any
other arguments with :func:`functools.partial` or a closure.
"""


class RestartType(enum.Enum):
    """When a supervisor starts a child again (OTP restart
    types).

    A *normal* return is the start callable returning; an *abnormal* exit (a crash) is
    any :class:`Exception` escaping it. :class:`trio.Cancelled` and other
    :class:`BaseException` that is not an :class:`Exception` are never crashes: they
    propagate and end supervision.
    """

    PERMANENT = "permanent"
    """Always restarted, after a crash and after a normal return (a return counts
    towards restart intensity exactly like a crash, so a child that keeps returning
    escalates instead of spinning)."""

    TRANSIENT = "transient"
    """Restarted only after a crash; a normal return ends its supervision. The default,
    and the right type for per-task owners that retire when their Task settles."""

    TEMPORARY = "temporary"
    """Never restarted. A crash is reported and the child is forgotten; it never counts
    towards restart intensity and never escalates."""


def _non_negative_int(_inst: object, attribute: attrs.Attribute[int], value: int) -> None:
    # ``bool`` is an ``int`` subclass; ``max_restarts=True`` is a bug, not a count.
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{attribute.name} must be an int >= 0, got {value!r}")


def _seconds(*, positive: bool) -> Callable[[object, attrs.Attribute[float], float], None]:
    def check(_inst: object, attribute: attrs.Attribute[float], value: float) -> None:
        ok = not isinstance(value, bool) and isinstance(value, int | float)
        ok = ok and (value > 0 if positive else value >= 0)  # also rejects NaN
        if not ok:
            bound = "> 0" if positive else ">= 0"
            raise ValueError(f"{attribute.name} must be a number of seconds {bound}, got {value!r}")

    return check


@attrs.frozen
class RestartPolicy:
    """Restart intensity and backoff for a supervisor (rule "bounded restarts").

    A supervisor escalates when a restart would be the ``max_restarts + 1``-th within
    the last ``period_s`` seconds of trio's clock (:func:`trio.current_time`, so a
    :class:`trio.testing.MockClock` drives it). The window slides and is inclusive: a
    crash exactly ``period_s`` seconds ago still counts. OTP's defaults are 1 restart
    in 5 s; pick both a burst rate and a sustained rate for real trees, and keep upper
    levels low because intensities multiply across levels.

    Before each restart the supervisor sleeps
    ``min(backoff_cap_s, backoff_s * 2 ** (n - 1))`` seconds, where ``n`` is the number
    of restarts in the current window including this one (see :meth:`backoff_delay_s`).
    ``backoff_s == 0`` (the default) restarts at once.

    Attributes:
        max_restarts: restarts tolerated per window (int >= 0; 0 means the first crash
            escalates).
        period_s: window length in seconds (> 0; ``math.inf`` means "ever").
        backoff_s: base delay in seconds before a restart (>= 0).
        backoff_cap_s: upper bound in seconds for that delay (>= ``backoff_s``).

    Raises:
        ValueError: on construction, for a value outside the domains above.
    """

    max_restarts: int = attrs.field(default=1, validator=_non_negative_int)
    period_s: float = attrs.field(default=5.0, validator=_seconds(positive=True))
    backoff_s: float = attrs.field(default=0.0, validator=_seconds(positive=False))
    backoff_cap_s: float = attrs.field(default=30.0, validator=_seconds(positive=False))

    def __attrs_post_init__(self) -> None:
        if self.backoff_cap_s < self.backoff_s:
            raise ValueError(
                f"backoff_cap_s ({self.backoff_cap_s}) must be >= backoff_s ({self.backoff_s})"
            )

    def backoff_delay_s(self, restarts_in_window: int) -> float:
        """Seconds to wait before the ``restarts_in_window``-th restart of a window.

        Args:
            restarts_in_window: restarts counted in the current window, including the
                one about to happen (int >= 1; smaller values give 0.0).

        Returns:
            ``min(backoff_cap_s, backoff_s * 2 ** (restarts_in_window - 1))`` seconds,
            or 0.0 when ``backoff_s`` is 0. Pure; never raises.
        """
        return backoff_delay_s(self.backoff_s, self.backoff_cap_s, restarts_in_window)


def _non_empty(_inst: object, attribute: attrs.Attribute[str], value: str) -> None:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{attribute.name} must be a non-empty str, got {value!r}")


def _callable(_inst: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not callable(value):
        raise TypeError(f"{attribute.name} must be an async callable, got {value!r}")


@attrs.frozen
class ChildSpec:
    """One supervised child: a name, how to start it, and when to restart it.

    ``start`` is called afresh for every incarnation, as
    ``await start(task_status=status)``; it should call ``status.started(value)`` once it
    can serve (rule "actors report started"). Only the first incarnation's value reaches
    whoever started
    the supervisor; later incarnations' values are discarded.

    **Mailboxes (rule "inboxes outlive restarts").** Because ``start`` is re-invoked on
    every restart, a
    child that owns an inbox must receive ``inbox.clone()`` per incarnation, never the
    original receive end: the buffer belongs to the channel, so messages queued behind
    the one in hand at the crash survive the restart, while the message in hand is not
    redelivered (a poison message cannot cause a crash loop). The caller keeps the
    original receive end open for as long as the child is supervised and closes it
    afterwards::

        def owner_spec(inbox: trio.MemoryReceiveChannel[Cmd], store: Store) -> ChildSpec:
            async def start(*, task_status: trio.TaskStatus[None]) -> None:
                # a fresh clone per incarnation; the original stays with the caller
                await owner.run(inbox.clone(), store, task_status=task_status)
            return ChildSpec("owner", start)

        with inbox:                     # the supervisor side keeps the original
            await nursery.start(supervise, owner_spec(inbox, store), policy)

    Attributes:
        name: identifies the child in logs, :class:`CrashReport` and
            :class:`RestartIntensityExceeded` (non-empty str; unique among siblings).
        start: the actor-shaped async callable (:data:`StartFn`).
        restart_type: see :class:`RestartType`; defaults to ``TRANSIENT``.

    Raises:
        ValueError: ``name`` is empty or not a str.
        TypeError: ``start`` is not callable.
    """

    name: str = attrs.field(validator=_non_empty)
    start: StartFn = attrs.field(validator=_callable)
    restart_type: RestartType = attrs.field(
        default=RestartType.TRANSIENT, validator=attrs.validators.instance_of(RestartType)
    )


class RestartIntensityExceeded(Exception):
    """A supervisor gave up: more than ``max_restarts`` restarts within ``period_s``.

    Raised into the supervisor's parent (rule "bounded restarts"), after every child of the
    supervisor has been cancelled. ``__cause__`` is the crash that tipped the balance
    (``None`` when a ``PERMANENT`` child's normal return did). The parent decides what
    happens next: a parent supervisor counts it as a crash of the subtree.

    Attributes:
        child: name of the child whose restart was refused (str).
        restarts_in_window: restarts the refused one would have made (int).
        policy: the :class:`RestartPolicy` that was exceeded.
    """

    def __init__(self, child: str, restarts_in_window: int, policy: RestartPolicy) -> None:
        super().__init__(
            f"child {child!r}: {restarts_in_window} restarts within {policy.period_s} s "
            f"exceed max_restarts={policy.max_restarts}"
        )
        self.child = child
        self.restarts_in_window = restarts_in_window
        self.policy = policy

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.child, self.restarts_in_window, self.policy))
