"""The import mapping that points vLLM's allocator tests at the reference allocator.

vLLM's `tests/v1/core` files import the allocator from `vllm.v1.core.<module>`, the layer specs from
`vllm.v1.kv_cache_interface` and, since 0.33, HiSparse's allocator side (its group layout and the
coordinator that drives residency, spills and host publication) from `vllm.v1.hisparse.<module>`. The
mapping swaps exactly those module names for `reference_impl.kv_cache.<module>`, in import statements and in dotted strings (`monkeypatch.setattr`
targets) alike; everything else (Request, SamplingParams, vllm.utils, the scheduler) stays vLLM's. No
adapter sits in between: a name the reference lacks fails the test, as it would fail a user's code.

The swap is applied to the staged copy of the test files only, never to vLLM's own modules, so vLLM's
internals keep their own allocator and a test measures the reference through its public surface.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

__all__ = ["MAPPED_MODULES", "map_source", "stage_mapped_tests"]

# vLLM module -> reference module: the allocator's `v1/core` modules, the spec module and HiSparse's
# allocator-side modules (its worker runtime and connector stay vLLM's).
MAPPED_MODULES: dict[str, str] = {
    "vllm.v1.core.block_pool": "reference_impl.kv_cache.block_pool",
    "vllm.v1.core.kv_cache_utils": "reference_impl.kv_cache.kv_cache_utils",
    "vllm.v1.core.kv_cache_manager": "reference_impl.kv_cache.kv_cache_manager",
    "vllm.v1.core.kv_cache_coordinator": "reference_impl.kv_cache.kv_cache_coordinator",
    "vllm.v1.core.single_type_kv_cache_manager": "reference_impl.kv_cache.single_type_kv_cache_manager",
    "vllm.v1.core.kv_cache_planning": "reference_impl.kv_cache.kv_cache_planning",
    "vllm.v1.core.kv_cache_config_builder": "reference_impl.kv_cache.kv_cache_config_builder",
    "vllm.v1.kv_cache_interface": "reference_impl.kv_cache.kv_cache_interface",
    "vllm.v1.hisparse.layout": "reference_impl.kv_cache.hisparse_layout",
    "vllm.v1.hisparse.coordinator": "reference_impl.kv_cache.hisparse_coordinator",
}

# A mapped name followed by a non-identifier character: `vllm.v1.core.block_pool_x` is not mapped.
_PATTERN = re.compile(r"\b(" + "|".join(re.escape(m) for m in MAPPED_MODULES) + r")(?![\w])")


def map_source(text: str) -> str:
    """`text` with every mapped vLLM module name replaced by its reference module."""
    return _PATTERN.sub(lambda m: MAPPED_MODULES[m.group(1)], text)


def stage_mapped_tests(source_root: Path, target_root: Path, package: str = "tests/v1/core") -> list[Path]:
    """Copy the vLLM test tree `source_root` to `target_root`, mapping the Python files under `package`.

    Files outside `package` (vLLM's shared test helpers) are copied unchanged. Returns the mapped files.
    """
    if target_root.exists():
        shutil.rmtree(target_root)
    shutil.copytree(source_root, target_root)
    mapped = []
    for path in sorted((target_root / package).rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        new = map_source(text)
        if new != text:
            path.write_text(new, encoding="utf-8")
            mapped.append(path)
    return mapped
