"""The peer the benchmarks compare with: vLLM, where it imports."""

from __future__ import annotations

import importlib.util

from harness import outcomes


def require_vllm() -> None:
    """Skip the running test, as one this machine cannot run (a typed cause the report reads), unless vLLM
    imports here."""
    if importlib.util.find_spec("vllm") is None:
        outcomes.cannot_run_here("vLLM is not importable in this environment", needs="package", packages=["vllm"])
