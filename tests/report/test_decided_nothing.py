"""The report lists, per connector, the MUST checks that decided nothing (skipped for a reason the connector's
profile does not imply) and shows them as ❔, never as ➖ n/a; N/A by the profile and SHOULD skips are not listed."""

from __future__ import annotations

from harness.report.connector_section import connector_sections
from harness.report.markdown import render_markdown
from harness.report.model import Document
from tests.report.synthetic import groups_record, na_record, skip_cause_record


def _entry(connector: str, check: str, tier: str, status: str, message: str | None = None, preset: str = "fa+swa"):
    return {"id": f"suites/connector/x.py::test_{check.lower()}[{connector}-{preset}]", "suite": "connector",
            "status": status, "message": message, "not_applicable": na_record(status, message),
            "skip_cause": skip_cause_record(status, message), "extra": {"description": "d", **groups_record(preset)},
            "cell": {"connector": connector, "check": f"{check} name", "tier": tier, "preset": preset}}


def test_the_report_lists_the_must_checks_that_decided_nothing_per_connector():
    entries = [
        _entry("Quiet", "C22", "MUST", "skipped", "inconclusive: the connector offered no hit for the stored prompt"),
        _entry("Quiet", "C36", "MUST", "skipped", "not applicable: the store does not outlive its process", "-"),
        _entry("Quiet", "C08", "SHOULD", "skipped", "not applicable: backdoors are off"),
        _entry("Quiet", "C07", "MUST", "passed"),
        _entry("Clean", "C22", "MUST", "passed"),
        _entry("Clean", "C36", "MUST", "skipped", "N/A: the connector's store lives and dies with its process", "-"),
        _entry("Clean", "C08", "SHOULD", "skipped", "not applicable: backdoors are off"),
        _entry("Clean", "C07", "MUST", "skipped", "not HMA-capable: Clean does not declare SupportsHMA"),
    ]
    report = render_markdown(Document("report", "one run", connector_sections(entries)))
    assert "### MUST checks that decided nothing" in report
    assert ("- Quiet: 2 MUST cell(s) decided nothing: C22 name on fa+swa: inconclusive: the connector offered no hit "
            "for the stored prompt; C36 name on -: not applicable: the store does not outlive its process") in report
    assert "- Clean: none; every MUST check decided or is N/A by its profile." in report
    row = next(line for line in report.splitlines() if line.startswith("| C36 name"))
    clean, quiet = (cell.strip() for cell in row.split("|")[4:6])  # connectors in name order: Clean, Quiet
    assert clean.startswith("➖ n/a") and quiet.startswith("❔ unknown"), row
