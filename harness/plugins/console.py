"""Console output for the conformance suites: failing cells grouped by what went wrong, a screenful at most.

pytest's default end-of-run summary prints every failure in full and then one `FAILED` line each; for a
target that fails thousands of cells that is megabytes of text, and pytest's failure summary looks up each
failure's teardown report in the list of all reports, so it costs time quadratic in the number of tests.
By default this plugin takes the failing cells of the kvconform suites (config, allocator, connector,
benchmark) out of that summary and prints them grouped instead (`harness.failure_groups`): one line per
way of failing, capped at a screenful. The full per-cell evidence stays in the results file and the report.
`-v` or an explicit `--tb=STYLE` brings pytest's full output back. Failures of other tests (the project's
own `tests/`) are left to pytest.
"""

from __future__ import annotations

import shutil

import pytest

from harness.plugins.activation import is_active
from harness.failure_groups import FAILING_STATUSES, cause_key, cell_name, first_line, format_groups, group_failures
from harness.failure_causes import CHECK_REPORT_ATTR, REPORT_ATTR as CAUSE_REPORT_ATTR
from harness.outcomes import CONNECTOR_CLASS_ATTR, REPORT_ATTR as NA_REPORT_ATTR, SKIP_CAUSE_ATTR, skip_reason_key
from harness.plugins.results import RECORD_KEY, failure_message, suite_of_nodeid, suite_of_path

# Lines the grouped summary may take besides its heading: a screen less pytest's header and final line.
_MIN_LINES = 10
_SCREEN_MARGIN = 6


def pytest_addoption(parser):
    group = parser.getgroup("kvconform")
    group.addoption("--kvconform-report-path", dest="kvconform_report_path", default=None, metavar="PATH",
                    help="where this run's compatibility report will be (the console summary points there; "
                         "`kvconform report` sets it)")


def grouped_console(config: pytest.Config) -> bool:
    """True unless the user asked for pytest's full failure output (-v, or --tb=STYLE other than auto)."""
    return config.get_verbosity() <= 0 and config.getoption("tbstyle", "auto") == "auto"


# The attribute a failing or skipped report of a suite test carries its suite in (it travels with the report
# from an xdist worker): the test's record says it too, but only from the teardown report on.
_SUITE_ATTR = "kvconform_suite"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """Tag a failing or skipped report of a kvconform suite with its suite, from the test file's location."""
    report = yield
    if not report.passed and is_active(item.config):
        suite = suite_of_path(item.path)
        if suite is not None:
            setattr(report, _SUITE_ATTR, suite)
    return report


def _cell_suite(report: pytest.TestReport, active: bool) -> str | None:
    """The kvconform suite a report's test belongs to, or None for any other test. Without a record, the
    test's file decides, only in a kvconform session (another project may have a `suites/config` too)."""
    for key, payload in report.user_properties:
        if key == RECORD_KEY:
            return str(payload.get("suite"))
    if not active:
        return None
    suite = getattr(report, _SUITE_ATTR, None) or suite_of_nodeid(report.nodeid)
    return suite if suite in ("config", "allocator", "connector", "benchmark") else None


def _connector(report: pytest.TestReport) -> str | None:
    """The connector a connector-suite cell checked (its record), for grouping by root cause per connector."""
    for key, payload in report.user_properties:
        if key == RECORD_KEY:
            return (payload.get("cell") or {}).get("connector")
    return None


def _cause(report: pytest.TestReport) -> dict | None:
    """The cause key a failing connector check recorded (`harness.failure_causes`): what its cell is grouped by."""
    cause = getattr(report, CAUSE_REPORT_ATTR, None)
    return cause if isinstance(cause, dict) and cause else None


def _check(report: pytest.TestReport) -> tuple[str, str] | None:
    """The (check id, preset) of a failing connector check's cell, as its report carries it (from an xdist worker
    too), so that which check failed is never read off its message."""
    check = getattr(report, CHECK_REPORT_ATTR, None)
    return tuple(check) if isinstance(check, (tuple, list)) and len(check) == 2 else None


