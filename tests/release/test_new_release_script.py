"""scripts/new-vllm-release.sh refuses bad arguments with one line and exit status 2, before installing anything.

The judging itself needs real vLLM releases (docs/new-release.md has the measured run); here only the checks
that run first, on this checkout's eras.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from reference_impl.config.eras import ERAS

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "new-vllm-release.sh"
NEWEST = ERAS[-1].representative


@pytest.mark.parametrize("args,message", [
    ([], "usage: scripts/new-vllm-release.sh X.Y.Z"),
    (["0.35"], "release: '0.35' is not a vLLM release; expected X.Y.Z such as 0.35.0"),
    (["0.35.0", "0.36.0"], "one release expected, got '0.35.0' and '0.36.0'"),
    (["0.35.0", "--bogus"], "unknown option '--bogus'"),
    (["0.35.0", "--previous", "x"], "--previous: 'x' is not a vLLM release"),
    (["0.35.0", "--previous"], "--previous needs a release X.Y.Z"),
    (["0.35.0", "--count", "0"], "--count: '0' is not a positive number of cases"),
    ([NEWEST], f"release: {NEWEST} is not newer than {NEWEST}"),
    (["0.35.0", "--previous", "0.36.0"], "release: 0.35.0 is not newer than 0.36.0"),
])
def test_bad_arguments(args, message, tmp_path):
    done = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable,
                               "KVCONFORM_NEW_RELEASE_OUT": str(tmp_path / "out")})
    assert done.returncode == 2, done.stderr
    assert done.stdout == "" and done.stderr.count("\n") == 1 and message in done.stderr, done.stderr
    assert not (tmp_path / "out").exists()
