"""Results collection: one results file with one entry per test, the same with and without pytest-xdist."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.results_model import STATUSES, load_results
from tests.once import once_per_session

DEMO_SUITE = '''
import os
import pytest

@pytest.mark.parametrize("flag", [None, True, False])
def test_cell(kvconform_record, flag):
    outcome = {"resolved_disable_hma": flag, "warnings": [], "error": None, "unknown": None}
    kvconform_record(suite="config", cell={"era": "seed", "flag": flag}, expected=outcome, actual=outcome,
                     description="a cell")
    assert flag is not False, "flag False must not resolve"

def test_not_applicable():
    pytest.skip("not HMA-capable: demo connector")

def test_inconclusive():
    from harness import outcomes
    outcomes.inconclusive("the scenario did not occur")

@pytest.fixture
def broken():
    raise RuntimeError("setup broke")

def test_setup_error(broken):
    pass

@pytest.mark.xfail(reason="known gap")
def test_known_gap():
    assert False

def test_two_records(kvconform_record):
    kvconform_record(suite="connector", cell={"connector": "A", "check": "C01"})
    kvconform_record(suite="connector", cell={"connector": "B", "check": "C01"})
'''

EXPECTED = {
    # id: (suite, status, message)
    "test_demo.py::test_cell[None]": ("config", "passed", None),
    "test_demo.py::test_cell[True]": ("config", "passed", None),
    "test_demo.py::test_cell[False]": ("config", "failed", "AssertionError: flag False must not resolve\nassert False is not False"),
    "test_demo.py::test_not_applicable": ("tests", "skipped", "not HMA-capable: demo connector"),
    "test_demo.py::test_inconclusive": ("tests", "skipped", "inconclusive: the scenario did not occur"),
    "test_demo.py::test_setup_error": ("tests", "error", "RuntimeError: setup broke"),
    "test_demo.py::test_known_gap": ("tests", "skipped", "xfail: known gap"),
    "test_demo.py::test_two_records": ("connector", "passed", None),
    "test_demo.py::test_two_records#1": ("connector", "passed", None),
}


def run_pytest(directory: Path, *args: str) -> subprocess.CompletedProcess:
    """pytest in a fresh process (as a user would run it) inside `directory`."""
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=directory,
                          capture_output=True, text=True, timeout=300, check=False)


def run_demo(folder: Path) -> dict[str, str]:
    """The demo suite run once without xdist, once with two workers and once without the option."""
    runs = {}
    for mode, extra in (("no-xdist", ()), ("xdist-2", ("-n", "2")), ("no-option", ())):
        directory = folder / mode
        directory.mkdir()
        (directory / "test_demo.py").write_text(DEMO_SUITE)
        option = () if mode == "no-option" else ("--kvconform-results", "out/results.json")
        done = run_pytest(directory, *option, *extra)
        assert done.returncode == 1, f"{mode}: the demo has one failure and one error; pytest said:\n{done.stdout}"
        runs[mode] = str(directory)
    return runs


@pytest.fixture(scope="module")
def demo_runs(request) -> dict[str, Path]:
    """The demo runs, once per test session however xdist spreads this module's tests."""
    return {mode: Path(path) for mode, path in once_per_session(request, "demo-suite-runs", run_demo).items()}


@pytest.fixture(params=["no-xdist", "xdist-2"])
def collected(request, demo_runs):
    """The results file of the demo suite, run without xdist and with two workers."""
    return load_results(demo_runs[request.param] / "out" / "results.json"), request.param


def _comparable(path) -> dict:
    document = load_results(path)
    return {e["id"]: {k: v for k, v in e.items() if k != "duration"} for e in document.results}


def test_one_entry_per_test_with_status_and_message(collected):
    document, mode = collected
    found = {e["id"]: (e["suite"], e["status"], e["message"]) for e in document.results}
    assert found == EXPECTED, f"{mode}: entries differ from the hand-written expectation"


