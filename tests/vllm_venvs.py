"""The venv of a vLLM release, for tests that run kvconform in it: where the release registry says it is
(`reference_impl.releases.venv_dir`, scripts/install-vllm.sh's default), or a skip that names how to make it."""

from __future__ import annotations

from pathlib import Path

import pytest

from reference_impl.releases import VENV_ROOT_ENV, install_command, venv_dir


def release_python(release: str) -> Path:
    """The Python of `release`'s venv; skips the calling test, naming the install command, where there is none."""
    python = venv_dir(release) / "bin" / "python"
    if not python.exists():
        pytest.skip(f"vLLM {release} is not installed here (no {python}; make it with {install_command(release)}, "
                    f"or name a folder of prebuilt venvs in {VENV_ROOT_ENV})")
    return python
