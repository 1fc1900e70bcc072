"""The caller's scope: every Task, context, dedupe record and anchor is keyed by it.

Design rules "Surface": each bearer token maps to a principal, and every task
and dedupe record is scoped to it; this server adds the tenant (the
``/{tenant}/`` path segment; ``""`` on the plain routes). This module imports nothing
from the package, so every layer may use it.
"""

from __future__ import annotations

import attrs


@attrs.frozen
class Scope:
    """(tenant, principal): who is asking. Equal scopes own the same records."""

    tenant: str
    principal: str
