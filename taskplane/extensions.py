"""Identifiers of the two A2A extensions this server declares.

An extension is named by its URI (A2A v1.0.1 §4.6). A client activates
it per request by listing the URI in the ``A2A-Extensions`` header; extension data
then travels in ``metadata`` maps (``outfitter-task/v1``) or inside a data part
(``elicitation/v1``) under the short *metadata key* below, never under the URI.

Values are exact strings shared with Channels;
changing one is a wire-compatibility break.

This module imports nothing from the package.
"""

from __future__ import annotations

from typing import Final

OUTFITTER_TASK_URI: Final = (
    "https://github.com/ai-outfitter/channels/a2a-extensions/outfitter-task/v1"
)
"""``outfitter-task/v1``: server-scoped task locators, idempotency and output artifacts."""

OUTFITTER_TASK_KEY: Final = "outfitter-task/v1"
"""Key of the ``outfitter-task/v1`` object inside Message/Task/Artifact ``metadata``."""

ELICITATION_URI: Final = "https://github.com/ai-outfitter/channels/a2a-extensions/elicitation/v1"
"""``elicitation/v1``: typed questions (an MCP elicitation subset) while INPUT_REQUIRED."""

ELICITATION_KEY: Final = "elicitation/v1"
"""Key of the ``elicitation/v1`` object inside a data part's ``data``."""
