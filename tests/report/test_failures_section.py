"""The report's "What went wrong" section: grouped failures first, then the tables; nothing for a clean run."""

from __future__ import annotations

from harness.report import render_reports
from harness.report.failures_section import MAX_ROWS, failures_sections
from harness.results_model import ResultsDocument
from tests.report.synthetic import config_entry, outcome

WRONG = "Failed: expected `HMA off`, got `HMA on` (§2.2 1b: kv_events_config)\nconfig cell {} (...) does not conform:"


def _failing(platform: str, features: str = "kv_events", what: str = WRONG) -> dict:
    return config_entry(platform=platform, features=features, status="failed", actual=outcome(resolved=False),
                        expected=outcome(resolved=True), message=what.format(platform))


def _run_info() -> dict:
    return {"kvconform_version": "0.1.0", "target": "mod:resolve"}


def test_groups_come_before_the_tables_in_both_renderings():
    entries = [_failing(p) for p in ("cuda", "rocm", "cpu")] + [
        _failing("cuda", "none", "Failed: expected `HMA on`, got `HMA off` (§2.2 2)\nconfig cell x"),
        config_entry(platform="xpu")]
    files = render_reports(ResultsDocument(run_info=_run_info(), results=entries))
    markdown = files["compatibility.md"]
    section = markdown.index("## What went wrong")
    assert section < markdown.index("## Config resolution matrix"), "the causes come before the per-cell tables"
    assert "4 failing cells in 2 groups" in markdown
    table = markdown[section:].split("\n\n")[2].splitlines()
    assert [[cell.strip() for cell in line.strip("|").split("|")] for line in table[2:]] == [
        ["3", "config", "expected `HMA off`, got `HMA on` (§2.2 1b: kv_events_config)", "seed-N-cpu-kv_events-noconn-config"],
        ["1", "config", "expected `HMA on`, got `HMA off` (§2.2 2)", "seed-N-cuda-none-noconn-config"],
    ]
    page = files["compatibility.html"]
    assert page.index("What went wrong") < page.index("Config resolution matrix")
    assert "(§2.2 1b: kv_events_config)" in page


def test_no_section_when_every_cell_behaved():
    assert failures_sections([config_entry(platform="cuda"), config_entry(platform="rocm")]) == []


def test_the_table_is_capped_and_counts_the_rest():
    entries = [_failing("cuda", f"f{i}", f"Failed: way {i}") for i in range(MAX_ROWS + 5)]
    (section,) = failures_sections(entries)
    table = next(block for block in section.blocks if hasattr(block, "rows"))
    assert len(table.rows) == MAX_ROWS
    assert section.blocks[-1].text == "… and 5 more groups (5 cells), see results.json.gz."
