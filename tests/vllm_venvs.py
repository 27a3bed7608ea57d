"""The venv of a vLLM release, for tests that run kvconform in it: where the release registry says it is
(`reference_impl.releases.venv_dir`, scripts/install-vllm.sh's default), or a skip that names how to make it; and
the skip reason of a test that needs vLLM importable (`needs_vllm`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from reference_impl.releases import VENV_ROOT_ENV, install_command, install_hint, venv_dir


def release_python(release: str) -> Path:
    """The Python of `release`'s venv; skips the calling test, naming the install command, where there is none."""
    python = venv_dir(release) / "bin" / "python"
    if not python.exists():
        pytest.skip(f"vLLM {release} is not installed here (no {python}; make it with {install_command(release)}, "
                    f"or name a folder of prebuilt venvs in {VENV_ROOT_ENV})")
    return python


def needs_vllm(what: str = "vLLM") -> str:
    """The skip reason of a test that needs `what` of an importable vLLM: the registry's install hint (the newest
    release the CI job judges; `reference_impl.releases.install_hint`), never a release written down here."""
    return f"needs {what} ({install_hint()} and this tree first on PYTHONPATH)"