def _what(report: pytest.TestReport) -> str:
    what = first_line(failure_message(report)) or report.outcome
    return what if report.when == "call" else f"error in {report.when}: {what}"


def _see(config: pytest.Config) -> str:
    report = config.getoption("kvconform_report_path", None)
    results = config.getoption("kvconform_results", None)
    if report:
        where = report
    elif results:
        where = f"{results} (or the report of `kvconform report --from {results}`)"
    else:
        # A plain pytest run writes no report: reports/compatibility.md would be an older run's (or the committed
        # one), so say how to keep this run's evidence instead.
        return "-v for pytest's full output, or --kvconform-results FILE and then `kvconform report --from FILE`"
    return f"{where}; -v for pytest's full output"


def _declares_no_hma(report) -> bool:
    """Whether a skipped report is a typed `declaration` N/A (the connector class does not declare SupportsHMA),
    whichever check and preset said it (`harness.outcomes`)."""
    record = getattr(report, NA_REPORT_ATTR, None)
    return isinstance(record, dict) and record.get("kind") == "declaration"


def _not_hma_class(report, active: bool) -> str | None:
    """The connector class a skipped connector-suite cell was not applicable to on a multi-group preset because
    it does not declare SupportsHMA (the skip's typed record, and the class it names beside it), else None. A
    connector without SupportsHMA has every multi-group cell skipped so, one per preset (~140 cells)."""
    if not (_declares_no_hma(report) and getattr(report, NA_REPORT_ATTR).get("preset")
            and _cell_suite(report, active) == "connector"):
        return None
    return getattr(report, CONNECTOR_CLASS_ATTR, None)


def _fold_not_hma_skips(terminalreporter, config) -> list:
    """Take the "not HMA-capable" skips of the connector suite out of pytest's short summary (`-ra` lists each of
    them: a vendor's non-HMA connector buried its failures under ~140 such lines) and print one line per class.
    Returns the held reports, to be put back for the final counts."""
    reports = terminalreporter.stats.get("skipped") or []
    active = is_active(config)
    classes = [_not_hma_class(report, active) if isinstance(report, pytest.TestReport) else None for report in reports]
    if not any(classes):
        return []
    terminalreporter.stats["skipped"] = [r for r, cls in zip(reports, classes) if cls is None]
    for cls in sorted({cls for cls in classes if cls}):
        count = classes.count(cls)
        terminalreporter.write_line(f"kvconform: {count:,} multi-group cell{'s' if count != 1 else ''} of {cls} "
                                    "skipped as not HMA-capable (it does not declare SupportsHMA, so vLLM refuses it "
                                    "on those presets)")
    return reports


# Reasons the one-line skip summary names before it sums up the rest, and the length each is cut to.
_SKIP_REASONS_SHOWN, _SKIP_REASON_CHARS = 4, 90


def _skip_reason(report) -> str | None:
    """The reason a skipped report gives, on one line (as the results file keeps it: `failure_message`), or None
    for another outcome."""
    longrepr = getattr(report, "longrepr", None)
    if not (isinstance(longrepr, tuple) and len(longrepr) == 3):
        return None
    return " ".join((failure_message(report) or "").split())


def _shortened(reason: str) -> str:
    if len(reason) <= _SKIP_REASON_CHARS:
        return reason
    return reason[:_SKIP_REASON_CHARS].rsplit(" ", 1)[0].rstrip(",;:(") + "…"


def _skip_key(report, reason: str) -> str:
    """Which group a skipped report joins: its typed record where it carries one (`skip_reason_key`), so skips that
    the same record says go together however their texts read; a skip without a record by its words, numbers and
    ids folded (as a failure without a typed cause is grouped)."""
    key = skip_reason_key(getattr(report, NA_REPORT_ATTR, None), getattr(report, SKIP_CAUSE_ATTR, None))
    return key if key is not None else cause_key(reason)


