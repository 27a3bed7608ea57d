"""`kvconform report`, `diff` and `merge`: exit codes, outputs, and one clear line for every bad input."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

import pytest

from harness.cli import main
from harness.report.passes import (NOT_RUN, TIMED, UNTIMED, PytestPass, benchmark_mode, benchmark_record,
                                   capped_examples, combine_passes, may_start, pass_environment, plan_passes,
                                   runs_benchmarks)
from harness.report.results_file import compact_results, expected_outcome
from harness.results_model import ResultsDocument, load_results, make_entry
from reference_impl.vocabulary import NO_CONNECTOR
from tests.report.md_helpers import table_after
from tests.report.synthetic import config_entry, groups_record, outcome, run_info

# A run of config cells of the seed era: the main page, the era's page, the changes page, HTML and results.
REPORT_FILES = ["compatibility-changes.md", "compatibility-seed.md", "compatibility.html", "compatibility.md",
                "results.json.gz"]
REPO = Path(__file__).resolve().parents[2]


def write_results(path, entries, **info) -> str:
    path.write_text(ResultsDocument(run_info=run_info(**info), results=entries).dumps())
    return str(path)


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def assert_one_line_error(err: str, expected: str) -> None:
    assert "Traceback" not in err
    assert err.count("\n") == 1, f"exactly one line on stderr, got {err!r}"
    assert expected in err, f"{expected!r} not in {err!r}"


# --- report --from ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("statuses", "expected_exit"), [
    (["passed", "passed"], 0),
    (["passed", "failed"], 1),
    (["passed", "error"], 1),
    (["skipped", "skipped"], 5),
    ([], 5),
])
def test_report_from_exit_status(tmp_path, capsys, statuses, expected_exit):
    entries = [config_entry(flag=flag, status=status) for flag, status in zip((None, True), statuses)]
    source = write_results(tmp_path / "in.json", entries)
    status, out, _ = run_cli(capsys, "report", "--from", source, "--output-dir", str(tmp_path / "out"))
    assert status == expected_exit
    expected_files = REPORT_FILES if entries else ["compatibility.html", "compatibility.md", "results.json.gz"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == expected_files
    assert str(tmp_path / "out" / "compatibility.md") in out, "the command says where the report is"
    if expected_exit == 1:
        assert "did not behave as expected" in out


def test_report_from_writes_the_same_results_back(tmp_path, capsys):
    """results.json.gz keeps every entry's evidence; only params repeating the cell and expected keys equal to
    actual's (a passed cell) are left out, and they come back by overlaying expected on actual."""
    failing = config_entry(flag=True, status="failed", actual=outcome(resolved=True),
                           expected=outcome(resolved=False, rules=["§2.2"]), message="differs")
    passing = config_entry(actual=outcome(resolved=False, rules=["flag_none"]),
                           expected=outcome(resolved=False, rules=["§2.2 1"]))
    passing["params"] = {"config_cell": "Cell(era='seed', ...)"}
    source = write_results(tmp_path / "in.json", [passing, failing])
    run_cli(capsys, "report", "--from", source, "--output-dir", str(tmp_path / "out"))
    written = load_results(tmp_path / "out" / "results.json.gz")
    original = load_results(source)
    assert written.run_info == original.run_info and len(written.results) == 2
    kept_pass, kept_fail = sorted(written.results, key=lambda e: e["status"], reverse=True)
    assert kept_fail == failing, "a failing entry is kept whole"
    assert kept_pass["params"] == {} and kept_pass["expected"] == {"rules": ["§2.2 1"]}
    assert expected_outcome(kept_pass) == passing["expected"] and kept_pass["actual"] == passing["actual"]
    assert compact_results(written).to_json() == written.to_json(), "compacting twice changes nothing"
    status, out, _ = run_cli(capsys, "diff", source, str(tmp_path / "out" / "results.json.gz"))
    assert status == 0, out


def test_report_outside_the_checkout_links_the_rules_page_that_exists(tmp_path, capsys):
    """A report written with --output-dir anywhere links docs/rules.md by a path that resolves from there (the
    pages' own "../docs/rules.md" is right only for the checkout's reports/ folder)."""
    import re

    failing = config_entry(flag=True, status="failed", actual=outcome(resolved=True),
                           expected=outcome(resolved=False, rules=["§2.2"]), message="differs")
    source = write_results(tmp_path / "in.json", [failing])
    out_dir = tmp_path / "deep" / "out"
    run_cli(capsys, "report", "--from", source, "--output-dir", str(out_dir))
    rules = Path(__file__).resolve().parents[2] / "docs" / "rules.md"
    for page in ("compatibility.md", "compatibility.html"):
        text = (out_dir / page).read_text(encoding="utf-8")
        targets = set(re.findall(r"""[("]([^()"]*rules\.md)#""", text))
        assert targets, f"{page} links no rules section"
        for target in targets:
            assert (out_dir / target).resolve() == rules, f"{page} links {target}, not {rules} from {out_dir}"


def test_report_from_filters_by_era_and_connector(tmp_path, capsys):
    entries = [config_entry("seed"), config_entry("seed", connector="NixlConnector"),
               config_entry("v0.33"),
               make_entry(nodeid="suites/allocator/t.py::a", suite="allocator", status="passed",
                          cell={"target": "reference", "scenario": "s", "section": "3"})]
    source = write_results(tmp_path / "in.json", entries)
    run_cli(capsys, "report", "--from", source, "--output-dir", str(tmp_path / "out"), "--vllm-version", "0.13.0",
            "--kv-connector", NO_CONNECTOR)
    kept = load_results(tmp_path / "out" / "results.json.gz").results
    assert sorted(e["id"] for e in kept) == sorted([entries[0]["id"], entries[3]["id"]]), (
        "0.13.0 is the seed era; entries without an era or connector stay")


def test_report_from_a_connector_the_file_lacks_is_exit_2_and_writes_nothing(tmp_path, capsys):
    # A misspelt --kv-connector used to filter every connector cell out and write an empty report (exit 5).
    entries = [_connector_entry("0.33.0", "ExampleConnector", "C01 declares-hma", "passed"),
               config_entry("seed", connector="NixlConnector")]
    source = write_results(tmp_path / "in.json", entries)
    status, out, err = run_cli(capsys, "report", "--from", source, "--output-dir", str(tmp_path / "out"),
                               "--kv-connector", "ExampleConector")
    assert status == 2 and out == ""
    assert_one_line_error(err, f"kvconform report: --kv-connector ExampleConector: no cell of {source} names this "
                               "connector; accepted: NixlConnector, vllm-0.33.0:ExampleConnector\n")
    assert not (tmp_path / "out").exists()
    allocator = make_entry(nodeid="suites/allocator/t.py::a", suite="allocator", status="passed",
                           cell={"target": "reference", "scenario": "s", "section": "3"})
    only_allocator = write_results(tmp_path / "allocator.json", [allocator])
    status, _, err = run_cli(capsys, "report", "--from", only_allocator, "--output-dir", str(tmp_path / "out"),
                             "--kv-connector", "Mine")
    assert status == 2
    assert_one_line_error(err, "accepted: none (the file has no connector cells)")


@pytest.mark.parametrize(("content", "expected"), [
    ("{broken", "is not valid JSON"),
    (json.dumps({"format": "junit", "results": []}), "not a kvconform results file (format is 'junit'"),
    (json.dumps({"format": "kvconform-results", "schema_version": 6}),
     "schema_version is 6 (a number); accepted: 1, 2, 3, 4 or 5 (the schemas this kvconform reads)"),
])
def test_report_from_bad_file_is_exit_2_and_writes_nothing(tmp_path, capsys, content, expected):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    (out_dir / "compatibility.md").write_text("previous report")
    status, _, err = run_cli(capsys, "report", "--from", str(bad), "--output-dir", str(out_dir))
    assert status == 2
    assert_one_line_error(err, expected)
    assert sorted(p.name for p in out_dir.iterdir()) == ["compatibility.md"]
    assert (out_dir / "compatibility.md").read_text() == "previous report", "the old report is untouched"


