"""Every source name ``OUTFITTER_CHANNELS`` accepts has a factory, is auto-detected by
its main variable, and has a page listed in docs/sources.md."""

from __future__ import annotations

from pathlib import Path

import pytest

from taskplane.settings import SOURCE_NAMES, SOURCE_RECORDS, load_sources
from taskplane.sources.registry import KNOWN

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_every_source_name_has_a_factory() -> None:
    assert set(KNOWN) == set(SOURCE_NAMES)


@pytest.mark.parametrize("name", SOURCE_NAMES)
def test_each_source_is_auto_detected_by_its_main_variable_and_documented(name: str) -> None:
    detected_by = SOURCE_RECORDS[name].DETECTED_BY
    variables = (detected_by,) if isinstance(detected_by, str) else detected_by
    index = (DOCS / "sources.md").read_text()
    assert f"`{name}` | [sources/{name}.md](sources/{name}.md)" in index
    for variable in variables:  # each one alone detects the source
        detected = load_sources({variable: "https://example.com/" if "URL" in variable else "x"})
        assert name in detected.selected + tuple(n for n, _ in detected.failed)
        assert f"`{variable}`" in index
    assert (DOCS / "sources" / f"{name}.md").exists()
