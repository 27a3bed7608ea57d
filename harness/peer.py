"""The peer the throughput benchmarks compare with: vLLM, where it imports (a light module: it imports neither
vLLM nor torch, so `kvconform report` can ask before it plans its passes)."""

from __future__ import annotations

import importlib.util

#: The package whose figures the throughput table divides by (`suites.benchmarks`' other implementation).
PEER_PACKAGE = "vllm"


def peer_importable() -> bool:
    """Whether vLLM would import in this Python: its package is found (nothing is imported)."""
    return importlib.util.find_spec(PEER_PACKAGE) is not None
