"""A passing test's reports travel from a pytest-xdist worker to the controller in a compact form.

Every test sends three reports (setup, call, teardown) from its worker to the controller. pytest serialises each as
a dict of about fifteen keys (its fields, each keyword of the test, pytest-xdist's item index and ids), and execnet
writes every string of it one by one in Python: with the config matrix's 31,674 cells that was the largest part of a
worker's time beyond the tests themselves (docs/speed.md). A passing report with nothing but its standard fields (no
failure, no captured output, no attribute a plugin added, such as an xfail's `wasxfail`) is sent here as one tuple
of its fields instead, and the controller builds the same `TestReport` from it: the same node id, location,
keywords, outcome, phase, timings and user properties, and the extra attributes pytest-xdist adds. Any other report
takes pytest's own way, and so does every report of a session that is none of kvconform's
(`harness.plugins.activation`). Between processes of one run only: nothing is written anywhere.
"""

from __future__ import annotations

from typing import Any

import pytest

from harness.plugins.activation import is_active

REPORT_TYPE = "KvconformPassedReport"
# Where the fields travel; `user_properties` keeps its own key so plugins that edit the serialised dict of a passing
# report (harness.plugins.results drops its records where no results file reads them) see it where pytest puts it.
FIELDS_KEY = "fields"
# A passing report's attributes (TestReport.__init__); a report carrying any other is sent in pytest's form.
_STANDARD = frozenset({"_id", "location", "keywords", "outcome", "longrepr", "when", "user_properties", "sections",
                       "duration", "start", "stop"})
# Keywords are names (identifiers, node names, marker names): joined by a character none of them holds.
_KEYWORD_SEPARATOR = "\0"


def compact(report: Any) -> dict | None:
    """The compact serialised form of a passing `TestReport` with standard fields only, else None."""
    if not (type(report) is pytest.TestReport and report.outcome == "passed" and report.longrepr is None
            and not report.sections and _STANDARD.issuperset(report.__dict__)):
        return None
    keywords = list(report.keywords)
    if any(_KEYWORD_SEPARATOR in keyword for keyword in keywords):
        return None
    joined = _KEYWORD_SEPARATOR.join(keywords) if keywords else None
    fields = (report.nodeid, report.location, joined, report.when, report.duration, report.start, report.stop)
    return {"$report_type": REPORT_TYPE, FIELDS_KEY: fields, "user_properties": list(report.user_properties)}


def expand(data: dict) -> pytest.TestReport:
    """The `TestReport` a compact form (`compact`) stands for, with any keys pytest-xdist added as attributes."""
    extra = {key: value for key, value in data.items() if key not in ("$report_type", FIELDS_KEY, "user_properties")}
    extra["$report_type"] = "TestReport"  # pytest's own form leaves its type name on the report it builds
    nodeid, location, keywords, when, duration, start, stop = data[FIELDS_KEY]
    keywords = dict.fromkeys(keywords.split(_KEYWORD_SEPARATOR), 1) if keywords is not None else {}
    return pytest.TestReport(nodeid, tuple(location), keywords, "passed", None, when, (), duration, start, stop,
                             data.get("user_properties") or [], **extra)


@pytest.hookimpl(tryfirst=True)
def pytest_report_to_serializable(config, report):
    """On an xdist worker of a kvconform session: a plain passing report in compact form (the controller expands
    it)."""
    if hasattr(config, "workerinput") and is_active(config):
        return compact(report)
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_report_from_serializable(config, data):
    """On the controller: a compact report back into pytest's `TestReport`."""
    if isinstance(data, dict) and data.get("$report_type") == REPORT_TYPE:
        return expand(data)
    return None