def test_a_skip_carries_its_typed_cause(collected):
    """A skip's typed cause travels to the results file (from an xdist worker too); a plain skip has none."""
    document, mode = collected
    causes = {e["id"]: e["skip_cause"] for e in document.results if e["status"] == "skipped"}
    assert causes["test_demo.py::test_inconclusive"] == {"kind": "inconclusive", "reason": "the scenario did not occur",
                                                        "needs": None, "packages": []}, mode
    assert causes["test_demo.py::test_not_applicable"] is None, f"{mode}: a plain skip is read by no wording"


def test_records_carry_cell_expected_actual_and_extra(collected):
    document, _ = collected
    entry = next(e for e in document.results if e["id"] == "test_demo.py::test_cell[True]")
    outcome = {"resolved_disable_hma": True, "warnings": [], "error": None, "unknown": None}
    assert entry["cell"] == {"era": "seed", "flag": True}
    # an outcome in the typed form (no warnings, no error) is kept as it was recorded
    assert entry["expected"] == outcome and entry["actual"] == outcome
    assert entry["extra"] == {"description": "a cell"}, "extra keyword arguments of kvconform_record are kept"
    assert entry["params"] == {"flag": True}, "pytest parametrize values are kept"
    assert all(e["status"] in STATUSES and e["duration"] >= 0 for e in document.results)


def test_run_info_describes_the_run(collected):
    document, mode = collected
    info = document.run_info
    for key in ("kvconform_version", "git_commit", "target", "platform", "python_version", "torch_version",
                "machine", "started_at", "finished_at", "wall_seconds"):
        assert key in info, f"run_info lacks {key}"
    assert info["started_at"] <= info["finished_at"]
    assert info["wall_seconds"] >= 0
    assert info["workers"] == (2 if mode == "xdist-2" else None), "the controller counts the workers it heard from"


def test_xdist_and_plain_runs_give_the_same_entries(demo_runs):
    plain = _comparable(demo_runs["no-xdist"] / "out" / "results.json")
    assert plain == _comparable(demo_runs["xdist-2"] / "out" / "results.json")


def test_no_results_file_without_the_option(demo_runs):
    assert not list(demo_runs["no-option"].rglob("*.json")), "nothing is written unless --kvconform-results is given"


def test_no_shared_temporary_files_are_left(demo_runs):
    for mode in ("no-xdist", "xdist-2"):
        written = sorted(p.name for p in (demo_runs[mode] / "out").iterdir())
        assert written == ["results.json"], f"{mode}: only the results file may be written, found {written}"
        strays = [p.name for p in demo_runs[mode].rglob("*.tmp")]
        assert strays == [], f"{mode}: temporary files left behind: {strays}"


def test_a_crashed_worker_still_yields_an_entry(tmp_path):
    (tmp_path / "test_crash.py").write_text(
        "import os\n"
        "def test_ok(kvconform_record):\n"
        "    kvconform_record(suite='config', cell={'era': 'seed'})\n"
        "def test_crash():\n"
        "    os._exit(3)\n"
    )
    run_pytest(tmp_path, "-n", "2", "--kvconform-results", "r.json")
    entries = {e["id"]: e["status"] for e in load_results(tmp_path / "r.json").results}
    assert entries == {"test_crash.py::test_ok": "passed", "test_crash.py::test_crash": "failed"}, (
        f"the crashed test is reported as failed, the other one from its worker's output: {entries}")


def test_results_file_is_plain_json_with_schema(demo_runs):
    data = json.loads((demo_runs["no-xdist"] / "out" / "results.json").read_text())
    assert data["format"] == "kvconform-results" and data["schema_version"] == 5
    assert len(data["runs"]) == 1 and data["runs"][0] == data["run_info"]


def test_an_unwritable_results_path_is_one_usage_error(tmp_path):
    (tmp_path / "blocker").write_text("a file, not a folder")
    (tmp_path / "test_one.py").write_text("def test_one():\n    pass\n")
    done = run_pytest(tmp_path, "--kvconform-results", "blocker/results.json")
    assert done.returncode == 4, "pytest's usage-error status"
    assert "--kvconform-results blocker/results.json: cannot write there" in done.stderr
    assert "Traceback" not in done.stderr