# What `kvconform report --from` imported, printed by a fresh interpreter after rendering.
_IMPORTS_PROBE = ("import sys; from harness.cli import main; status = main(sys.argv[1:]); "
                  "print(sorted(m for m in sys.modules if m in ('torch', 'reference_impl.engine.presets'))); "
                  "sys.exit(status)")


def test_report_from_a_current_file_renders_without_torch(tmp_path):
    """Rendering reads each connector cell's KV cache group count from its entry (`harness.results_model`): it
    imports neither torch nor the model presets (a third of `report --from`'s time when it did). A file written
    before the count was recorded (schema 4) gets it from the presets as it loads, which imports both: the probe
    tells the two apart."""
    import subprocess

    entries = [config_entry()] + [
        make_entry(nodeid=f"suites/connector/test_x.py::test_c14[Vendor-{preset}]", suite="connector",
                   status="passed", cell={"connector": "Vendor", "check": "C14 round-trip-bytes", "tier": "MUST",
                                          "preset": preset},
                   extra={"description": "d", "evidence": None, **groups_record(preset)})
        for preset in ("fa_only", "fa+swa")]
    current = write_results(tmp_path / "current.json", entries)
    older = tmp_path / "older.json"
    older.write_text(json.dumps({**json.loads(Path(current).read_text()), "schema_version": 4}))
    imported = {}
    for name, source in (("current", current), ("older", str(older))):
        done = subprocess.run([sys.executable, "-c", _IMPORTS_PROBE, "report", "--from", source, "--output-dir",
                               str(tmp_path / name)], capture_output=True, text=True, cwd=REPO,
                              env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        imported[name] = json.loads(done.stdout.strip().splitlines()[-1].replace("'", '"'))
    assert imported["current"] == [], f"rendering a schema-5 file imported {imported['current']}"
    assert imported["older"] == ["reference_impl.engine.presets", "torch"]
    assert (tmp_path / "current" / "compatibility.md").read_text() == (tmp_path / "older" / "compatibility.md").read_text()


def test_report_from_missing_file(tmp_path, capsys):
    status, _, err = run_cli(capsys, "report", "--from", str(tmp_path / "nope.json"), "--output-dir", str(tmp_path))
    assert status == 2
    assert_one_line_error(err, "nope.json: no such file")


def test_report_unwritable_output_dir(tmp_path, capsys):
    source = write_results(tmp_path / "in.json", [config_entry()])
    (tmp_path / "blocker").write_text("a file")
    status, _, err = run_cli(capsys, "report", "--from", source, "--output-dir", str(tmp_path / "blocker" / "out"))
    assert status == 2
    assert_one_line_error(err, f"--output-dir {tmp_path / 'blocker' / 'out'}: cannot write there")


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux's /proc (a folder no file can be created in)")
def test_report_output_dir_where_no_file_can_be_made(tmp_path, capsys):
    """Root passes the permission check on /proc, yet nothing can be created there: refused before any run."""
    source = write_results(tmp_path / "in.json", [config_entry()])
    status, _, err = run_cli(capsys, "report", "--from", source, "--output-dir", "/proc/kvconform-out")
    assert status == 2, f"an --output-dir under /proc must be refused up front, got exit {status}: {err}"
    assert_one_line_error(err, "--output-dir /proc/kvconform-out: cannot write there (/proc: ")


@pytest.mark.parametrize(("argv", "expected"), [
    (["--vllm-version", "9.9.9"], "--vllm-version: '9.9.9'"),
    (["--vllm-version", "newest"], "--vllm-version: 'newest'"),
    (["--target", "x:y"], "--target and --from exclude each other"),
    (["--timing"], "--timing and --from exclude each other"),
    (["--kv-engine", "vllm"], "--kv-engine and --from exclude each other"),
    (["-k", "something"], "pytest arguments (-k something) make no sense with --from"),
])
def test_report_from_usage_errors(tmp_path, capsys, argv, expected):
    source = write_results(tmp_path / "in.json", [config_entry()])
    status, _, err = run_cli(capsys, "report", "--from", source, "--output-dir", str(tmp_path / "out"), *argv)
    assert status == 2
    assert_one_line_error(err, expected)
    assert not (tmp_path / "out" / "compatibility.md").exists()


# --- report --target (checked before anything runs) ---------------------------------------------------

@pytest.fixture
def target_modules(tmp_path, monkeypatch):
    """Importable modules with good and bad targets."""
    (tmp_path / "kvc_targets.py").write_text(textwrap.dedent('''
        def good(case):
            return {}
        def two_args(case, extra):
            return {}
        def no_args():
            return {}
        NOT_CALLABLE = 42
    '''))
    (tmp_path / "kvc_broken_target.py").write_text("raise RuntimeError('cannot import me')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    sys.modules.pop("kvc_targets", None)
    sys.modules.pop("kvc_broken_target", None)


@pytest.mark.parametrize(("spec", "expected"), [
    ("kvc_missing_module:f", "--target kvc_missing_module:f: module 'kvc_missing_module' does not import "
                             "(no module named 'kvc_missing_module')"),
    ("kvc_broken_target:f", "module 'kvc_broken_target' does not import (RuntimeError: cannot import me)"),
    ("kvc_targets:absent", "module 'kvc_targets' has no attribute 'absent'"),
    ("kvc_targets", "not of the form module:callable"),
    ("kvc_targets:NOT_CALLABLE", "int object is not callable"),
    ("kvc_targets:two_args", "callable has signature (case, extra); expected one positional parameter"),
    ("kvc_targets:no_args", "callable has signature (); expected one positional parameter"),
])
def test_report_bad_target_is_exit_4_before_running(tmp_path, capsys, target_modules, spec, expected):
    status, out, err = run_cli(capsys, "report", "--target", spec, "--output-dir", str(tmp_path / "out"))
    assert status == 4
    assert_one_line_error(err, expected)
    assert "running" not in out, "pytest is not started for a target that does not load"
    assert not (tmp_path / "out").exists(), "a run that exits 4 creates no --output-dir"


# --- report running a suite ---------------------------------------------------------------------------

TINY_SUITE = '''
import pytest

@pytest.mark.parametrize("flag", [None, False])
def test_cell(kvconform_record, flag):
    outcome = {"resolved_disable_hma": bool(flag is None), "warnings": [], "error": None, "unknown": None}
    kvconform_record(suite="config", cell={"era": "seed", "flag": flag, "platform": "cuda", "features": "none",
                                           "connector": "none", "stage": "config"},
                     expected=outcome, actual=outcome)
    assert flag is None, "this cell deliberately disagrees"
'''


@pytest.fixture
def tiny_suite(tmp_path):
    path = tmp_path / "suite" / "test_tiny.py"
    path.parent.mkdir()
    path.write_text(TINY_SUITE)
    return str(path)


def test_report_runs_the_suite_with_xdist_and_writes_three_files(tmp_path, capfd, tiny_suite):
    out_dir = tmp_path / "out"
    status = main(["report", "--suite", tiny_suite, "-n", "2", "--output-dir", str(out_dir), "--", "-q"])
    captured = capfd.readouterr()
    assert status == 1, "one cell fails"
    assert sorted(p.name for p in out_dir.iterdir()) == REPORT_FILES
    assert "[100%]" in captured.out, "with -q after --, pytest's own progress is shown"
    assert f"Report: {out_dir / 'compatibility.md'}" in captured.out
    assert "1 of 2 tests that ran did not behave as expected" in captured.out
    results = load_results(out_dir / "results.json.gz")
    assert {e["id"].rsplit("::", 1)[1]: e["status"] for e in results.results} == {
        "test_cell[None]": "passed", "test_cell[False]": "failed"}
    assert results.run_info["report_wall_seconds"] > 0 and results.run_info["passes"][0]["workers"] == 2
    assert not [a for a in results.run_info["passes"][0]["pytest_args"] if a.startswith("--kvconform-results")]
    assert results.run_info["target"] == "reference", "run_info names the target, also the default one"
    assert not any("kvconform-report-" in arg for arg in results.run_info["argv"]), "no temporary paths"
    assert str(tmp_path) not in json.dumps(results.to_json()), "no absolute path of this machine"
    md = (out_dir / "compatibility.md").read_text()
    assert "1 of 2 matrix cases agree with the oracle" in md


def test_report_nothing_selected_is_exit_5(tmp_path, capfd, tiny_suite):
    status = main(["report", "--suite", tiny_suite, "-n", "0", "--output-dir", str(tmp_path / "out"),
                   "--", "-k", "no_such_test"])
    captured = capfd.readouterr()
    assert status == 5
    assert "nothing ran" in captured.err
    assert not (tmp_path / "out").exists(), "no report (not even its folder) for a run that ran nothing"


def test_report_junit_covers_every_pass(tmp_path, capfd, tiny_suite, monkeypatch):
    """`-- --junitxml FILE` on a run of two pytest passes (the matrix beside the other suites): one file with
    one <testsuite> per pass and one <testcase> per test; no kvconform record (its home is the results file)
    and no absolute path of this machine."""
    import xml.etree.ElementTree as ET

    monkeypatch.chdir(REPO)
    junit = tmp_path / "ci" / "junit.xml"
    status = main(["report", "--suite", "suites.config", "--suite", tiny_suite, "--vllm-version", "seed", "-n", "0",
                   "--output-dir", str(tmp_path / "out"), "--", f"--junitxml={junit}"])
    capfd.readouterr()
    assert status == 1, "the tiny suite fails one cell"
    results = load_results(tmp_path / "out" / "results.json.gz")
    assert len(results.run_info["passes"]) == 2
    root = ET.parse(junit).getroot()
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == ["kvconform config matrix", "kvconform test_tiny.py suite"]
    cases = root.findall(".//testcase")
    assert len(cases) == len(results.results) == int(root.get("tests"))
    assert int(root.get("failures")) == 1
    assert not [p for p in root.iter("property") if p.get("name") == "kvconform"], "no record in JUnit"
    text = junit.read_text()
    assert str(REPO) not in text and str(tmp_path) not in text, "no absolute path of this machine"
    assert not [a for p in results.run_info["passes"] for a in p["pytest_args"] if a.startswith("--junitxml")], \
        "no scratch paths"


def test_junit_option_spellings():
    from harness.junit import split_junit_option
    assert split_junit_option(["-x", "--junitxml", "a.xml", "-k", "seed"]) == ("a.xml", ["-x", "-k", "seed"])
    assert split_junit_option(["--junit-xml=b.xml", "--junitxml=c.xml"]) == ("c.xml", [])
    assert split_junit_option(["-q"]) == (None, ["-q"])


# --- diff ---------------------------------------------------------------------------------------------

def diff_pair(tmp_path):
    base = [config_entry(flag=None, actual=outcome(resolved=False)),
            config_entry(flag=True, actual=outcome(resolved=True)),
            config_entry(flag=False, actual=outcome(resolved=False))]
    head = [config_entry(flag=None, actual=outcome(resolved=True, warnings=["W-B1"])),
            config_entry(flag=True, actual=outcome(resolved=True)),
            config_entry(flag=False, platform="cpu", actual=outcome(resolved=False))]
    return write_results(tmp_path / "base.json", base), write_results(tmp_path / "head.json", head)


def test_diff_lists_changed_added_removed_cells(tmp_path, capsys):
    base, head = diff_pair(tmp_path)
    status, out, _ = run_cli(capsys, "diff", base, head, "--all")
    assert status == 3, "nothing regressed, but one cell is in one run only: the scopes differ"
    cell = "config era=seed flag={} platform={} features=none connector=noconn stage=config"
    assert out.splitlines() == [
        f"kvconform diff {base} -> {head}: 0 regressed, 0 fixed, 1 changed; scopes differ: only in base 1 cell: "
        f"config 1 (eras seed); only in head 1 cell: config 1 (eras seed)",
        f"changed: {cell.format('null', 'cuda')}: passed ✅ on -> passed ⚪ off (warning: W-B1)",
        f"only in base: {cell.format('false', 'cuda')}: passed ✅ on -> —",
        f"only in head: {cell.format('false', 'cpu')}: — -> passed ✅ on",
    ]


def test_diff_markdown_for_a_pull_request(tmp_path, capsys):
    base, head = diff_pair(tmp_path)
    status, out, _ = run_cli(capsys, "diff", base, head, "--format", "md", "--all")
    assert status == 3
    lines = out.splitlines()
    assert lines[0].startswith(f"**kvconform diff {base} -> {head}: 0 regressed, 0 fixed, 1 changed; scopes differ")
    assert lines[2:4] == ["| change | cell | base | head |", "|---|---|---|---|"]
    assert len(lines) == 7


def test_diff_groups_changes_by_what_went_wrong(tmp_path, capsys):
    """A target that breaks one rule in many cells reads as one line per way of failing."""
    good, bad = outcome(resolved=True), outcome(resolved=False)
    platforms = ["cuda", "rocm", "cpu", "xpu"]
    base = [config_entry(platform=p, features=f, actual=good) for p in platforms for f in ("none", "chunked")]
    base.append(config_entry(platform="tpu", actual=good))
    head = [config_entry(platform=p, features=f, actual=bad, status="failed",
                         message=f"Failed: expected `HMA off`, got `HMA on` (§3.2: {f})\nconfig cell {p}-{f} ...")
            for p in platforms for f in ("none", "chunked")]
    head.append(config_entry(platform="tpu", actual=outcome(resolved=True, warnings=["W-B1"])))
    status, out, _ = run_cli(capsys, "diff", write_results(tmp_path / "base.json", base),
                             write_results(tmp_path / "head.json", head))
    assert status == 1
    lines = out.splitlines()
    assert lines[0].endswith("/head.json: 8 regressed, 0 fixed, 1 changed")
    assert lines[1:] == [
        "regressed:",
        "  4 config cells: now failed: expected `HMA off`, got `HMA on` (§3.2: chunked) — first: seed-N-cpu-chunked-noconn-config",
        "  4 config cells: now failed: expected `HMA off`, got `HMA on` (§3.2: none) — first: seed-N-cpu-none-noconn-config",
        "changed:",
        "  1 config cell: passed ⚪ off -> passed ⚪ off (warning: W-B1) — seed-N-tpu-none-noconn-config",
    ]
    status, md, _ = run_cli(capsys, "diff", str(tmp_path / "head.json"), str(tmp_path / "base.json"), "--format", "md")
    assert status == 0, "fixing cells is no regression"
    rows = [line for line in md.splitlines() if line.startswith("| fixed | 4 |")]
    assert rows == [
        "| fixed | 4 | config | now passed ⚪ off, was failed: expected `HMA off`, got `HMA on` (§3.2: chunked) | seed-N-cpu-chunked-noconn-config |",
        "| fixed | 4 | config | now passed ⚪ off, was failed: expected `HMA off`, got `HMA on` (§3.2: none) | seed-N-cpu-none-noconn-config |",
    ], md


def test_diff_caps_the_groups_for_a_pull_request_comment(tmp_path, capsys):
    from harness.commands.diff import MAX_GROUPS
    base = [config_entry(era=f"e{i:03d}") for i in range(MAX_GROUPS + 10)]
    head = [config_entry(era=f"e{i:03d}", status="failed", message=f"Failed: way {i}") for i in range(MAX_GROUPS + 10)]
    _, out, _ = run_cli(capsys, "diff", write_results(tmp_path / "b.json", base), write_results(tmp_path / "h.json", head))
    lines = out.splitlines()
    assert lines[1] == "regressed:"
    assert len([line for line in lines if line.startswith("  1 config cell: now failed")]) == MAX_GROUPS
    assert lines[-1] == f"… and 10 more groups (10 cells), see {tmp_path / 'h.json'} (or kvconform diff --all)"


def scope_pair(tmp_path):
    """A base run of every era against a head run of one era, where two cells of that era regressed: the
    situation where "removed" groups used to hide the regressions."""
    eras = [f"e{i:02d}" for i in range(40)]
    base = [config_entry(era=era, platform=p) for era in eras for p in ("cuda", "rocm", "cpu")]
    head = [config_entry(era="e07", platform=p) for p in ("cuda", "rocm", "cpu")]
    for entry in head[:2]:
        entry.update(status="failed", message="Failed: expected `HMA on`, got `HMA off` (§2.2 1)")
    head.append(config_entry(era="e99", status="failed", message="Failed: boom"))
    return write_results(tmp_path / "base.json", base), write_results(tmp_path / "head.json", head)


def test_diff_regressions_first_whatever_the_scopes(tmp_path, capsys):
    base, head = scope_pair(tmp_path)
    status, out, _ = run_cli(capsys, "diff", base, head)
    assert status == 1
    lines = out.splitlines()
    assert lines[0] == (f"kvconform diff {base} -> {head}: 3 regressed, 0 fixed, 0 changed; scopes differ: only in base "
                        "117 cells: config 117 (eras e00, e01, e02, e03, e04, e05, … (39 eras)); only in head 1 cell: "
                        "config 1 (eras e99)")
    assert lines[1:] == [
        "regressed:",
        "  2 config cells: now failed: expected `HMA on`, got `HMA off` (§2.2 1) — first: e07-N-cuda-none-noconn-config",
        "  1 config cell: added, failed: boom — e99-N-cuda-none-noconn-config",
    ], "the cells of one run only are one line, the regressions are all listed"


def test_diff_changed_only_and_the_scope_exit_status(tmp_path, capsys):
    base, head = scope_pair(tmp_path)
    status, out, _ = run_cli(capsys, "diff", base, head, "--changed-only")
    assert status == 1
    assert out.splitlines()[2].startswith("  2 config cells: now failed"), out
    assert "boom" not in out and "(--changed-only: not judged)" in out.splitlines()[0]
    fixed_head = write_results(tmp_path / "fixed.json", [config_entry(era="e07", platform=p) for p in ("cuda", "rocm")])
    status, out, _ = run_cli(capsys, "diff", base, fixed_head)
    assert status == 3, "nothing regressed, the scopes differ"
    assert out.splitlines() == [f"kvconform diff {base} -> {fixed_head}: 0 regressed, 0 fixed, 0 changed; scopes differ: "
                                "only in base 118 cells: config 118 (eras e00, e01, e02, e03, e04, e05, … (40 eras)); "
                                "only in head 0 cells"]
    assert run_cli(capsys, "diff", base, fixed_head, "--changed-only")[0] == 0


def test_diff_json_for_machines(tmp_path, capsys):
    base, head = scope_pair(tmp_path)
    status, out, _ = run_cli(capsys, "diff", base, head, "--format", "json")
    data = json.loads(out)
    assert status == 1 and data["exit_status"] == 1 and data["scopes_differ"] is True
    assert data["counts"] == {"regressed": 3, "fixed": 0, "changed": 0, "only_in_base": 117, "only_in_head": 1,
                              "failing_in_both": 0}
    first = data["regressed"][0]
    assert first["cell"]["era"] == "e07" and first["base"]["status"] == "passed" and first["head"]["status"] == "failed"
    assert data["regressed"][2]["base"] is None, "a new failing cell has no base"


def test_diff_github_annotations(tmp_path, capsys):
    base, head = scope_pair(tmp_path)
    status, out, _ = run_cli(capsys, "diff", base, head, "--format", "github")
    lines = out.splitlines()
    assert status == 1
    assert lines[0] == ("::error title=kvconform%3A 2 config cells regressed::now failed: expected `HMA on`, got "
                        "`HMA off` (§2.2 1) (first: e07-N-cuda-none-noconn-config)")
    assert lines[1].startswith("::error title=kvconform%3A 1 config cell regressed::added, failed: boom")
    assert lines[-1].startswith("::notice title=kvconform diff::kvconform diff ")
    still = write_results(tmp_path / "still.json", [config_entry(era="e99", status="failed", message="Failed: boom")])
    _, out, _ = run_cli(capsys, "diff", still, still, "--format", "github")
    assert out.splitlines()[0] == ("::warning title=kvconform%3A 1 config cell failing in base and head::boom "
                                   "(first: e99-N-cuda-none-noconn-config)")


def test_diff_help_documents_the_exit_status(capsys):
    with pytest.raises(SystemExit):
        main(["diff", "--help"])
    out = capsys.readouterr().out
    assert "exit status:" in out
    for line in ("0  nothing regressed", "1  regressions", "2  usage error", "3  nothing regressed, but the runs"):
        assert line in out


def test_diff_identical_runs_exit_0(tmp_path, capsys):
    base, _ = diff_pair(tmp_path)
    status, out, _ = run_cli(capsys, "diff", base, base)
    assert status == 0
    assert out == f"No cell changed its outcome between {base} and {base}.\n"


def test_diff_ignores_durations_messages_and_case_ids(tmp_path, capsys):
    a = config_entry(actual=outcome(resolved=False))
    b = dict(config_entry(actual=dict(outcome(resolved=False), id="renamed")), duration=9.0)
    status, _, _ = run_cli(capsys, "diff", write_results(tmp_path / "a.json", [a]),
                           write_results(tmp_path / "b.json", [b]))
    assert status == 0


def test_diff_compares_whether_unknown_not_the_reason(tmp_path, capsys):
    a = config_entry(platform="tpu", actual=dict(outcome(resolved=None), unknown="TPU support lives in tpu_inference"))
    b = config_entry(platform="tpu", actual=dict(outcome(resolved=None), unknown="platform class outside vLLM"))
    c = config_entry(platform="tpu", actual=outcome(resolved=False))
    files = [write_results(tmp_path / f"{name}.json", [entry]) for name, entry in (("a", a), ("b", b), ("c", c))]
    assert run_cli(capsys, "diff", files[0], files[1])[0] == 0, "two unknown outcomes with other reasons agree"
    status, out, _ = run_cli(capsys, "diff", files[0], files[2])
    assert status == 0 and "0 regressed, 0 fixed, 1 changed" in out, "unknown vs a resolved value is a change, not a regression"


def test_diff_bad_input(tmp_path, capsys):
    base, _ = diff_pair(tmp_path)
    (tmp_path / "bad.json").write_text("[1, 2")
    status, _, err = run_cli(capsys, "diff", base, str(tmp_path / "bad.json"))
    assert status == 2
    assert_one_line_error(err, "bad.json: is not valid JSON")
    status, _, err = run_cli(capsys, "diff", base, "--format", "html", base)
    assert status == 2
    assert_one_line_error(err, "invalid choice: 'html'")
    status, _, err = run_cli(capsys, "diff", base, base, "--chnaged-only")
    assert status == 2
    assert_one_line_error(err, "kvconform diff: unrecognized argument --chnaged-only; did you mean --changed-only?\n")
    status, _, err = run_cli(capsys, "diff", base, base, base)
    assert status == 2
    assert_one_line_error(err, f"kvconform diff: unrecognized argument {base}; accepted: kvconform diff [-h] "
                               "[--format {text,md,json,github}] [--all] [--changed-only] BASE.json HEAD.json\n")
    (tmp_path / "junit.xml").write_text('<?xml version="1.0"?><testsuites/>')
    status, _, err = run_cli(capsys, "diff", base, str(tmp_path / "junit.xml"))
    assert status == 2
    assert_one_line_error(err, "junit.xml: is not valid JSON (Expecting value at line 1 column 1); accepted: the "
                               "results.json.gz of `kvconform report`, or the results file of `kvconform merge -o` or "
                               "`pytest --kvconform-results FILE` (JSON, gzip-compressed or not)\n")


# --- merge --------------------------------------------------------------------------------------------

def test_merge_keeps_every_run_and_all_cells(tmp_path, capsys):
    a = write_results(tmp_path / "a.json", [config_entry(platform="cuda")], machine={"node": "gpu-box"})
    b = write_results(tmp_path / "b.json", [config_entry(platform="cpu")], machine={"node": "cpu-box"},
                      started_at="2025-12-31T00:00:00+00:00")
    status, out, _ = run_cli(capsys, "merge", a, b, "-o", str(tmp_path / "merged.json"))
    assert status == 0
    assert "2 results from 2 run(s) written to" in out
    merged = load_results(tmp_path / "merged.json")
    assert [r["machine"]["node"] for r in merged.runs] == ["gpu-box", "cpu-box"], "each run's run_info is kept"
    assert merged.runs[0] == load_results(a).run_info and merged.runs[1] == load_results(b).run_info
    by_platform = {e["cell"]["platform"]: e["run"] for e in merged.results}
    assert by_platform == {"cuda": 0, "cpu": 1}, "every entry points at its run"
    assert merged.run_info["merged_runs"] == 2
    assert merged.run_info["started_at"] == "2025-12-31T00:00:00+00:00"


@pytest.mark.parametrize(("filters", "merged_filter"), [
    ((None, None), None), (("v0.33", "v0.33"), "v0.33"), (("v0.33", "seed"), "mixed"),
    ((None, "v0.33"), None),
])
def test_merge_says_a_version_filter_only_where_every_run_had_it(tmp_path, capsys, filters, merged_filter):
    # A connector run (every era: no filter) merged with a config run of one era read "vLLM version filter v0.33".
    paths = [write_results(tmp_path / f"{i}.json", [config_entry(platform=platform)], vllm_version=version)
             for i, (platform, version) in enumerate(zip(("cuda", "cpu"), filters))]
    status, _, _ = run_cli(capsys, "merge", *paths, "-o", str(tmp_path / "merged.json"))
    assert status == 0
    assert load_results(tmp_path / "merged.json").run_info["vllm_version"] == merged_filter


def test_merge_of_merged_files_renumbers_runs(tmp_path, capsys):
    a = write_results(tmp_path / "a.json", [config_entry(platform="cuda")])
    b = write_results(tmp_path / "b.json", [config_entry(platform="cpu")])
    c = write_results(tmp_path / "c.json", [config_entry(platform="xpu")])
    run_cli(capsys, "merge", a, b, "-o", str(tmp_path / "ab.json"))
    run_cli(capsys, "merge", str(tmp_path / "ab.json"), c, "-o", str(tmp_path / "abc.json"))
    merged = load_results(tmp_path / "abc.json")
    assert len(merged.runs) == 3
    assert {e["cell"]["platform"]: e["run"] for e in merged.results} == {"cuda": 0, "cpu": 1, "xpu": 2}


def test_merge_refuses_mixed_versions_unless_allowed(tmp_path, capsys):
    a = write_results(tmp_path / "a.json", [config_entry(platform="cuda")], kvconform_version="0.1.0")
    b = write_results(tmp_path / "b.json", [config_entry(platform="cpu")], kvconform_version="0.2.0")
    out_path = tmp_path / "merged.json"
    status, _, err = run_cli(capsys, "merge", a, b, "-o", str(out_path))
    assert status == 2
    assert_one_line_error(err, f"runs of different kvconform versions (0.1.0 in {a}, 0.2.0 in {b}); "
                               "pass --allow-mixed to merge them anyway")
    assert not out_path.exists()
    status, _, _ = run_cli(capsys, "merge", a, b, "-o", str(out_path), "--allow-mixed")
    assert status == 0 and load_results(out_path).run_info["kvconform_version"] == "0.1.0, 0.2.0"


def test_merge_refuses_conflicting_outcomes(tmp_path, capsys):
    a = write_results(tmp_path / "a.json", [config_entry(actual=outcome(resolved=False))])
    b = write_results(tmp_path / "b.json", [config_entry(actual=outcome(resolved=True), status="failed")])
    status, _, err = run_cli(capsys, "merge", a, b, "-o", str(tmp_path / "m.json"))
    assert status == 2
    assert_one_line_error(err, f"conflicting outcomes for config era=seed flag=null platform=cuda features=none "
                               f"connector=noconn stage=config: passed in {a}, failed in {b}")
    assert not (tmp_path / "m.json").exists()


def test_merge_a_skip_yields_to_a_run_and_duplicates_collapse(tmp_path, capsys):
    ran = config_entry(actual=outcome(resolved=False))
    skipped = config_entry(status="skipped", message="needs CUDA")
    a = write_results(tmp_path / "a.json", [skipped])
    b = write_results(tmp_path / "b.json", [ran])
    c = write_results(tmp_path / "c.json", [ran])
    status, _, _ = run_cli(capsys, "merge", a, b, c, "-o", str(tmp_path / "m.json"))
    assert status == 0
    merged = load_results(tmp_path / "m.json")
    assert [(e["status"], e["run"]) for e in merged.results] == [("passed", 1)]


def test_merge_keeps_two_tests_of_one_cell_and_still_refuses_one_test_disagreeing(tmp_path, capsys):
    """The connector suite checks some cells with two tests (C25 forced and plain); in one run they may differ."""
    cell = {"connector": "vllm-0.33.0:ExampleConnector", "check": "C25 finish-reuse-race", "tier": "MUST",
            "preset": "fa_only"}

    def c25(function, status):
        return make_entry(nodeid=f"suites/connector/test_races.py::{function}[vllm-0.33.0:ExampleConnector-fa_only]",
                          suite="connector", status=status, cell=cell)

    a = write_results(tmp_path / "a.json", [c25("test_c25_finish_reuse_race_forced", "passed"),
                                            c25("test_c25_finish_reuse_race", "failed")])
    status, _, _ = run_cli(capsys, "merge", a, "-o", str(tmp_path / "m.json"))
    assert status == 0
    assert sorted(e["status"] for e in load_results(tmp_path / "m.json").results) == ["failed", "passed"]
    b = write_results(tmp_path / "b.json", [c25("test_c25_finish_reuse_race_forced", "failed")])
    status, _, err = run_cli(capsys, "merge", a, b, "-o", str(tmp_path / "m2.json"))
    assert status == 2 and "conflicting outcomes for connector" in err and "passed in" in err


def test_merge_bad_inputs(tmp_path, capsys):
    good = write_results(tmp_path / "a.json", [config_entry()])
    (tmp_path / "foreign.json").write_text(json.dumps({"tests": []}))
    status, _, err = run_cli(capsys, "merge", good, str(tmp_path / "foreign.json"), "-o", str(tmp_path / "m.json"))
    assert status == 2
    assert_one_line_error(err, "foreign.json: not a kvconform results file")
    (tmp_path / "blocker").write_text("")
    status, _, err = run_cli(capsys, "merge", good, "-o", str(tmp_path / "blocker" / "m.json"))
    assert status == 2
    assert_one_line_error(err, "cannot write there")
    status, _, err = run_cli(capsys, "merge", good)
    assert status == 2
    assert_one_line_error(err, "the following arguments are required: -o/--output")
    status, _, err = run_cli(capsys, "merge", good, "-o", str(tmp_path / "m.json"), "--allow-mix")
    assert status == 2
    assert_one_line_error(err, "kvconform merge: unrecognized argument --allow-mix; did you mean --allow-mixed?\n")
    assert not (tmp_path / "m.json").exists()


def test_report_renders_a_merged_file(tmp_path, capsys):
    a = write_results(tmp_path / "a.json", [config_entry(platform="cuda")])
    b = write_results(tmp_path / "b.json", [config_entry(platform="cpu", actual=outcome(resolved=True))])
    run_cli(capsys, "merge", a, b, "-o", str(tmp_path / "m.json"))
    status, _, _ = run_cli(capsys, "report", "--from", str(tmp_path / "m.json"), "--output-dir", str(tmp_path / "o"))
    assert status == 0
    md = (tmp_path / "o" / "compatibility.md").read_text()
    assert "merged from 2 runs" in md
    era_page = (tmp_path / "o" / "compatibility-seed.md").read_text()
    assert table_after(era_page, "### Era seed")[1] == ["no connector", "no feature", "✅ on", "⚪ off"]


def test_report_on_a_broken_resolver_fails_with_readable_cells(tmp_path, capfd, monkeypatch):
    """A mutant resolver (tests/config_mutants.py) run as --target: exit 1, and the report marks its cells."""
    monkeypatch.chdir(REPO)
    out_dir = tmp_path / "out"
    status = main(["report", "--suite", "suites.config", "--target", "tests.config_mutants:ignores_kv_events_in_seed",
                   "--vllm-version", "seed", "-n", "2", "--output-dir", str(out_dir), "--", "-q"])
    captured = capfd.readouterr()
    assert status == 1, captured.out[-2000:]
    results = load_results(out_dir / "results.json.gz")
    assert results.run_info["target"] == "tests.config_mutants:ignores_kv_events_in_seed"
    failed = [e for e in results.results if e["status"] == "failed"]
    assert failed and all(e["cell"]["era"] == "seed" for e in failed)
    assert all(e["cell"]["features"] == "kv_events" for e in failed), "only the broken rule's cells fail"
    md, era_page = (out_dir / "compatibility.md").read_text(), (out_dir / "compatibility-seed.md").read_text()
    assert "❗" in era_page and "target tests.config_mutants:ignores_kv_events_in_seed" in md
    assert "### Era seed (vLLM 0.13.0)" in era_page and not (out_dir / "compatibility-v0.33.md").exists()
    assert "[seed (vLLM 0.13.0)](compatibility-seed.md#era-seed)" in md, "the main page links to the era's page"


def test_plan_runs_the_matrix_beside_the_suites_and_the_benchmarks_once():
    """Hand-written plan: stage 1 the matrix without xdist next to the other suites, one plain process per suite
    where that makes as many processes as cores or one more (on two cores: three processes the operating system
    shares), else one xdist pass stealing work; stage 2 the
    benchmarks timed, one process per core on two cores (the Mamba request stream with the other modules), at one
    timed round per workload."""
    timed = plan_passes(["suites"], benchmarks=TIMED, cpus=2)
    assert [(p.suites, p.xdist, p.stage) for p in timed] == [
        (("suites.config",), False, 1),
        (("suites.allocator",), False, 1),
        (("suites.connector",), False, 1),
        (("suites.benchmarks.test_allocator_throughput",), False, 2),
        (("suites.benchmarks.test_block_pool_throughput", "suites.benchmarks.test_config_resolution",
          "suites.benchmarks.test_connector_store_load", "suites.benchmarks.test_judging_time",
          "suites.benchmarks.test_allocator_throughput::test_request_stream[full_mamba_partial]"), False, 2),
    ]
    assert [p.label for p in timed[:3]] == ["config matrix", "allocator suite", "connector suite"]
    assert timed[3].options == ("-k", "not (test_request_stream and full_mamba_partial)"), (
        "the Mamba stream runs in the other timed process, and only there")
    assert [p.suites for p in plan_passes(["suites"], benchmarks=TIMED, cpus=2, cell_items=True)[3:]] == [
        ("suites.benchmarks.test_allocator_throughput",), timed[4].suites[:-1]], (
        "pytest arguments (a -k of their own) and shards get whole modules")
    assert timed[1].options == timed[2].options == ()
    assert timed[0].options == ("--config-matrix-items", "era"), "the matrix as one item per era, one entry per cell"
    assert plan_passes(["suites"], benchmarks=TIMED, cpus=2, cell_items=True)[0].options == (), (
        "pytest arguments and shards see the matrix one item per cell")
    assert all(dict(p.env) == {"OMP_NUM_THREADS": "1", "KVCONFORM_BENCHMARK_MAX_ROUNDS": "1"} for p in timed[3:])
    assert dict(timed[0].env) == {"OMP_NUM_THREADS": "1"}, "only the timed passes cap their rounds"
    assert all(dict(p.env) == {"OMP_NUM_THREADS": "1", "KVCONFORM_STATE_MACHINE_EXAMPLES": "40"} for p in timed[1:3]), \
        "the allocator suite's state machines run 40 examples per configuration in the report"
    many = plan_passes(["suites"], benchmarks=TIMED, cpus=8)
    assert [(p.suites, p.xdist, p.options) for p in many[:2]] == [
        (("suites.config",), False, ("--config-matrix-items", "era")),
        (("suites.allocator", "suites.connector"), True, ("--dist", "worksteal"))], (
        "more cores than stage-1 processes: the other suites under xdist, its workers stealing work")
    single = plan_passes(["suites"], benchmarks=TIMED, cpus=1)
    assert [p.suites for p in single if p.stage == 2] == [("suites.benchmarks",)], "one core: one timed pass"
    untimed = plan_passes(["suites"], benchmarks=UNTIMED, cpus=2)
    assert [(p.suites, p.xdist, p.options) for p in untimed] == [
        (("suites.config",), False, ("--config-matrix-items", "era")),
        (("suites.allocator", "suites.connector", "suites.benchmarks"), True,
         ("--dist", "worksteal", "--benchmark-disable")),
    ], ("without timing the benchmarks run once, untimed, with pytest-benchmark off (no warning); four processes on "
        "two cores would be two more than cores: one xdist pass")
    assert [(p.suites, p.xdist) for p in plan_passes(["suites"], benchmarks=UNTIMED, cpus=3)][1:] == [
        (("suites.allocator",), False), (("suites.connector",), False), (("suites.benchmarks",), False)]
    assert [(p.suites, p.xdist) for p in plan_passes(["mypkg.suite"], benchmarks=UNTIMED, cpus=2)] == [
        (("mypkg.suite",), True)], "one suite alone: its tests spread over xdist's workers"
    assert [(p.suites, p.xdist) for p in plan_passes(["suites.config", "mypkg.suite"], benchmarks=UNTIMED, cpus=2)] \
        == [(("suites.config",), False), (("mypkg.suite",), True)]
    assert [(p.suites, p.xdist) for p in plan_passes(["suites.config"], benchmarks=UNTIMED)] == [(("suites.config",), False)]


@pytest.mark.parametrize("timing,default_suites,peer,expected", [
    (None, True, False, NOT_RUN), (None, True, True, TIMED), (True, True, False, TIMED), (False, True, True, UNTIMED),
    (None, False, True, UNTIMED), (None, False, False, UNTIMED), (True, False, False, TIMED),
])
def test_the_benchmarks_are_timed_with_a_peer_or_timing(monkeypatch, timing, default_suites, peer, expected):
    """Hand-written decision table: with the default suites the benchmarks are timed only where vLLM (the peer) is
    importable, else not run; `--timing` forces them timed, `--no-timing` and named suites run them untimed."""
    monkeypatch.setattr("harness.peer.peer_importable", lambda: peer)
    assert benchmark_mode(timing, default_suites) == expected
    assert benchmark_record(expected) == {"mode": expected, "peer": "vllm", "peer_importable": peer}


def test_a_plan_without_the_benchmarks():
    """NOT_RUN: stage 1 only, no benchmark module in any pass (nor pytest-benchmark's switch); a bad mode is refused."""
    plan = plan_passes(["suites"], benchmarks=NOT_RUN, cpus=2)
    assert [(p.suites, p.options, p.stage) for p in plan] == [
        (("suites.config",), ("--config-matrix-items", "era"), 1), (("suites.allocator",), (), 1),
        (("suites.connector",), (), 1)]
    assert [(p.suites, p.options) for p in plan_passes(["suites"], benchmarks=NOT_RUN, cpus=8)][1] == (
        ("suites.allocator", "suites.connector"), ("--dist", "worksteal"))
    assert runs_benchmarks(["suites"]) and runs_benchmarks(["suites.benchmarks"])
    assert not runs_benchmarks(["suites.config", "suites.allocator"])
    with pytest.raises(ValueError, match="benchmarks: 'sometimes' is not accepted; expected 'timed', 'untimed'"):
        plan_passes(["suites"], benchmarks="sometimes")


@pytest.mark.parametrize("argv,peer,timed,record", [
    ([], False, False, "not run"), ([], True, True, "timed"), (["--timing"], False, True, "timed"),
    (["--no-timing"], True, False, "untimed"), (["--suite", "suites.config"], False, False, None),
])
def test_the_report_command_plans_the_benchmarks_by_the_peer(monkeypatch, tmp_path, capsys, argv, peer, timed, record):
    """`kvconform report` asks the probe, plans the passes and records the decision in run_info (the passes
    themselves are replaced: this is about the plan the command hands them)."""
    import harness.commands.report as report_command

    monkeypatch.setattr("harness.peer.peer_importable", lambda: peer)
    handed = {}

    def run_passes(args, passes, benchmarks):
        handed.update(passes=passes, benchmarks=benchmarks)
        return ResultsDocument(run_info=run_info(benchmarks=benchmarks) if benchmarks else run_info(),
                               results=[config_entry()]), None

    monkeypatch.setattr(report_command, "_run_passes", run_passes)
    status, _, _ = run_cli(capsys, "report", *argv, "--output-dir", str(tmp_path / "out"))
    assert status == 0
    modules = [s for p in handed["passes"] for s in p.suites]
    assert any(s.startswith("suites.benchmarks") and p.stage == 2 for p in handed["passes"] for s in p.suites) == timed
    assert ("suites.benchmarks" in modules) == (record == "untimed"), "untimed: once, beside the other suites"
    assert (handed["benchmarks"] or {}).get("mode") == record
    md = (tmp_path / "out" / "compatibility.md").read_text()
    assert ("The benchmarks were not run: vLLM" in md) == (record == "not run")


def test_timing_help_says_when_the_benchmarks_run(capsys):
    with pytest.raises(SystemExit):
        main(["report", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "only where vLLM, the peer the table compares with, is importable" in text
    assert "--no-timing runs them once untimed beside the other suites" in text


def test_a_timed_pass_waits_for_a_free_core_and_no_xdist():
    """Hand-written schedules on two cores: the timed passes wait while two stage-1 processes run (or an xdist pass);
    when only one is left, the first timed pass runs beside it and the second waits for a core; one core: a timed
    pass runs alone."""
    matrix, allocator, connector, timed_a, timed_b = plan_passes(["suites"], benchmarks=TIMED, cpus=2)
    stage1 = [matrix, allocator, connector]
    assert all(may_start(p, [*stage1, timed_a, timed_b], [], 2) for p in stage1), "stage 1 starts at once"
    assert not may_start(timed_a, [timed_a, timed_b], stage1, 2), "three processes share both cores"
    assert not may_start(timed_a, [timed_a, timed_b], [matrix, connector], 2), "both cores are taken"
    assert not may_start(timed_a, [connector, timed_a, timed_b], [matrix], 2), "a stage-1 pass waits to start"
    assert may_start(timed_a, [timed_a, timed_b], [connector], 2), "one process left: a core is free"
    assert not may_start(timed_b, [timed_b], [connector, timed_a], 2), "both cores are taken"
    assert may_start(timed_b, [timed_b], [timed_a], 2)
    assert not may_start(timed_a, [timed_a, timed_b], [matrix], 1) and may_start(timed_a, [timed_a], [], 1)
    matrix, suites, timed_a, timed_b = plan_passes(["suites"], benchmarks=TIMED, cpus=8)
    assert suites.xdist and not may_start(timed_a, [timed_a, timed_b], [suites], 8), "xdist uses every core"
    assert may_start(timed_a, [timed_a, timed_b], [matrix], 8)


@pytest.mark.parametrize("allocator,expected", [("reference", "40"), ("mypkg.alloc:make", None)])
def test_the_state_machine_cap_is_for_the_reference_allocator(monkeypatch, allocator, expected):
    """The full test run (`pytest --full`) runs every state machine example on the reference; an allocator given with
    --kv-allocator gets them all in the report too."""
    monkeypatch.delenv("KVCONFORM_STATE_MACHINE_EXAMPLES", raising=False)
    suites = plan_passes(["suites"], benchmarks=TIMED, cpus=2)[1]
    assert pass_environment(suites, allocator).get("KVCONFORM_STATE_MACHINE_EXAMPLES") == expected
    monkeypatch.setenv("KVCONFORM_STATE_MACHINE_EXAMPLES", "7")
    assert pass_environment(suites, allocator)["KVCONFORM_STATE_MACHINE_EXAMPLES"] == "7", "the environment wins"


@pytest.mark.parametrize("cap,examples,expected", [(None, 200, 200), ("40", 200, 40), ("40", 30, 30)])
def test_state_machine_examples_follow_the_cap(monkeypatch, cap, examples, expected):
    if cap is None:
        monkeypatch.delenv("KVCONFORM_STATE_MACHINE_EXAMPLES", raising=False)
    else:
        monkeypatch.setenv("KVCONFORM_STATE_MACHINE_EXAMPLES", cap)
    assert capped_examples(examples) == expected


@pytest.mark.parametrize("cap", ["0", "x", ""])
def test_a_bad_examples_cap_names_the_variable(monkeypatch, cap):
    monkeypatch.setenv("KVCONFORM_STATE_MACHINE_EXAMPLES", cap)
    with pytest.raises(ValueError, match=f"KVCONFORM_STATE_MACHINE_EXAMPLES: {cap!r} is not accepted; expected a whole"):
        capped_examples(200)


def test_combined_passes_are_one_run():
    first = ResultsDocument(run_info=run_info(started_at="2026-01-01T00:00:05+00:00"), results=[config_entry()])
    second = ResultsDocument(run_info=run_info(started_at="2026-01-01T00:00:01+00:00"),
                             results=[make_entry(nodeid="suites/allocator/t.py::a", suite="allocator",
                                                 status="passed", run=3)])
    passes = [PytestPass("config matrix", ("suites.config",), xdist=False),
              PytestPass("allocator suites", ("suites.allocator",), xdist=True)]
    combined = combine_passes([(passes[0], first, {"wall_seconds": 1.0}), (passes[1], second, {"wall_seconds": 2.0})],
                              {"target": "reference", "argv": ["kvconform", "report"]})
    assert len(combined.runs) == 1 and all(e["run"] == 0 for e in combined.results)
    assert combined.run_info["target"] == "reference" and combined.run_info["argv"] == ["kvconform", "report"]
    assert combined.run_info["started_at"] == "2026-01-01T00:00:01+00:00", "the run starts with its first pass"
    assert [(p["label"], p["tests"], p["wall_seconds"]) for p in combined.run_info["passes"]] == [
        ("config matrix", 1, 1.0), ("allocator suites", 1, 2.0)]


@pytest.mark.parametrize(("pass_targets", "combined_target"), [
    ((None, None), "reference"),
    ((None, "connectors mypkg.mod:MyConnector"), "connectors mypkg.mod:MyConnector"),
    (("mypkg.hma:resolve", "mypkg.hma:resolve; connectors mypkg.mod:MyConnector"),
     "mypkg.hma:resolve; connectors mypkg.mod:MyConnector"),
])
def test_combined_passes_name_the_target_their_passes_ran(pass_targets, combined_target):
    # `kvconform report --kv-connector mypkg.mod:MyConnector` said "target reference" in its report and results.json,
    # where the connector suite's own results file names the connector.
    documents = [ResultsDocument(run_info=run_info(target=target), results=[config_entry()]) for target in pass_targets]
    passes = [PytestPass("config matrix", ("suites.config",), xdist=False),
              PytestPass("connector suite", ("suites.connector",), xdist=True)]
    combined = combine_passes([(p, d, {}) for p, d in zip(passes, documents)],
                              {"target": "reference", "argv": ["kvconform", "report"]})
    assert combined.run_info["target"] == combined_target


def _connector_entry(release: str, connector: str, check: str, status: str, message: str | None = None,
                     evidence: str | None = None):
    """One cell of the connector suite on vLLM `release`'s connector, as suites/connector/conftest.py records it."""
    name = f"vllm-{release}:{connector}"
    return make_entry(nodeid=f"suites/connector/test_x.py::test_{check.split()[0].lower()}[{name}-fa_only]",
                      suite="connector", status=status, message=message,
                      cell={"connector": name, "check": check, "tier": "MUST", "preset": "fa_only"},
                      extra={"description": "what it checks", "evidence": evidence, **groups_record("fa_only")})


def test_diff_of_two_releases_connector_runs_lists_what_changed_between_them(tmp_path, capsys):
    """Each run names its release in the connector (`vllm-0.13.0:ExampleConnector`); two single-release runs are
    compared cell by cell with the release left out, so the diff says what changed between the releases."""
    na = "N/A on 0.13.0: KVConnectorOutput has no failed_recving (a failed load can be reported only as block ids)"
    base = [_connector_entry("0.13.0", "ExampleConnector", "C14 round-trip-bytes", "passed"),
            _connector_entry("0.13.0", "DecodeBenchConnector", "C15 null-block-untouched", "failed",
                             message="null block written", evidence="null block written during store"),
            _connector_entry("0.13.0", "ExampleConnector", "C22 failure-by-request", "skipped", message=na)]
    head = [_connector_entry("0.34.0", "ExampleConnector", "C14 round-trip-bytes", "failed",
                             message="shape mismatch", evidence="shape mismatch"),
            _connector_entry("0.34.0", "DecodeBenchConnector", "C15 null-block-untouched", "passed"),
            _connector_entry("0.34.0", "ExampleConnector", "C22 failure-by-request", "passed")]
    b, h = write_results(tmp_path / "b.json", base), write_results(tmp_path / "h.json", head)
    status, out, _ = run_cli(capsys, "diff", b, h, "--all")
    assert status == 1, "C14 fails on 0.34.0 and passed on 0.13.0: a regression between the releases"
    lines = out.splitlines()
    assert lines[0] == (f"kvconform diff {b} (vLLM 0.13.0) -> {h} (vLLM 0.34.0): "
                        "1 regressed, 1 fixed, 1 changed")
    assert lines[1:] == [  # --all: one line per cell, in the order of the cells' labels
        "fixed: connector connector=vllm:DecodeBenchConnector check=C15 null-block-untouched tier=MUST preset=fa_only: "
        "failed (null block written) -> passed",
        "regressed: connector connector=vllm:ExampleConnector check=C14 round-trip-bytes tier=MUST preset=fa_only: "
        "passed -> failed (shape mismatch)",
        "changed: connector connector=vllm:ExampleConnector check=C22 failure-by-request tier=MUST preset=fa_only: "
        f"skipped ({na}) -> passed",
    ]


def test_diff_of_a_cell_failing_in_both_runs_tells_another_failure_from_the_same_one(tmp_path, capsys):
    """A cell failing in both runs is unchanged only when it fails the same way: the same first line once store
    paths, request ids, addresses and numbers are taken out. A bug fixed and another met in the same cell (what
    a buggy release against its successor looks like) is a change, and the line says both failures."""
    def cell(release, message):
        return _connector_entry(release, "OffloadingConnector", "C05 hit-length", "failed", message=message)

    base = [cell("0.27.0", "C05 [fa_only]: a 703-token prompt hit 256 tokens, expected 512 (req 4f3a9c21d0e8)"),
            cell("0.27.0", "C05 [fa_only]: register_kv_caches raised KeyError: 'model.layers.0.full'")]
    head_same = [cell("0.28.0", "C05 [fa_only]: a 903-token prompt hit 512 tokens, expected 768 (req 9b2e7d41aa03)")]
    head_other = [cell("0.28.0", "C05 [fa_only]: the model read wrong KV at block 7 <Tensor at 0x7f3a2b1c4d50>")]
    b = write_results(tmp_path / "b.json", base[:1])
    status, out, _ = run_cli(capsys, "diff", b, write_results(tmp_path / "same.json", head_same), "--format", "json")
    payload = json.loads(out)
    assert status == 0 and payload["counts"]["changed"] == 0 and payload["counts"]["failing_in_both"] == 1, (
        "the same short hit with other token counts and request ids is the same failure")
    status, out, _ = run_cli(capsys, "diff", b, write_results(tmp_path / "other.json", head_other))
    assert status == 0, "a cell failing in both runs is never a regression"
    assert out.splitlines()[0].endswith("0 regressed, 0 fixed, 1 changed"), out
    assert ("C05: now failed: the model read wrong KV at block 7" in out
            and "(was failed: a 703-token prompt hit 256 tokens, expected 512" in out), out
    b2 = write_results(tmp_path / "b2.json", base[1:])
    status, out, _ = run_cli(capsys, "diff", b2, write_results(tmp_path / "same2.json", [
        cell("0.28.0", "C05 [fa_only]: register_kv_caches raised KeyError: 'model.layers.0.full'")]))
    assert status == 0 and out.startswith("No cell changed"), "an identical failure is no change"


def _allocator_entry(release: str, scenario: str, status: str, message: str | None = None) -> dict:
    """An allocator cell as `--kv-allocator vllm` records it (its target names the release); a scenario skipped
    as N/A before it ran records no target."""
    cell = {"target": f"vllm-{release}", "scenario": scenario, "section": "4"}
    if status == "skipped":
        cell = {"scenario": scenario, "section": "4"}
    return make_entry(nodeid=f"suites/allocator/test_x.py::{scenario}", suite="allocator", cell=cell, status=status,
                      message=message)


def test_diff_of_two_releases_allocator_runs_lists_what_changed_between_them(tmp_path, capsys):
    """Measured on vLLM 0.19.0 -> 0.20.0 (`suites/allocator --kv-allocator vllm`): the EAGLE hybrid drop is fixed
    and nothing else changes; before the allocator cells were lined up, every cell with a target was 'only in
    base' or 'only in head' and the diff said '0 fixed'."""
    eagle = "test_eagle_drops_last_hit_block[full+swa]"
    base = [_allocator_entry("0.19.0", eagle, "failed", "EAGLE drops the last hit block: 28 tokens, got 24"),
            _allocator_entry("0.19.0", "test_free_queue_order", "passed"),
            _allocator_entry("0.19.0", "test_hisparse_pages", "skipped", "N/A on 0.19.0: no HiSparse (vllm.v1.hisparse)")]
    head = [_allocator_entry("0.20.0", eagle, "passed"),
            _allocator_entry("0.20.0", "test_free_queue_order", "passed"),
            _allocator_entry("0.20.0", "test_hisparse_pages", "skipped", "N/A on 0.20.0: no HiSparse (vllm.v1.hisparse)")]
    b, h = write_results(tmp_path / "b.json", base), write_results(tmp_path / "h.json", head)
    status, out, _ = run_cli(capsys, "diff", b, h, "--all")
    assert status == 0, "nothing regressed between the releases"
    lines = out.splitlines()
    assert lines[0] == f"kvconform diff {b} (vLLM 0.19.0) -> {h} (vLLM 0.20.0): 0 regressed, 1 fixed, 0 changed"
    assert lines[1:] == [f"fixed: allocator target=vllm scenario={eagle} section=4: "
                         "failed (EAGLE drops the last hit block: 28 tokens, got 24) -> passed"]


def test_diff_keeps_releases_apart_within_one_run_of_several(tmp_path, capsys):
    both = [_connector_entry(r, "ExampleConnector", "C14 round-trip-bytes", "passed") for r in ("0.33.0", "0.34.0")]
    b, h = write_results(tmp_path / "b.json", both), write_results(tmp_path / "h.json", both[1:])
    status, out, _ = run_cli(capsys, "diff", b, h)
    assert status == 3 and "(vLLM" not in out, "a merged run of two releases is compared as it is"




def test_a_second_run_into_an_output_folder_elsewhere_keeps_the_test_ids(tmp_path, capfd, monkeypatch):
    """An output folder outside the checkout must not move pytest's rootdir (pytest took a separate argument naming
    an existing path, such as the report a second run writes over, for a test path): a cell without a cell record
    is identified by its test id, so from the second run on such tests were named `test_invariants.py::...` (or,
    for two clones side by side writing beside them, `new/suites/...` and `old/suites/...`), and two runs shared
    none of those cells (`kvconform diff`: "scopes differ"; `kvconform merge`: each twice)."""
    monkeypatch.chdir(REPO)
    out_dir = tmp_path / "out"
    for run in ("first run", "second run, over the first's report"):
        status = main(["report", "--suite", "suites.config", "--vllm-version", "seed", "-n", "0",
                       "--output-dir", str(out_dir), "--", "-k", "test_config_invariant"])
        capfd.readouterr()
        assert status == 0
        ids = [e["id"] for e in load_results(out_dir / "results.json.gz").results]
        assert ids and all(i.startswith("suites/config/test_invariants.py::") for i in ids), f"{run}: {ids[:2]}"
