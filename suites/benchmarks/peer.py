"""The peer the benchmarks compare with: vLLM, where it imports."""

from __future__ import annotations

from harness import outcomes
from harness.peer import PEER_PACKAGE, peer_importable


def require_vllm() -> None:
    """Skip the running test, as one this machine cannot run (a typed cause the report reads), unless vLLM
    imports here."""
    if not peer_importable():
        outcomes.cannot_run_here("vLLM is not importable in this environment", needs="package", packages=[PEER_PACKAGE])
