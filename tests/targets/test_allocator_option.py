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
    ("harness.targets.allocator_target:no_factory", "has no attribute 'no_factory'"),
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
    from harness.targets.allocator_target import make_reference_target

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


def reference_without_hisparse():
    """The reference under a release-like name, its map without HiSparse's modules (N/A for lacking HiSparse)."""
    from harness.targets.allocator_target import REFERENCE_MODULES, ModuleMapAllocatorTarget

    return ModuleMapAllocatorTarget("vllm-9.9.0", {k: v for k, v in REFERENCE_MODULES.items()
                                                   if not k.startswith("v1.hisparse.")}, version="9.9.0")


def test_a_scenario_not_applicable_by_its_marks_keeps_its_cell(tmp_path):
    """A `needs` mark skips before the scenario runs; its cell (target, scenario) is recorded all the same, so
    `kvconform diff` of a release without the capability and one with it meets the cell in both runs."""
    results = tmp_path / "results.json"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--pyargs", "suites.allocator.test_hisparse", "--kv-allocator",
         "tests.targets.test_allocator_option:reference_without_hisparse", "-q", "-p", "no:randomly",
         "-p", "no:cacheprovider", "-p", "no:xdist", "--kvconform-results", str(results)],
        cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    entries = json.loads(results.read_text())["results"]
    skipped = [e for e in entries if e["status"] == "skipped"]
    assert skipped and all(e["message"].startswith("N/A on 9.9.0: no HiSparse") for e in skipped)
    assert all(e["cell"] == {"target": "vllm-9.9.0", "scenario": e["id"].split("::")[1], "section": "4"}
               for e in skipped), skipped[0]
