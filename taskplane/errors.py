"""The taskplane error hierarchy, grouped by what the caller can do.

Every error a caller of the plane can see is a :class:`TaskplaneError`. A caller picks
a branch with ``isinstance``, never a status number::

    TaskplaneError                     base; its direct subclasses are neither branch
    ├── Transient                      nothing was done; the same request may succeed
    │   │                              later: retry it, spaced (taskplane.backoff)
    │   ├── Overloaded                 a bounded inbox or queue is full
    │   ├── StoreUnavailable           the store could not commit (disk, I/O, locked)
    │   ├── ActorGone                  the actor asked stopped before answering
    │   ├── RequestTimeout             headers or body did not arrive in time
    │   ├── ProviderUnavailable        the agent's model provider or program is
    │   │                              unavailable (429, 5xx, unreachable, restarting)
    │   ├── VersionConflict            another node changed the Task since it was read:
    │   │                              reload, decide again, retry (bounded)
    │   └── DeliveryFailed             a delivery did not happen (actors.outbound)
    ├── Refused                        the request itself is refused: sent again
    │   │                              unchanged it gets the same answer; change it
    │   ├── InvalidRequest             malformed JSON, wrong type, bad value
    │   ├── Unauthenticated            missing or unknown bearer token
    │   ├── RouteNotFound              no such route
    │   ├── MethodNotAllowed           the route exists, not for this method
    │   ├── MethodNotImplemented       a method not implemented at all (``post``)
    │   ├── UpgradeNotSupported        a WebSocket handshake (HTTP+JSON only)
    │   ├── DuplicateMessageId         a messageId reused with another payload
    │   ├── PayloadTooLarge            the body or the parts are over the limit
    │   ├── UnsupportedMediaType       the request body is not JSON
    │   ├── TaskNotFound               unknown Task, or one the caller may not see
    │   ├── TaskNotCancelable          the Task is already terminal
    │   ├── PushNotificationNotSupported
    │   ├── UnsupportedOperation       e.g. a message to a terminal Task
    │   ├── VersionNotSupported        an ``A2A-Version`` other than 1.0
    │   ├── ToolError                  a task tool refused the agent's call
    │   └── DeliveryConflict           a fixed operation ID reused (actors.outbound)
    ├── Internal                       a bug or an unexpected failure: report it
    ├── Fenced                         the turn's (or leader's) lease is no longer this
    │                                  node's: the write was refused, nothing recorded;
    │                                  stop the turn
    ├── StoreLocked                    startup: another process holds the store
    ├── StoreVersionError              startup: the store is newer than this program
    └── DeliveryAmbiguous              outcome unknown: resolve it by hand
                                       (actors.outbound)

A loop that retries on its own (the wake pump, a native source) retries what is not
:class:`Refused` and sets aside, or drops, what is: a refusal is permanent, while an
:class:`Internal` failure (e.g. a concurrent write caught by the store) may pass.

The wire identity of each class (HTTP status, ``google.rpc.Code`` name and
``google.rpc.ErrorInfo`` reason, A2A v1.0.1 §11.6) is not kept here: it is one table
in :mod:`taskplane.http.errors` (design rules "Pinned protocol source / Error
format"). An error carries only what any caller may use: its message, ``metadata``,
``field_violations`` and ``retry_after_s``.

This module imports nothing from the package (rule "import layers").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


class TaskplaneError(Exception):
    """Base of every error a caller of the plane can see.

    Attributes:
        message: human-readable text (the exception's ``str``).
        metadata: string keys to string values describing the error (the wire
            answer puts them in ``ErrorInfo.metadata``).
        field_violations: ``(field path, description)`` pairs naming the parts of the
            request that are wrong.
        retry_after_s: whole seconds after which a retry may succeed, or ``None``.
    """

    def __init__(
        self,
        message: str,
        *,
        metadata: Mapping[str, str] | None = None,
        field_violations: Sequence[tuple[str, str]] = (),
        retry_after_s: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.metadata: dict[str, str] = dict(metadata or {})
        self.field_violations: tuple[tuple[str, str], ...] = tuple(field_violations)
        self.retry_after_s = retry_after_s


class Transient(TaskplaneError):
    """Nothing was done; the same request may succeed later.

    Retry it, spaced by :func:`taskplane.backoff.backoff` (or after ``retry_after_s``
    when set). Test with ``isinstance(exc, Transient)``, never by listing classes.
    """


class Refused(TaskplaneError):
    """The request itself is refused: sent again unchanged, it gets the same answer.

    Nothing was recorded. The caller must change the request (or give it up: a
    native source sets the item aside with evidence).
    """


# --- transient conditions ---------------------------------------------------------


class Overloaded(Transient):
    """A bounded inbox or queue is full; retry after ``retry_after_s`` (default 1 s).

    Design rule "Wake admission is bounded": the plane refuses new work rather than
    queueing without bound.
    """

    def __init__(self, message: str, *, retry_after_s: int = 1, **kw: Any) -> None:
        super().__init__(message, retry_after_s=retry_after_s, **kw)


class StoreUnavailable(Transient):
    """The durable store could not commit (disk full, I/O, locked).

    Nothing was recorded; the same request may be retried (default after 1 s).
    """

    def __init__(self, message: str, *, retry_after_s: int = 1, **kw: Any) -> None:
        super().__init__(message, retry_after_s=retry_after_s, **kw)


class ActorGone(Transient):
    """The actor asked for a reply crashed or stopped before replying.

    Design rule "Request and reply": a crashed actor never leaves a caller hanging.
    A posted request may still have taken effect; retrying is safe where the request
    is idempotent (a send's ``messageId``).
    """


class ProviderUnavailable(Transient):
    """The agent could not work because what it depends on is unavailable: its model
    provider answered 429 or 5xx, could not be reached or timed out, or its program
    was restarting. Not a failure of the agent or of the Task.

    Design rule "Provider failures are not Task failures": the wake pauses with
    backoff (at least ``retry_after_s``, the provider's ``Retry-After``, when set) and
    resumes by itself; the Task fails only after ``A2A_AGENT_PROVIDER_PATIENCE_S``.
    """


# --- refusals: generic (non-A2A) conditions ------------------------------------------


class InvalidRequest(Refused):
    """Malformed JSON, wrong type, missing field, bad value (design rule "strict
    decoding"); ``field_violations`` name the fields."""


class Unauthenticated(Refused):
    """Missing or unknown bearer token."""


class RouteNotFound(Refused):
    """No such route (not a Task lookup; see :class:`TaskNotFound`)."""


class MethodNotAllowed(Refused):
    """The route exists but not for this HTTP method (``metadata["allow"]`` lists
    the methods that are)."""


class MethodNotImplemented(Refused):
    """A request method the server does not implement at all (methods are
    case-sensitive, RFC 9110 §9.1: ``post`` is not ``POST``)."""


class RequestTimeout(Transient):
    """A request's headers or body did not arrive in time (design rule "Requests
    arrive in bounded time"); the connection is closed after the answer."""


class UpgradeNotSupported(Refused):
    """A WebSocket upgrade: this server speaks the HTTP+JSON binding only (its
    streams are Server-Sent Events)."""


class DuplicateMessageId(Refused):
    """A messageId was reused with a different payload.

    Design rules "Contract decisions": never a silent replay.
    """


class PayloadTooLarge(Refused):
    """The request body (over 1 MiB) or a native event's parts are over the limit."""


class UnsupportedMediaType(Refused):
    """The request ``Content-Type`` is not JSON."""


class VersionConflict(Transient):
    """The Task's version moved since the change was decided (another node wrote it).

    Design rule "One writer per Task": every write is a compare-and-swap on the Task's
    version. Nothing was recorded; owner(T) reloads the Task, decides again with the
    same pure logic and retries, a bounded number of times.
    """


# --- faults ---------------------------------------------------------------------------


class Internal(TaskplaneError):
    """A bug or an unexpected failure."""


class Fenced(TaskplaneError):
    """A write carried a lease epoch that is no longer current (a turn's wake lease or
    a leader's lease moved to another node, or expired on database time).

    Design rule "Turn authority is a lease": nothing was recorded. The turn (or the
    leader's work) must stop; the node that holds the lease now carries on.
    """


class StoreLocked(TaskplaneError):
    """Another process holds the store root's exclusive lock (startup only)."""


class StoreVersionError(TaskplaneError):
    """The store was written by a newer taskplane (schema_version too high)."""


# --- refusals: A2A-defined errors ---------------------------------------------------


class TaskNotFound(Refused):
    """Unknown Task, or one the caller may not see (§13.1)."""


class TaskNotCancelable(Refused):
    """The Task is already terminal."""


class PushNotificationNotSupported(Refused):
    """Push notifications are not offered (docs/conformance.md)."""


class UnsupportedOperation(Refused):
    """E.g. a message to, or subscribe on, a terminal Task."""


class VersionNotSupported(Refused):
    """``A2A-Version`` other than 1.0 (docs/conformance.md)."""


# --- agent-side tool errors (bridge) -------------------------------------------------


class ToolError(Refused):
    """A task tool refused a call (no authority, terminal Task, invalid arguments).

    Raised to the agent runtime, never to an A2A caller.
    """
