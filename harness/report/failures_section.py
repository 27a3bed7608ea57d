"""The report's "What went wrong" part: failing cells grouped by what went wrong, before the tables.

A target that fails thousands of cells usually breaks a handful of rules; this section says which, one row
per way of failing (`harness.failure_groups`, the grouping the console and `kvconform diff` use), so the
reader sees the causes before the per-cell tables. Each cell's full evidence stays in results.json.gz.
"""

from __future__ import annotations

from typing import Any

from harness.failure_groups import group_entries
from harness.report.model import Heading, Paragraph, Section, Table

SECTION_KEY = "failures"
# Rows of the table at most: the largest groups; the rest are counted in one line below it.
MAX_ROWS = 50


def failures_sections(entries: list[dict[str, Any]]) -> list[Section]:
    """The grouped failures (nothing when every cell behaved as expected)."""
    groups = group_entries(entries)
    if not groups:
        return []
    cells = sum(group.count for group in groups)
    shown = groups[:MAX_ROWS]
    blocks = [
        Heading(2, "What went wrong"),
        Paragraph(f"{cells:,} failing cell{'s' if cells != 1 else ''} in {len(groups):,} group{'s' if len(groups) != 1 else ''}"
                  " of cells that failed the same way, the largest first. Each cell's expected and actual outcome "
                  "are in results.json.gz and in the tables below."),
        Table(headers=["cells", "suite", "what went wrong", "first cell"],
              rows=[[f"{group.count:,}", group.suite, group.what, group.cells[0]] for group in shown]),
    ]
    if len(groups) > len(shown):
        rest = groups[len(shown):]
        blocks.append(Paragraph(f"… and {len(rest):,} more groups ({sum(g.count for g in rest):,} cells), "
                                "see results.json.gz."))
    return [Section(SECTION_KEY, blocks)]
