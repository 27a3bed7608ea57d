"""What an xdist worker sends the controller: passing reports lose their kvconform records only when nothing on
the controller reads them (`harness.plugins.results.pytest_report_to_serializable`)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.plugins.results import RECORD_KEY, pytest_report_to_serializable

_RECORD = (RECORD_KEY, {"suite": "config", "cell": {"era": "seed"}})
_OTHER = ("owner", "someone else's property")


def _serialized(*, worker=True, results=None, junit=None, outcome="passed"):
    options = {"kvconform_results": results}
    config = SimpleNamespace(getoption=lambda name, default=None: options.get(name, default),
                             option=SimpleNamespace(xmlpath=junit))
    if worker:
        config.workerinput = {}
    report = SimpleNamespace(passed=outcome == "passed")
    hook = pytest_report_to_serializable(config, report)
    next(hook)
    with pytest.raises(StopIteration) as done:
        hook.send({"outcome": outcome, "user_properties": [_RECORD, _OTHER]})
    return done.value.value["user_properties"]


@pytest.mark.parametrize("kwargs", [{}, {"junit": "junit.xml"}], ids=["nothing", "JUnit XML (it leaves records out)"])
def test_a_worker_drops_the_records_of_a_passing_report_nobody_reads(kwargs):
    assert _serialized(**kwargs) == [_OTHER], "only kvconform's own record goes, other properties stay"


@pytest.mark.parametrize("why,kwargs", [
    ("results are collected (a crashed worker's tests fall back on the controller's reports)",
     {"results": "out/results.json"}),
    ("a failing report's record groups the console summary", {"outcome": "failed"}),
    ("a skipped report keeps its record", {"outcome": "skipped"}),
    ("only a worker sends reports", {"worker": False}),
])
def test_records_stay_when_something_reads_them(why, kwargs):
    assert _serialized(**kwargs) == [_RECORD, _OTHER], why


def _made_report(path, longrepr, skipped=True):
    from harness.plugins.results import pytest_runtest_makereport

    item = SimpleNamespace(path=path)
    hook = pytest_runtest_makereport(item, None)
    next(hook)
    with pytest.raises(StopIteration) as done:
        hook.send(SimpleNamespace(skipped=skipped, longrepr=longrepr))
    return done.value.value.longrepr


def test_a_suite_skip_names_its_file_without_this_machines_path():
    """pytest keeps a skip's file as an absolute path and `pytest --junitxml` writes it into the skip's text."""
    from harness.plugins.activation import SUITES_DIR

    suite_file = SUITES_DIR / "connector" / "test_api.py"
    assert _made_report(suite_file, (str(suite_file), 28, "why")) == ("suites/connector/test_api.py", 28, "why")
    elsewhere = "/somewhere/else/test_mine.py"
    assert _made_report(Path(elsewhere), (elsewhere, 3, "why")) == (elsewhere, 3, "why"), "not a kvconform suite"
