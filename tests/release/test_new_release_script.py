"""scripts/new-vllm-release.sh refuses bad arguments with one line and exit status 2, before installing anything.

The judging itself needs real vLLM releases (docs/new-release.md has the measured run); here only the checks
that run first, on this checkout's eras.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from reference_impl import releases
from reference_impl.config.eras import ERAS

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "new-vllm-release.sh"
NEWEST = ERAS[-1].representative
# A release newer than every registry row (the first minor after the newest), so the script goes past its checks.
BEYOND = f"{releases.RELEASES[-1].key[0]}.{releases.RELEASES[-1].key[1] + 1}.0"


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


def test_the_old_venv_root_name_is_refused_with_the_new_one(tmp_path):
    """KVCONFORM_VLLM_VENV_ROOT was this script's own name for the CI job's KVCONFORM_CI_VLLM_VENV_ROOT: set, it
    is refused in one line naming the new one, rather than ignored (which would reinstall the prebuilt venvs)."""
    done = subprocess.run(["bash", str(SCRIPT), "0.35.0"], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable,
                               "KVCONFORM_VLLM_VENV_ROOT": str(tmp_path / "venvs"),
                               "KVCONFORM_NEW_RELEASE_OUT": str(tmp_path / "out")})
    assert done.returncode == 2, done.stderr
    assert done.stderr == ("new-vllm-release: KVCONFORM_VLLM_VENV_ROOT is now KVCONFORM_CI_VLLM_VENV_ROOT "
                           "(the CI job's name): set that instead\n")
    assert not (tmp_path / "out").exists()


def test_the_ci_venv_root_names_prebuilt_venvs_used_as_they_are(tmp_path):
    """With KVCONFORM_CI_VLLM_VENV_ROOT set, a release's venv is ROOT/vllm-X.Y.Z (the registry's venv_dir) and a
    missing one stops the script (exit 1) with that folder named, installing nothing."""
    root = tmp_path / "venvs"
    done = subprocess.run(["bash", str(SCRIPT), BEYOND], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable,
                               "KVCONFORM_CI_VLLM_VENV_ROOT": str(root),
                               "KVCONFORM_NEW_RELEASE_OUT": str(tmp_path / "out")})
    assert done.returncode == 1, done.stderr
    assert f"no prebuilt venv {root}/vllm-{BEYOND} (KVCONFORM_CI_VLLM_VENV_ROOT)" in done.stderr
    assert not root.exists()
