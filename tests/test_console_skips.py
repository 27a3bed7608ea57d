"""The console's one-line skip summary groups a suite's skips by their typed records, not their words
(`harness.plugins.console.skip_summary`); a skip without a record by its words, numbers folded. In-process:
hand-built skip reports (tests/test_console.py runs pytest processes for the whole console)."""

from __future__ import annotations

import pytest

from harness.outcomes import REPORT_ATTR, SKIP_CAUSE_ATTR, not_applicable_record, skip_cause
from harness.plugins.console import skip_summary
from harness.plugins.results import RECORD_KEY


def _skip(index: int, reason: str, record: dict | None = None, cause: dict | None = None) -> pytest.TestReport:
    report = pytest.TestReport(f"suites/connector/test_x.py::test_c{index:02d}", ("x", 1, "t"), {}, "skipped",
                               ("suites/connector/test_x.py", 1, f"Skipped: {reason}"), "call",
                               user_properties=[(RECORD_KEY, {"suite": "connector"})])
    if record is not None:
        setattr(report, REPORT_ATTR, record)
    if cause is not None:
        setattr(report, SKIP_CAUSE_ATTR, cause)
    return report


def test_skips_with_one_record_are_one_group_however_they_read():
    record = not_applicable_record("release", "no failed_recving", "0.33.0", check="C02", preset="fa+swa")
    reports = [_skip(2, "N/A on 0.33.0: no failed_recving", record),
               _skip(3, "N/A on 0.33.0: the API has no failed_recving",
                     dict(record, check="C03", preset="fa_only")),
               _skip(4, "N/A on 0.34.0: no failed_recving", dict(record, release="0.34.0"))]
    assert skip_summary(reports, True) == ("kvconform: 3 cells skipped: 3 N/A on 0.33.0: no failed_recving "
                                           "(-rs lists each)")


def test_skips_with_other_records_are_other_groups_however_alike_they_read():
    """Two causes whose texts differ only in a number were one group while the words decided."""
    reports = [_skip(1, "cannot run here: needs 2 GPUs", cause=skip_cause("cannot-run-here", "needs 2 GPUs",
                                                                         needs="cuda")),
               _skip(2, "cannot run here: needs 2 GPUs", cause=skip_cause("cannot-run-here", "needs 2 GPUs",
                                                                         needs="cuda")),
               _skip(3, "cannot run here: needs 3 GPUs", cause=skip_cause("inconclusive", "needs 3 GPUs"))]
    assert skip_summary(reports, True) == ("kvconform: 3 cells skipped: 2 cannot run here: needs 2 GPUs; "
                                           "1 cannot run here: needs 3 GPUs (-rs lists each)")


def test_a_skip_without_a_record_is_grouped_by_its_words_numbers_folded():
    reports = [_skip(5, "skipped: hook M.wait_for_save hung in C05"), _skip(7, "skipped: hook M.wait_for_save hung in C07")]
    assert skip_summary(reports, True) == ("kvconform: 2 cells skipped: 2 skipped: hook M.wait_for_save hung in C05 "
                                           "(-rs lists each)")
