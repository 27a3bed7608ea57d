"""pytest plugin: vLLM's `vllm.v1.core` allocator modules and its spec module are the reference's for the
whole process.

Loaded with `-p harness.upstream.process_alias` on the reference run of the upstream job; its
`pytest_configure` runs before any test module imports vLLM. Each name in `PROCESS_MODULES` is bound in
`sys.modules` to the reference module, so every importer (the test files, and vLLM's own `Scheduler`,
`KVCacheMetricsCollector`, connectors...) gets the reference: vLLM's scheduler then allocates through
`reference_impl.kv_cache`. Nothing is adapted; a name the reference lacks fails the import that asks for it,
as it would for a user.

The spec module (`vllm.v1.kv_cache_interface`, with `vllm.v1.kv_cache_layout`, the leaf module vLLM keeps
its layout enum in) is bound too, so a spec, spec wrapper, group role, layout or quant mode is one class or
enum member in the whole process: vLLM's worker, attention-layout, engine-core and connector code then
recognises the specs a test builds (`isinstance`, `is`) and computes with the reference's. vLLM's model,
attention and platform code import that module as well; the reference holds every name they import (the
spec classes, the quant mode of a dtype name, the per-layer views of a planned tensor), and what a test
exercises of them runs on the reference's specs. HiSparse's modules stay vLLM's process-wide (the test
files' imports of them are mapped).
"""

from __future__ import annotations

import importlib
import sys

from harness.upstream.import_mapping import MAPPED_MODULES

__all__ = ["PROCESS_MODULES", "install"]

# vLLM module -> reference module: every module of the test-file mapping (one home for the module names)
# but HiSparse's, which stay vLLM's process-wide (see above).
PROCESS_MODULES: dict[str, str] = {
    name: ref for name, ref in MAPPED_MODULES.items() if not name.startswith("vllm.v1.hisparse.")
}


def install(modules: dict[str, str] = PROCESS_MODULES) -> None:
    """Bind each vLLM module name to its reference module in `sys.modules` (and on its parent package).

    Raises RuntimeError if vLLM already imported one of them: the process would hold both allocators.
    """
    already = sorted(name for name in modules if name in sys.modules
                     and not sys.modules[name].__name__.startswith("reference_impl."))
    if already:
        raise RuntimeError(f"process_alias: vLLM modules imported before the alias: {', '.join(already)}")
    for vllm_name, ref_name in modules.items():
        sys.modules[vllm_name] = importlib.import_module(ref_name)
    # The parent packages get the attributes too (`from vllm.v1.core import block_pool`).
    for vllm_name in modules:
        parent, _, child = vllm_name.rpartition(".")
        setattr(importlib.import_module(parent), child, sys.modules[vllm_name])


def pytest_configure(config) -> None:
    """pytest hook: alias before collection imports any test module (on xdist workers too)."""
    install()