def skip_summary(reports, active: bool) -> str | None:
    """One line: how many suite cells were skipped, and why, reasons grouped (by their typed records, `_skip_key`)
    and most frequent first; None when no suite cell was skipped."""
    groups: dict[str, list[str]] = {}
    for report in reports:
        if not isinstance(report, pytest.TestReport) or _cell_suite(report, active) is None:
            continue
        reason = _skip_reason(report)
        if reason is None:
            continue
        if _declares_no_hma(report):  # one group, whichever preset or check says it
            reason, key = "not HMA-capable (the connector does not declare SupportsHMA)", "declaration"
        else:
            key = _skip_key(report, reason)
        groups.setdefault(key, []).append(reason)
    if not groups:
        return None
    total = sum(len(reasons) for reasons in groups.values())
    ranked = sorted(groups.values(), key=len, reverse=True)
    parts = [f"{len(reasons):,} {_shortened(reasons[0])}" for reasons in ranked[:_SKIP_REASONS_SHOWN]]
    rest = ranked[_SKIP_REASONS_SHOWN:]
    if rest:
        count = sum(len(reasons) for reasons in rest)
        parts.append(f"{count:,} for {len(rest)} other reason{'s' if len(rest) != 1 else ''}")
    return (f"kvconform: {total:,} cell{'s' if total != 1 else ''} skipped: " + "; ".join(parts)
            + " (-rs lists each)")


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Around pytest's own summary: hold the suites' failing cells back from it and print them grouped, fold
    the connector suite's "not HMA-capable" skips into one line per connector class, and end with one line that
    says how many suite cells were skipped and why."""
    stats = terminalreporter.stats
    grouped = grouped_console(config)
    every_skip = list(stats.get("skipped") or [])
    skipped = _fold_not_hma_skips(terminalreporter, config) if grouped else []
    try:
        return (yield from _grouped_failures(terminalreporter, config))
    finally:
        if skipped:
            stats["skipped"] = skipped  # the final counts ("141 skipped") still see every report
        line = skip_summary(every_skip, is_active(config)) if grouped else None
        if line is not None:
            terminalreporter.write_line(line)


def _grouped_failures(terminalreporter, config):
    """The failing cells, grouped (a generator: it yields to pytest's own summary in between)."""
    stats = terminalreporter.stats
    if not grouped_console(config) or not any(stats.get(kind) for kind in FAILING_STATUSES):
        return (yield)
    held: dict[str, list] = {}
    failures = []
    active = is_active(config)
    for kind in FAILING_STATUSES:
        reports = stats.get(kind)
        if not reports:
            continue
        keep = []
        for report in reports:
            suite = _cell_suite(report, active) if isinstance(report, pytest.TestReport) else None
            if suite is None:
                keep.append(report)
            else:
                failures.append((suite, _what(report), cell_name(report.nodeid), _connector(report), _cause(report),
                                 _check(report)))
        held[kind] = reports
        stats[kind] = keep
    if failures:
        groups = group_failures(failures)
        rows = shutil.get_terminal_size().lines
        budget = max(_MIN_LINES, rows - _SCREEN_MARGIN)
        lines = format_groups(groups, max_lines=budget, see=_see(config))
        if len(groups) < budget:  # nothing left out, and one line to spare: where each cell's full evidence is
            lines.append(f"full evidence: {_see(config)}")
        noun = "cell" if len(failures) == 1 else "cells"
        terminalreporter.write_sep("=", f"kvconform: {len(failures):,} failing {noun}, grouped by what went wrong",
                                   red=True, bold=True)
        for line in lines:
            terminalreporter.write_line(line)
    try:
        return (yield)
    finally:
        stats.update(held)  # the final counts ("13514 failed, ...") still see every report
