"""A passing report sent from an xdist worker in compact form arrives as the report pytest's own form gives."""

from __future__ import annotations

import pytest
from _pytest.reports import pytest_report_from_serializable as pytest_from, pytest_report_to_serializable as pytest_to

from harness.plugins.compact_reports import compact, expand

NODEID = "suites/config/test_matrix.py::test_config_cell[seed-N-cuda-none-noconn]"
# What pytest-xdist's worker adds to every serialised report.
XDIST_KEYS = {"item_index": 7, "worker_id": "gw1", "testrun_uid": "0123abcd"}


def _report(**overrides) -> pytest.TestReport:
    fields = dict(nodeid=NODEID, location=("suites/config/test_matrix.py", 65, "test_config_cell[seed-N-cuda-none-noconn]"),
                  keywords={"test_config_cell[seed-N-cuda-none-noconn]": 1, "test_matrix.py": 1, "config": 1, "": 1},
                  outcome="passed", longrepr=None, when="call", sections=(), duration=0.000125,
                  start=1765000000.25, stop=1765000000.250125,
                  user_properties=[("kvconform", {"suite": "config", "cell": {"era": "seed"}, "actual": None})])
    fields.update(overrides)
    return pytest.TestReport(**fields)


def _through_pytest(report: pytest.TestReport) -> pytest.TestReport:
    return pytest_from({**pytest_to(report), **XDIST_KEYS})


def _through_compact(report: pytest.TestReport) -> pytest.TestReport:
    data = compact(report)
    assert data is not None, "a plain passing report travels compactly"
    return expand({**data, **XDIST_KEYS})


@pytest.mark.parametrize("report", [
    _report(),
    _report(when="setup", user_properties=[]),
    _report(when="teardown", keywords={}),
], ids=["call with a record", "setup", "teardown without keywords"])
def test_a_passing_report_arrives_as_pytest_sends_it(report):
    expected, got = _through_pytest(report), _through_compact(report)
    assert got.__dict__ == expected.__dict__
    assert (got.nodeid, got.passed, got.item_index) == (NODEID, True, 7)


@pytest.mark.parametrize("report", [
    _report(outcome="failed", longrepr="assert 1 == 2"),
    _report(outcome="skipped", longrepr=("test_matrix.py", 3, "Skipped: not applicable here")),
    _report(sections=[("Captured stdout call", "vLLM said something")]),
    _report(wasxfail="known divergence"),  # an xpass: passed, with the attribute skipping added
], ids=["failed", "skipped", "captured output", "an extra attribute"])
def test_any_other_report_takes_pytests_own_form(report):
    assert compact(report) is None
