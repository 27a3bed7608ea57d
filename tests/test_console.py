"""The console summary (harness.plugins.console): a suite's failing cells grouped by what went wrong, a
screenful at most; other tests' failures and `-v` keep pytest's full output."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

DEMO = '''
import pytest

@pytest.mark.parametrize("index", range(300))
def test_cell(kvconform_record, index):
    kvconform_record(suite="config", cell={"era": "seed", "index": index})
    if index % 3 == 0:
        pytest.fail(f"expected `HMA off`, got `HMA on` (rule A)\\nconfig cell {index} ...", pytrace=False)
    if index % 3 == 1:
        assert index < 0, f"C07 [cpu]: block {index % 2} lost"

@pytest.mark.parametrize("way", range(40))
def test_many_ways(kvconform_record, way):
    kvconform_record(suite="connector", cell={"check": way})
    pytest.fail(f"C{way:02d} [cpu]: evidence", pytrace=False)

def test_own_test():
    assert 1 == 2, "an ordinary test of the project"
'''
COUNTS = "241 failed, 100 passed"


def run_demo(directory: Path, *args: str) -> str:
    (directory / "test_demo.py").write_text(DEMO)
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", "-rfE", *args],
                          cwd=directory, capture_output=True, text=True, timeout=300, check=False,
                          env={"COLUMNS": "120", "LINES": "30", **_env()})
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def _env() -> dict:
    import os
    return {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}


@pytest.mark.parametrize("workers", [(), ("-n", "2")], ids=["no-xdist", "xdist-2"])
def test_failing_cells_are_grouped_in_one_screen(tmp_path, workers):
    out = run_demo(tmp_path, *workers)
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if "kvconform: 240 failing cells, grouped by what went wrong" in line)
    grouped = lines[start + 1:start + 1 + 24]  # LINES=30 less the margin
    assert grouped[:3] == [
        "100 config cells: expected `HMA off`, got `HMA on` (rule A) — first: 0",
        "50 config cells: C07 [cpu]: block 0 lost — first: 4",
        "50 config cells: C07 [cpu]: block 1 lost — first: 1",
    ]
    # a connector check groups by root cause: the checks that found it, then the cause (harness.failure_groups)
    assert grouped[3] == "1 connector cell: C00: evidence — C00 0"
    assert grouped[-1] == ("… and 20 more groups (20 cells), see -v for pytest's full output, or --kvconform-results "
                           "FILE and then `kvconform report --from FILE`")
    assert not any(line.startswith("FAILED test_demo.py::test_cell") for line in lines), "no line per failing cell"
    assert "config cell 0 ..." not in out, "the full failure reports stay out of the console"
    assert "an ordinary test of the project" in out and "FAILED test_demo.py::test_own_test" in out, \
        "tests outside the suites keep pytest's own report"
    assert COUNTS in lines[-1], "the final counts still include every failure"


FEW = '''
import pytest

@pytest.mark.parametrize("index", range(3))
def test_cell(kvconform_record, index):
    kvconform_record(suite="connector", cell={"connector": "Mine", "check": "C30", "preset": str(index)})
    pytest.fail("C30 [fa_only]: cache_salt tenant-b: hit 768 on objects stored under another key", pytrace=False)
'''


@pytest.mark.parametrize(("args", "pointer"), [
    ((), "full evidence: -v for pytest's full output, or --kvconform-results FILE and then "
         "`kvconform report --from FILE`"),
    (("--kvconform-results", "r.json"),
     "full evidence: r.json (or the report of `kvconform report --from r.json`); -v for pytest's full output"),
], ids=["plain", "with-results"])
def test_a_short_summary_still_says_where_the_full_evidence_is(tmp_path, args, pointer):
    # A vendor's first failing run: three cells, one group; the summary must say how to see the evidence.
    (tmp_path / "test_few.py").write_text(FEW)
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", *args],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
                          env={"COLUMNS": "120", "LINES": "30", **_env()})
    lines = done.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if "kvconform: 3 failing cells, grouped by what went wrong" in line)
    assert lines[start + 1:start + 3] == [
        "3 connector cells: C30: cache_salt tenant-b: hit 768 on objects stored under another key — first: C30 0",
        pointer,
    ], done.stdout[-3000:]


NOT_HMA = '''
import pytest

from harness import outcomes

@pytest.mark.parametrize("preset", ["fa+swa", "fa16+swa32", "fa+swa+mamba"])
def test_cell(kvconform_record, preset):
    kvconform_record(suite="connector", cell={"connector": "Mine", "check": "C07", "preset": preset})
    outcomes.not_applicable("declaration", "Mine does not declare SupportsHMA, so vLLM refuses it", preset=preset,
                            connector_class="Mine")

def test_worded_alike(kvconform_record):
    # the same words without the typed record: the console reads the record, never the words
    kvconform_record(suite="connector", cell={"connector": "Other", "check": "C07", "preset": "fa+swa"})
    pytest.skip("not HMA-capable: Other does not declare SupportsHMA, so vLLM refuses it on the multi-group preset "
                "fa+swa")

def test_other_skip():
    pytest.skip("some other reason")
'''


@pytest.mark.parametrize("workers", [(), ("-n", "2")], ids=["no-xdist", "xdist-2"])
def test_not_hma_skips_are_one_line_per_connector(tmp_path, workers):
    # -ra (the checkout's pytest configuration) listed each of a non-HMA connector's ~140 multi-group skips.
    (tmp_path / "test_not_hma.py").write_text(NOT_HMA)
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-ra", *workers],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False, env=_env())
    lines = done.stdout.splitlines()
    assert ("kvconform: 3 multi-group cells of Mine skipped as not HMA-capable (it does not declare SupportsHMA, "
            "so vLLM refuses it on those presets)") in lines, done.stdout[-3000:]
    unfolded = [line.partition(": ")[2] for line in lines if line.startswith("SKIPPED") and "not HMA-capable" in line]
    assert unfolded == ["not HMA-capable: Other does not declare SupportsHMA, so vLLM refuses it on the multi-group "
                        "preset fa+swa"], done.stdout[-3000:]
    assert not any("of Other" in line for line in lines), "a skip is folded by its typed record, not its words"
    assert any(line.startswith("SKIPPED") and "some other reason" in line for line in lines), "other skips stay"
    assert "5 skipped" in lines[-1], "the final counts still include every skip"
    verbose = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-ra", "-v"],
                             cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False, env=_env())
    assert "multi-group preset fa16+swa32" in verbose.stdout and "kvconform: 3 multi-group" not in verbose.stdout


def test_verbose_brings_back_pytests_full_output(tmp_path):
    out = run_demo(tmp_path, "-v")
    assert "grouped by what went wrong" not in out
    assert "config cell 0 ..." in out and "FAILED test_demo.py::test_cell[0]" in out
    assert COUNTS in out.splitlines()[-1]


def test_an_explicit_traceback_style_brings_back_pytests_full_output(tmp_path):
    out = run_demo(tmp_path, "--tb=short")
    assert "grouped by what went wrong" not in out and "config cell 0 ..." in out


SHORT = '''
import pytest

def helper(depth):
    if depth:
        return helper(depth - 1)
    pytest.fail("what went wrong\\nthe details", pytrace=False)

def test_fails_deep_down():
    helper(20)
'''


def test_a_pytrace_false_failure_keeps_its_message_and_location(tmp_path):
    """harness.plugins.short_failures trims the stack it walks, not what the report says."""
    (tmp_path / "test_short.py").write_text(SHORT)
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--tb=long",
                           "--kvconform-results", "results.json"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 1
    assert "what went wrong\nthe details" in done.stdout, "pytest still shows the message as given"
    assert "helper(20)" not in done.stdout, "and, as pytrace=False asks, no traceback"
    import json
    (entry,) = json.loads((tmp_path / "results.json").read_text())["results"]
    assert entry["message"] == "Failed: what went wrong\nthe details"


def raising_target(case: dict) -> dict:
    """A broken config target that raises for every cell but the plugin's probe."""
    if case.get("id") == "kvconform-probe":
        return {"id": case["id"], "resolved_disable_hma": False, "warnings": [], "error": None, "unknown": None}
    raise RuntimeError("boom")


