"""`.gitignore` covers what the documented commands write, and keeps what is committed.

The paths are the outputs of README's, docs/ci.md's and docs/vendor.md's commands (a checkout that ran them
must show a clean `git status`); `git check-ignore` judges them against the real .gitignore.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

WRITTEN = [
    "reports/results.json.gz", "reports/compatibility.html", "reports/junit.xml",          # README, reader.md
    "reports/ci/results.json.gz", "reports/ci/junit.xml", "reports/ci/compatibility.md",   # ci.md's gate
    "baseline/results.json.gz", "diff.md", "diff.json",                                     # ci.md, the workflow
    "reports/results-vllm.json", "reports/vllm/compatibility.md", "reports/throughput/compatibility.md",
    "my-report/compatibility.md", "my-report/results.json.gz",                              # vendor.md
    "merged.json", "merged.json.gz", "results-connectors-vllm-0.33.0.json",                 # merge -o, pytest
    "reports/ci/shard1/results.json.gz", "shard2.json",                                     # ci.md's shards
    "out/summary.md", "outs/vllm-job-0.34.0/summary-rows.txt", "summary.md",                # vllm-job.yml
]
COMMITTED = ["reports/compatibility.md", "reports/compatibility-v0.34.md", "reports/.gitkeep", "pyproject.toml"]


def _ignored(path: str) -> bool:
    done = subprocess.run(["git", "check-ignore", "-q", "--no-index", path], cwd=REPO, capture_output=True, check=False)
    if done.returncode not in (0, 1):
        pytest.skip(f"git check-ignore failed here: {done.stderr.decode().strip()}")
    return done.returncode == 0


@pytest.mark.skipif(shutil.which("git") is None or not (REPO / ".git").exists(), reason="needs git and a checkout")
def test_documented_outputs_are_ignored_and_committed_files_are_not():
    assert [p for p in WRITTEN if not _ignored(p)] == []
    assert [p for p in COMMITTED if _ignored(p)] == []
