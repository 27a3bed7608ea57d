"""The allocator part of the report: pass/fail counts per target and spec section, and the failures."""

from __future__ import annotations

from collections import Counter
from typing import Any

from harness.report.config_section import label
from harness.report.model import BulletList, Heading, Paragraph, Section, Table

SUITE = "allocator"
_LISTED_FAILURES = 50


def allocator_sections(entries: list[dict[str, Any]]) -> list[Section]:
    """The allocator conformance summary, or nothing when the allocator suite did not record."""
    records = [e for e in entries if e["suite"] == SUITE]
    if not records:
        return []
    counts: dict[tuple[str, str], Counter] = {}
    for entry in records:
        cell = entry.get("cell") or {}
        counts.setdefault((label(cell.get("target")), label(cell.get("section"))), Counter())[entry["status"]] += 1
    rows = [[target, section, str(c["passed"]), str(c["failed"]), str(c["error"]), str(c["skipped"])]
            for (target, section), c in sorted(counts.items(), key=lambda kv: (kv[0][0].lower(), kv[0][1]))]
    failing = sorted((e for e in records if e["status"] in ("failed", "error")), key=lambda e: e["id"])
    blocks = [
        Heading(2, "Allocator conformance"),
        Table(headers=["target", "section", "passed", "failed", "error", "skipped"], rows=rows),
    ]
    if failing:
        items = [f"{label((e.get('cell') or {}).get('scenario'))} ({label((e.get('cell') or {}).get('section'))}, "
                 f"{label((e.get('cell') or {}).get('target'))}): {e.get('message') or e['status']}"
                 for e in failing[:_LISTED_FAILURES]]
        if len(failing) > _LISTED_FAILURES:
            items.append(f"and {len(failing) - _LISTED_FAILURES} more (see results.json)")
        blocks += [Heading(3, "Failing allocator scenarios"), BulletList(items)]
    else:
        blocks.append(Paragraph("Every allocator scenario that ran passed."))
    return [Section("allocator", blocks)]