def test_a_raising_target_fails_every_cell_in_one_group(tmp_path):
    repo = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-m", "pytest", str(repo / "suites" / "config"), "-p", "no:cacheprovider",
                           "-p", "no:xdist", "-p", "no:randomly", "--vllm-version", "seed", "-k", "seed-N-cuda",
                           "--hma-target", "tests.test_console:raising_target",
                           "--kvconform-results", str(tmp_path / "results.json")],
                          cwd=repo, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 1, done.stdout[-3000:]
    grouped = [line for line in done.stdout.splitlines() if "target raised RuntimeError" in line]
    failed = int(re.search(r"=+ (\d+) failed", done.stdout).group(1))  # pytest's own count of failing cells
    assert len(grouped) == 1 and grouped[0].startswith(f"{failed} config cells: "), done.stdout[-3000:]
    assert "test_console.py" in grouped[0] and ": boom" in grouped[0], "the line names where the target raised"
    assert "Traceback" not in done.stdout
    import json
    entries = json.loads((tmp_path / "results.json").read_text())["results"]
    assert entries and all(e["status"] == "failed" and e["actual"] is None for e in entries)


def test_the_real_connector_suite_is_grouped_when_run_from_a_vendors_folder(tmp_path):
    # docs/vendor.md has vendors run the suite "in a folder of your own outside the checkout": there pytest names
    # the suite's tests `test_api.py::...`, and a connector check's record is attached only at teardown, so the
    # console took its failures for the vendor's own tests and printed pytest's full output, every skip too.
    repo = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-ra", "-n", "2",
                           "--pyargs", "suites.connector", "-k", "c01 or c17",
                           "--kv-connector", "tests.connector.buggy:HMAStubFinishConnector",
                           "--kv-connector", "ExampleConnector"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
                          env={**_env(), "PYTHONPATH": str(repo), "COLUMNS": "200", "LINES": "40"})
    out = done.stdout
    assert done.returncode == 1, out[-3000:] + done.stderr[-3000:]
    assert "rootdir: " + str(tmp_path) in out, "the run is outside the checkout"
    assert "kvconform: 5 failing cells, grouped by what went wrong" in out, out[-3000:]
    assert re.search(r"^1 connector cell: C01: the model read wrong KV .* — C01 HMAStubFinishConnector$", out, re.M), out
    assert "= FAILURES =" not in out and "FAILED " not in out, out[-3000:]
    assert ("kvconform: 5 multi-group cells of ExampleConnector skipped as not HMA-capable (it does not declare "
            "SupportsHMA, so vLLM refuses it on those presets)") in out, out[-3000:]
    assert out.splitlines()[-1].startswith("=") and "5 failed, 1 passed, 6 skipped" in out.splitlines()[-1]


