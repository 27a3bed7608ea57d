"""The import mapping that points vLLM's allocator tests at the reference allocator.

vLLM's `tests/v1/core` files import the allocator from `vllm.v1.core.<module>`, the layer specs from
`vllm.v1.kv_cache_interface` (its layout enum from `vllm.v1.kv_cache_layout`) and, since 0.33, HiSparse's
allocator side (its group layout and the coordinator that drives residency, spills and host publication)
from `vllm.v1.hisparse.<module>`. The mapping swaps exactly those module names for
`reference_impl.kv_cache.<module>`, in import statements and in dotted strings (`monkeypatch.setattr`
targets) alike; everything else (Request, SamplingParams, vllm.utils, the scheduler) stays vLLM's, including a
name a test imports through a mapped module that only re-exports it (`KEPT_REEXPORTS`). No
adapter sits in between: a name the reference lacks fails the test, as it would fail a user's code.

The text swap is applied to the staged copy of the test files only, never to vLLM's own modules; what
vLLM's own code imports is `process_alias`'s (the same modules but HiSparse's, bound for the whole process).
"""

from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path

__all__ = ["MAPPED_MODULES", "KEPT_REEXPORTS", "map_source", "stage_mapped_tests"]

# vLLM module -> reference module: the allocator's `v1/core` modules, the spec module (with the layout
# enum's module) and HiSparse's allocator-side modules (its worker runtime and connector stay vLLM's).
MAPPED_MODULES: dict[str, str] = {
    "vllm.v1.core.block_pool": "reference_impl.kv_cache.block_pool",
    "vllm.v1.core.kv_cache_utils": "reference_impl.kv_cache.kv_cache_utils",
    "vllm.v1.core.kv_cache_manager": "reference_impl.kv_cache.kv_cache_manager",
    "vllm.v1.core.kv_cache_coordinator": "reference_impl.kv_cache.kv_cache_coordinator",
    "vllm.v1.core.single_type_kv_cache_manager": "reference_impl.kv_cache.single_type_kv_cache_manager",
    "vllm.v1.core.kv_cache_planning": "reference_impl.kv_cache.kv_cache_planning",
    "vllm.v1.core.kv_cache_config_builder": "reference_impl.kv_cache.kv_cache_config_builder",
    "vllm.v1.kv_cache_interface": "reference_impl.kv_cache.kv_cache_interface",
    # vLLM's layout enum lives in a leaf module of its own, which its spec module re-exports; the
    # reference keeps it in the spec module.
    "vllm.v1.kv_cache_layout": "reference_impl.kv_cache.kv_cache_interface",
    "vllm.v1.hisparse.layout": "reference_impl.kv_cache.hisparse_layout",
    "vllm.v1.hisparse.coordinator": "reference_impl.kv_cache.hisparse_coordinator",
}

# Reviewed data: names a mapped vLLM module only re-exports from a vLLM module the mapping leaves alone,
# which stay vLLM's when a test imports them through the mapped module. vLLM 0.33/0.34's
# `test_prefix_caching.py` takes the serving `Request` (defined in `vllm.v1.request`, which every other
# file of the folder imports it from) from `vllm.v1.core.kv_cache_manager`, and hands those requests to
# vLLM's `Scheduler`, which reads its serving fields (events, streaming, structured output). A name the
# reference's module defines for the allocator's own use (its spec types, `KVCacheLayout`) is not listed.
KEPT_REEXPORTS: dict[str, dict[str, str]] = {
    "vllm.v1.core.kv_cache_manager": {"Request": "vllm.v1.request"},
}

# A mapped name followed by a non-identifier character: `vllm.v1.core.block_pool_x` is not mapped.
_PATTERN = re.compile(r"\b(" + "|".join(re.escape(m) for m in MAPPED_MODULES) + r")(?![\w])")


def _keep_reexports(text: str) -> str:
    """`text` with each `from <mapped module> import ...` that names a `KEPT_REEXPORTS` entry split in two:
    the kept names imported from their vLLM home, the rest left for the module mapping."""
    if not any(module in text for module in KEPT_REEXPORTS):
        return text
    lines = text.splitlines(keepends=True)
    edits = []
    for node in ast.walk(ast.parse(text)):
        if not isinstance(node, ast.ImportFrom):
            continue
        kept = KEPT_REEXPORTS.get(node.module, {})
        if not any(alias.name in kept for alias in node.names):
            continue
        indent = lines[node.lineno - 1][:node.col_offset]
        if indent.strip():
            raise ValueError(f"import_mapping: line {node.lineno}: an import of {node.module} that does not "
                             "start its line cannot be split (accepted: one import statement per line)")
        homes: dict[str, list[str]] = {}
        for alias in node.names:
            spelled = alias.name + (f" as {alias.asname}" if alias.asname else "")
            homes.setdefault(kept.get(alias.name, node.module), []).append(spelled)
        statements = "".join(f"{indent}from {home} import {', '.join(names)}\n" for home, names in homes.items())
        edits.append((node.lineno - 1, node.end_lineno, statements))
    for start, end, statements in sorted(edits, reverse=True):  # bottom-up: earlier line numbers stay valid
        lines[start:end] = [statements]
    return "".join(lines)


def map_source(text: str) -> str:
    """`text` with every mapped vLLM module name replaced by its reference module (names listed in
    `KEPT_REEXPORTS` are imported from their own vLLM module instead)."""
    return _PATTERN.sub(lambda m: MAPPED_MODULES[m.group(1)], _keep_reexports(text))


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
