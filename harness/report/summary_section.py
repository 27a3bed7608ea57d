"""The top of the report: counts per suite and the first failures."""

from __future__ import annotations

from collections import Counter
from typing import Any

from harness.failure_groups import first_line
from harness.report.model import BulletList, Heading, Paragraph, Section, Table

STATUS_COLUMNS = ("passed", "failed", "error", "skipped")
_LISTED_FAILURES = 20


def verdict(entries: list[dict[str, Any]]) -> str:
    """One sentence on the whole run; the report's summary and the command's last line both say it."""
    counts = Counter(entry["status"] for entry in entries)
    ran = len(entries) - counts["skipped"]
    failing = counts["failed"] + counts["error"]
    if not entries or not ran:
        return "Nothing ran: every test was skipped or none was selected."
    if failing:
        return (f"{failing:,} of {ran:,} tests that ran did not behave as expected (failed or error); "
                f"{counts['skipped']:,} skipped.")
    return f"All {ran:,} tests that ran behaved as expected; {counts['skipped']:,} skipped."


def summary_sections(entries: list[dict[str, Any]]) -> list[Section]:
    """Totals per suite, a one-line verdict and the first failures (the details are in the suites' sections)."""
    per_suite: dict[str, Counter] = {}
    for entry in entries:
        per_suite.setdefault(entry["suite"], Counter())[entry["status"]] += 1
    rows = [[suite] + [str(counts[s]) for s in STATUS_COLUMNS] + [str(sum(counts.values()))]
            for suite, counts in sorted(per_suite.items())]
    failing = sorted((e for e in entries if e["status"] in ("failed", "error")), key=lambda e: e["id"])
    blocks = [Heading(2, "Summary"), Paragraph(verdict(entries)),
              Table(headers=["suite", *STATUS_COLUMNS, "total"], rows=rows)]
    if failing:
        # What went wrong, as the console and "What went wrong" say it: the first line without pytest's "Failed: ".
        items = [f"`{e['id']}`: {first_line(e.get('message')) or e['status']}" for e in failing[:_LISTED_FAILURES]]
        if len(failing) > _LISTED_FAILURES:
            items.append(f"and {len(failing) - _LISTED_FAILURES} more (see results.json.gz)")
        blocks += [Heading(3, "Failures"), BulletList(items)]
    return [Section("summary", blocks)]
