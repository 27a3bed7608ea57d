"""`--hma-target vllm` and `kvconform report --target vllm` on a machine without a usable vLLM: exit 4 and
one line on stderr, no traceback, no report written. Also the matrix header naming what runs.

The subprocess runs get a fake `vllm` first on PYTHONPATH (tests/targets/fake_vllm.py), so they behave
the same in the main venv and in a vLLM venv.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli import main
from reference_impl.releases import ci_releases
from tests.targets.fake_vllm import IMPORTABLE, write_fake_vllm

ROOT = Path(__file__).resolve().parents[2]


def _run(tmp_path, fake_version, modules, *argv):
    fake = write_fake_vllm(tmp_path / "fake-site", fake_version, modules)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(fake), str(ROOT)]))
    env.pop("KVCONFORM_TARGET", None)
    return subprocess.run([sys.executable, *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def _one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected exactly one line on stderr, got:\n{stderr}"
    assert "Traceback" not in stderr
    return lines[0]


def test_pytest_hma_target_vllm_unsupported_release(tmp_path):
    result = _run(tmp_path, "0.35.0", IMPORTABLE, "-m", "pytest", "suites/config", "-p", "no:cacheprovider",
                  "-p", "no:xdist", "--hma-target", "vllm", "--vllm-version", "v0.33")
    assert result.returncode == 4, result.stdout + result.stderr
    line = _one_line(result.stderr)
    assert line.startswith("ERROR: --hma-target vllm: installed vLLM 0.35.0 is not supported"), line
    assert "scripts/install-vllm.sh" in line


def test_report_target_vllm_import_fails_halfway(tmp_path):
    out = tmp_path / "report"
    broken = {"vllm.config": IMPORTABLE["vllm.config"],
              "vllm.distributed.kv_transfer.kv_connector.factory": "import kvconform_absent_dependency\n"}
    result = _run(tmp_path, "0.33.0", broken, "-m", "harness.cli", "report", "--target", "vllm", "--output-dir", str(out))
    assert result.returncode == 4, result.stdout + result.stderr
    line = _one_line(result.stderr)
    assert line == ("kvconform report: --target vllm: vLLM 0.33.0 is installed but "
                    "vllm.distributed.kv_transfer.kv_connector.factory does not import (missing package "
                    "'kvconform_absent_dependency'); reinstall it with: scripts/install-vllm.sh 0.33.0"), line
    assert result.stdout == "", "nothing may start (no pytest run) when the target cannot load"
    assert not out.exists(), "no report may be written"


def test_report_target_vllm_not_installed(tmp_path, no_vllm_distribution, capsys):
    code = main(["report", "--target", "vllm", "--output-dir", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 4
    assert _one_line(err).startswith("kvconform report: --target vllm: vLLM is not installed in this Python environment; "
                                     f"install one with: scripts/install-vllm.sh {ci_releases()[0]}")
    assert out == "" and not any(tmp_path.iterdir())


class DescribedTarget:
    """A config target bound to one release, as the `vllm` target is: it says what it wraps, and its era."""

    era = "v0.20"

    def describe(self) -> str:
        return "fakeengine 9.9.9 (era v0.20)"

    def __call__(self, case: dict) -> dict:
        return {"id": case.get("id"), "resolved_disable_hma": None, "warnings": [], "error": None,
                "rules": [], "unknown": "a header test target evaluates nothing"}


DESCRIBED = DescribedTarget()
_DESCRIBED_SPEC = "tests.targets.test_vllm_command_line:DESCRIBED"


@pytest.mark.parametrize("argv,expected", [
    (["--hma-target", _DESCRIBED_SPEC],
     f"kvconform config matrix: target {_DESCRIBED_SPEC} (fakeengine 9.9.9 (era v0.20)); eras v0.20; golden off"),
    (["--hma-target", _DESCRIBED_SPEC, "--vllm-version", "seed"],
     f"kvconform config matrix: target {_DESCRIBED_SPEC} (fakeengine 9.9.9 (era v0.20)); eras seed; golden off"),
    (["--vllm-version", "v0.33"], "kvconform config matrix: target reference_impl.config:resolve_case (kvconform "),
], ids=["own-era", "explicit-era", "reference"])
def test_matrix_header_names_target_version_and_era(tmp_path, argv, expected):
    """The header shows what the target says it is (`vllm`: "vllm 0.33.0 (era v0.33)"); a target bound to one
    release covers its own era unless --vllm-version says otherwise; the reference keeps its distribution version."""
    # Selecting nothing: pytest prints the header and stops (exit 5) without running the matrix.
    result = _run(tmp_path, "0.33.0", IMPORTABLE, "-m", "pytest", "suites/config", "-p", "no:cacheprovider",
                  "-p", "no:xdist", "-k", "kvconform_selects_nothing", *argv)
    headers = [line for line in result.stdout.splitlines() if line.startswith("kvconform config matrix:")]
    assert headers and headers[0].startswith(expected), result.stdout[-2000:] + result.stderr[-2000:]


def test_results_file_records_the_targets_version(tmp_path):
    """A results file says which release a named target wrapped, so a diff of two runs can be told apart."""
    results = tmp_path / "results.json"
    _run(tmp_path, "0.33.0", IMPORTABLE, "-m", "pytest", "suites/config", "-p", "no:cacheprovider", "-p", "no:xdist",
         "-k", "kvconform_selects_nothing", "--hma-target", _DESCRIBED_SPEC, "--kvconform-results", str(results))
    run_info = json.loads(results.read_text())["run_info"]
    assert run_info["target"] == _DESCRIBED_SPEC
    assert run_info["target_version"] == "fakeengine 9.9.9 (era v0.20)"
