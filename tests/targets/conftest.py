"""Fixtures for the vLLM adapter tests: a fake `vllm` first on sys.path, or no vLLM distribution at all."""

from __future__ import annotations

import importlib.metadata
import sys

import pytest

from tests.targets.fake_vllm import write_fake_vllm


def _vllm_modules() -> dict:
    return {name: mod for name, mod in sys.modules.items() if name == "vllm" or name.startswith("vllm.")}


@pytest.fixture
def fake_vllm(tmp_path, monkeypatch):
    """`fake_vllm(version, modules)` writes a fake vLLM and puts it first on sys.path for this test.

    Any vLLM modules already imported (a real install, in the vLLM venv) are set aside and put back
    afterwards, so the fake one is what `import vllm...` finds.
    """
    saved = _vllm_modules()
    for name in saved:
        del sys.modules[name]

    def install(version: str, modules: dict[str, str] | None = None):
        root = write_fake_vllm(tmp_path / f"site-{version}", version, modules)
        monkeypatch.syspath_prepend(str(root))
        return root

    yield install
    for name in _vllm_modules():
        del sys.modules[name]
    sys.modules.update(saved)


@pytest.fixture
def no_vllm_distribution(monkeypatch):
    """importlib.metadata answers as on a machine without vLLM (whatever this venv has)."""
    real = importlib.metadata.version

    def version(name):
        if name == "vllm":
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "version", version)
