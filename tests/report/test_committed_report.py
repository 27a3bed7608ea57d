"""The committed `reports/compatibility.md` is not stale: its config matrix matches a fresh run of the suite.

Only the config section is compared (the allocator, connector and throughput sections come from the other
suites, and the run line names the run); regenerate the file with `kvconform report` and commit it.
"""

from __future__ import annotations

import difflib
import subprocess
import sys
from pathlib import Path

import pytest

from harness.report.build import build_document
from harness.report.markdown import extract_section, render_markdown
from harness.results_model import load_results

REPO = Path(__file__).resolve().parents[2]
COMMITTED = REPO / "reports" / "compatibility.md"
SECTION = "config"


def test_committed_compatibility_report_is_current(tmp_path):
    assert COMMITTED.exists(), f"{COMMITTED} is missing: run `kvconform report` and commit reports/compatibility.md"
    results_path = tmp_path / "results.json"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--pyargs", "suites.config", "-n", "2", "-q", "-p", "no:cacheprovider",
         "--kvconform-results", str(results_path)],
        cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode == 5:
        pytest.skip("the config suite collected no tests")
    assert results_path.exists(), f"the config suite wrote no results:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    fresh = extract_section(render_markdown(build_document(load_results(results_path))), SECTION)
    committed = extract_section(COMMITTED.read_text(encoding="utf-8"), SECTION)
    if fresh != committed:
        diff = "\n".join(list(difflib.unified_diff(committed.splitlines(), fresh.splitlines(), "committed", "fresh",
                                                   lineterm="", n=1))[:40])
        pytest.fail(f"reports/compatibility.md is stale (config matrix differs from a fresh run); "
                    f"regenerate it with `kvconform report` and commit it. First differences:\n{diff}")
