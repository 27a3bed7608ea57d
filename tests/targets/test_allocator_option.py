"""`--kv-allocator`: a target that cannot be loaded stops pytest before anything runs (one line, exit 4),
so a CI gate never passes with every allocator test skipped or erroring."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

CASES = [
    ("nosuch.alloc:make_target", "--kv-allocator nosuch.alloc:make_target: module 'nosuch.alloc' does not import"),
    ("harness.targets.allocator.target:no_factory", "has no attribute 'no_factory'"),
    ("refrence", "--kv-allocator refrence: not of the form module:factory or one of reference, vllm; "
                 "did you mean reference?"),
]
try:
    import vllm  # noqa: F401
except ImportError:
    CASES.append(("vllm", "--kv-allocator vllm: the target cannot be built here (ModuleNotFoundError: No module named 'vllm')"))


@pytest.mark.parametrize("spec, line", CASES, ids=[spec for spec, _ in CASES])
def test_unloadable_allocator_stops_before_anything_runs(spec, line):
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--pyargs", "suites.allocator", "--kv-allocator", spec, "-q",
         "-p", "no:randomly", "-p", "no:cacheprovider"],
        cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 4, proc.stdout[-2000:] + proc.stderr[-2000:]
    errors = [text for text in proc.stderr.splitlines() if text.strip()]
    assert errors == [f"ERROR: {errors[0][7:]}"] and line in errors[0], proc.stderr
    assert "passed" not in proc.stdout and "skipped" not in proc.stdout and "Traceback" not in proc.stderr


def renamed_reference():
    """A third-party-style factory: the reference under another name (what the run's header must show)."""
    from harness.targets.allocator.target import make_reference_target

    target = make_reference_target()
    target.name = "vendor-alloc-2.1"
    return target


def test_the_run_names_the_allocator_that_ran_and_no_other_targets_version(tmp_path):
    """The results' run info says which implementation `--kv-allocator` loaded (for `vllm`: which release), and
    carries no version of the config target, which that run's header leaves unsaid."""
    results = tmp_path / "results.json"
    spec = "tests.targets.test_allocator_option:renamed_reference"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--pyargs", "suites.allocator.test_api", "--kv-allocator", spec, "-q",
         "-p", "no:randomly", "-p", "no:cacheprovider", "-p", "no:xdist", "--kvconform-results", str(results)],
        cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    run_info = json.loads(results.read_text())["run_info"]
    assert run_info["target"] == f"allocator {spec} (vendor-alloc-2.1)", run_info["target"]
    assert "target_version" not in run_info, run_info.get("target_version")


_NO_PARTIAL_HITS = "no fine-grained prefix hits"


def reference_as_a_release_without_partial_prefix_hits():
    """Factory: the reference shaped like vLLM 0.13.0 in one row of the capability table (a row that makes
    scenarios N/A: `remove_skipped_blocks`, the row this test used before, now only chooses the call)."""
    from harness.targets.allocator.target import make_reference_target

    target = make_reference_target()
    target.name, target.version = "vllm-0.13.0", "0.13.0"
    target.lacks = {**target.lacks, "partial_prefix_hits": _NO_PARTIAL_HITS}
    return target


def test_a_scenario_na_on_a_release_records_the_same_cell_as_where_it_runs(tmp_path):
    """A scenario N/A on a release (its `needs` mark) records its cell, target included, as a run where it passes
    does, so `kvconform diff` of two releases' runs lines them up (measured on vLLM 0.13.0 -> 0.14.0: the 8
    remove_skipped_blocks / external-tokens scenarios were 'only in base' and 'only in head')."""
    results = tmp_path / "results.json"
    spec = "tests.targets.test_allocator_option:reference_as_a_release_without_partial_prefix_hits"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--pyargs", "suites.allocator.test_partial_prefix_hits", "--kv-allocator",
         spec, "-q", "-p", "no:randomly", "-p", "no:cacheprovider", "-p", "no:xdist", "--kvconform-results",
         str(results)],
        cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    entries = json.loads(results.read_text())["results"]
    assert entries and all(e["status"] == "skipped" for e in entries)
    assert all(e["message"] == f"N/A on 0.13.0: {_NO_PARTIAL_HITS}" for e in entries)
    assert {(e["cell"] or {}).get("target") for e in entries} == {"vllm-0.13.0"}