SKIPS = '''
import pytest

@pytest.mark.parametrize("index", range(3))
def test_backdoor(kvconform_record, index):
    kvconform_record(suite="connector", cell={"connector": "Mine", "check": "C08", "preset": str(index)})
    pytest.skip("not applicable: backdoors are off")

@pytest.mark.parametrize("check", ["C05", "C07"])
def test_hung(kvconform_record, check):
    kvconform_record(suite="connector", cell={"connector": "Mine", "check": check, "preset": "fa_only"})
    pytest.skip(f"skipped: hook Mine.wait_for_save hung in {check} (and once more after it); the checks that call "
                "it are not run again in this session")

def test_own_skip():
    pytest.skip("not a suite cell")
'''


def test_one_line_says_how_many_cells_were_skipped_and_why(tmp_path):
    """Without -rs: one line, the suite's skips grouped by reason (ids and numbers taken out), most first."""
    (tmp_path / "test_skips.py").write_text(SKIPS)
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False, env=_env())
    lines = [line for line in done.stdout.splitlines() if line.startswith("kvconform: ")]
    assert lines == ["kvconform: 5 cells skipped: 3 not applicable: backdoors are off; 2 skipped: hook "
                     "Mine.wait_for_save hung in C05 (and once more after it); the checks that… (-rs lists each)"], \
        done.stdout[-3000:]
    assert not any(line.startswith("SKIPPED") for line in done.stdout.splitlines()), "-rs is not needed"
    assert "6 skipped" in done.stdout.splitlines()[-1]
