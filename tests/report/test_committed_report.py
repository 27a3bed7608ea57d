"""The committed `reports/compatibility.md` is not stale: its config matrix matches a fresh evaluation.

The fresh config section is built in this process from the matrix's cells, the reference resolver and the
oracle, exactly as the matrix's tests record them (status, cell, the target's outcome), instead of running
the 16,000-odd matrix tests a second time in the same test command (they run once, as suite tests).
Only the config section and the support table are compared (the other sections come from the other suites, and
the run line names the run); regenerate the file with `kvconform report` and commit it.
"""

from __future__ import annotations

import difflib
import re
from functools import lru_cache
from pathlib import Path

import pytest

from harness.report.build import build_document
from harness.report.html import render_html
from harness.report.model import Document, Table
from harness.report.markdown import extract_section, render_markdown_pages
from harness.results_model import ResultsDocument, make_entry
from reference_impl.config import resolve_case
from suites.config.invariants import defects_noted
from suites.config.matrix import matrix
from suites.config.oracle import expected_outcome
from suites.config.outcomes import outcome_mismatches

REPO = Path(__file__).resolve().parents[2]
COMMITTED = REPO / "reports" / "compatibility.md"
SECTIONS = ("config", "support")  # built from the matrix alone (and the committed run verdicts)
MATRIX_TEST = "suites/config/test_matrix.py::test_config_cell"


@lru_cache(maxsize=1)
def fresh_config_results() -> ResultsDocument:
    """One entry per matrix cell, as `test_config_cell` records it for the reference resolver (computed once
    per process; the report agreement test reads it too)."""
    entries = []
    for cell in matrix():
        case = cell.case()
        actual = resolve_case(case)
        problems = outcome_mismatches(expected_outcome(case).outcome, actual)
        entries.append(make_entry(nodeid=f"{MATRIX_TEST}[{cell.id}]", suite="config", cell=cell.dimensions,
                                  status="failed" if problems else "passed", actual=actual,
                                  message="; ".join(problems) or None,
                                  extra=defects_noted(cell.era, resolve_case, case["id"])))
    return ResultsDocument(run_info={"kvconform_version": "fresh", "target": "reference"}, results=entries)


@lru_cache(maxsize=1)
def fresh_report_document() -> Document:
    """The report document of `fresh_config_results` (built once per process)."""
    return build_document(fresh_config_results())


@pytest.fixture(scope="module")
def fresh() -> ResultsDocument:
    return fresh_config_results()


def test_fresh_evaluation_matches_a_recorded_cell(fresh):
    """Control: the in-process evaluation records what the matrix test records (hand-checked cell)."""
    entry = next(e for e in fresh.results if e["id"].endswith("[seed-F-cuda-kv_events-noconn]"))
    assert entry["status"] == "passed" and entry["cell"] == {
        "era": "seed", "flag": False, "platform": "cuda", "features": "kv_events", "connector": "noconn",
        "stage": "config"}
    assert entry["actual"]["error"]["type"] == "ValueError" and "explicitly enabled" in entry["actual"]["error"]["text"]


def test_committed_compatibility_report_is_current(fresh):
    """compatibility.md and each of its per-release pages (compatibility-ERA.md, compatibility-changes.md)."""
    assert COMMITTED.exists(), f"{COMMITTED} is missing: run `kvconform report` and commit reports/compatibility.md"
    pages = render_markdown_pages(fresh_report_document(), COMMITTED.name)
    stale = []
    for name, text in pages.items():
        path = COMMITTED.parent / name
        section = "\n".join(extract_section(text, key) for key in SECTIONS)
        committed = ("\n".join(extract_section(path.read_text(encoding="utf-8"), key) for key in SECTIONS)
                     if path.exists() else "(missing)")
        if section != committed:
            diff = "\n".join(list(difflib.unified_diff(committed.splitlines(), section.splitlines(), "committed",
                                                       "fresh", lineterm="", n=1))[:40])
            stale.append(f"reports/{name}:\n{diff}")
    if stale:
        pytest.fail(f"the committed report is stale ({len(stale)} of {len(pages)} pages differ from a fresh run); "
                    f"regenerate it with `kvconform report` and commit reports/compatibility*.md. First:\n{stale[0]}")


def test_committed_report_stays_small():
    """The main page answers the common questions; the era tables live on their own pages (issue 21: under
    200 KB each, read in a minute)."""
    for path in sorted(COMMITTED.parent.glob("compatibility*.md")):
        assert path.stat().st_size < 200_000, f"{path.name} is {path.stat().st_size:,} bytes"


# The HTML page of a full report stays under this size (issue 32: it must stand without JavaScript, every
# table as HTML, and open fast). The config sections are 98% of it; the other suites' sections (summary,
# allocator, connectors, throughput) add about 25 KB (24,000 bytes in the 2026-12-06 full report), so the
# config sections alone must leave them OTHER_SECTIONS_BYTES.
HTML_LIMIT_BYTES = 1_500_000
OTHER_SECTIONS_BYTES = 50_000


def test_full_size_html_page_stands_without_scripts_and_stays_small(fresh):
    """The HTML page of the full config matrix (every era, the changes, the support and at-a-glance tables):
    one <table> per table of the report, no table inside a script, and small enough."""
    document = fresh_report_document()
    page = render_html(document)
    size = len(page.encode("utf-8"))
    assert size < HTML_LIMIT_BYTES - OTHER_SECTIONS_BYTES, f"the full config matrix's HTML page is {size:,} bytes"
    tables = [block for section in document.sections for block in section.blocks if isinstance(block, Table)]
    assert page.count("<table") == len(tables) > 20
    assert page.count("\n<tr") == sum(len(table.rows) for table in tables), "every row is in the page"
    scripts = re.findall(r"<script[^>]*>(.*?)</script>", page, flags=re.S)
    assert len(scripts) == 3 and sum(map(len, scripts)) < 20_000, (
        "only the filter script, the eras' first releases and the labels of the filter tags")
