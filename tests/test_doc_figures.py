"""Figures the docs state about kvconform itself, held to what the code says today (a stale count is a test
failure, not a reader's surprise)."""

from __future__ import annotations

import re
from pathlib import Path

from suites.config.matrix import matrix

REPO = Path(__file__).resolve().parents[1]


def test_reader_states_the_config_matrix_size():
    """docs/reader.md: `kvconform report` runs "the config matrix (N tiny tests)", one test per cell."""
    text = (REPO / "docs" / "reader.md").read_text(encoding="utf-8")
    stated = re.search(r"the config matrix \(([\d,]+) tiny tests\)", text)
    assert stated, "docs/reader.md no longer states the matrix size this test checks"
    assert int(stated.group(1).replace(",", "")) == sum(1 for _ in matrix())
