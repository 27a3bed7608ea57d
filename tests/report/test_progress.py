"""Progress of `kvconform report`: the counting plugin inside pytest and the one line per pass it prints."""

from __future__ import annotations

import io
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.cli import main
from harness.report.progress import PLUGIN, PROGRESS_ENV, PassProgress, ProgressMonitor
from harness.report.pytest_output import print_pytest_log, wants_pytest_output

REPO = Path(__file__).resolve().parents[2]
THREE_TESTS = "import pytest\n\n@pytest.mark.parametrize('n', [1, 2, 3])\ndef test_n(n):\n    assert n != 3, 'three fails'\n"


@pytest.fixture
def three_tests(tmp_path):
    path = tmp_path / "suite" / "test_three.py"
    path.parent.mkdir()
    path.write_text(THREE_TESTS)
    return path


@pytest.mark.parametrize("xdist", [["-p", "no:xdist"], ["-n", "2"]], ids=["plain", "xdist"])
def test_plugin_counts_done_and_total(tmp_path, three_tests, xdist):
    progress = tmp_path / "progress"
    subprocess.run([sys.executable, "-m", "pytest", "-p", PLUGIN, "-p", "no:cacheprovider", "-q", *xdist,
                    str(three_tests)], cwd=REPO, env={**__import__("os").environ, PROGRESS_ENV: str(progress)},
                   capture_output=True, text=True, timeout=300, check=False)
    assert progress.read_text().split() == ["3", "3"], "done and total, written by the main (controller) process"


def test_plugin_counts_an_era_item_as_its_cells(tmp_path):
    """`kvconform report` runs the config matrix one item per era, each writing one results entry per cell: its
    progress counts cells, as the pass's results do."""
    from suites.config.matrix import cells_for

    progress = tmp_path / "progress"
    subprocess.run([sys.executable, "-m", "pytest", "-p", PLUGIN, "-p", "no:cacheprovider", "-p", "no:xdist", "-q",
                    "suites/config/test_matrix.py", "--vllm-version", "seed", "--config-matrix-items", "era"],
                   cwd=REPO, env={**__import__("os").environ, PROGRESS_ENV: str(progress)},
                   capture_output=True, text=True, timeout=300, check=False)
    assert progress.read_text().split() == [str(len(cells_for("seed")))] * 2


def test_describe_says_what_runs_done_total_and_time_left(tmp_path):
    start = time.monotonic() - 100
    progress = PassProgress("config matrix", tmp_path / "p", started=start)
    assert progress.describe().startswith("config matrix: collecting (")
    (tmp_path / "p").write_text("250 1000\n")
    progress.refresh(now=start + 90)
    # 90 s of start-up and a first era say nothing of the rate: no estimate from one reading
    assert progress.describe(now=start + 90) == "config matrix: 250/1,000 tests"
    (tmp_path / "p").write_text("500 1000\n")
    progress.refresh(now=start + 100)
    # 250 tests in the 10 s since the first reading: the 500 left take about 20 s
    assert progress.describe(now=start + 100) == "config matrix: 500/1,000 tests, about 20 s left"
    progress.finished = progress.started + 112
    assert progress.describe() == "config matrix: 500/1,000 tests, done in 112 s"


def test_monitor_prints_one_line_per_pass_start_and_end(tmp_path):
    stream = io.StringIO()
    monitor = ProgressMonitor(stream, interactive=False)
    (tmp_path / "p").write_text("3 3\n")
    progress = monitor.add("allocator suite", tmp_path / "p")
    monitor.finish(progress)
    monitor.close()
    lines = stream.getvalue().splitlines()
    assert lines[0] == "kvconform report: allocator suite: started"
    assert lines[1].startswith("kvconform report: allocator suite: 3/3 tests, done in ")


def test_report_prints_progress_lines_not_dots_and_lists_failures(tmp_path, capfd, three_tests):
    status = main(["report", "--suite", str(three_tests), "-n", "0", "--output-dir", str(tmp_path / "out")])
    out = capfd.readouterr().out
    assert status == 1
    assert "[100%]" not in out, "pytest's dots are not shown by default"
    assert f"{three_tests.name}" in out and "3/3 tests, done in" in out
    assert "FAILED " in out and "three fails" in out, "the failure summary is printed after the pass"


@pytest.mark.parametrize(("args", "wanted"), [(["-q"], True), (["-vv"], True), (["--verbose"], True),
                                               (["-k", "x"], False), ([], False)])
def test_pytest_output_on_request(args, wanted):
    assert wants_pytest_output(args) is wanted


GROUPED_LOG = """\
suites/config/test_matrix.py FFFF
========= kvconform: 4 failing cells, grouped by what went wrong =========
4 config cells: expected `HMA off`, got `HMA on` - first: seed-T-cuda-noconn
see reports/compatibility.md
======================== 4 failed in 1.20s ========================
"""


def test_the_console_plugins_grouped_failures_are_what_the_report_prints(tmp_path):
    log = tmp_path / "pass.log"
    log.write_text(GROUPED_LOG)
    stream = io.StringIO()
    print_pytest_log(log, 1, stream)
    assert stream.getvalue().splitlines() == GROUPED_LOG.splitlines()[1:4], (
        "the grouped block (rule and group lines, without pytest's closing rule) is printed, not the log's tail")


def test_the_junit_plugins_scratch_path_is_not_printed(tmp_path):
    # With `-- --junitxml F` each pass writes its part into a scratch folder that is gone once the run ends.
    log = tmp_path / "pass.log"
    lines = GROUPED_LOG.splitlines()
    lines.insert(4, "----- generated xml file: /tmp/kvconform-report-x/connector-suite.junit.xml -----")
    log.write_text("\n".join(lines) + "\n")
    stream = io.StringIO()
    print_pytest_log(log, 1, stream)
    assert stream.getvalue().splitlines() == [
        "========= kvconform: 4 failing cells, grouped by what went wrong =========",
        "4 config cells: expected `HMA off`, got `HMA on` - first: seed-T-cuda-noconn",
        "see reports/compatibility.md",
    ]
