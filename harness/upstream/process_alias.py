"""pytest plugin: vLLM's `vllm.v1.core` allocator modules are the reference's for the whole process.

Loaded with `-p harness.upstream.process_alias` on the reference run of the upstream job; its
`pytest_configure` runs before any test module imports vLLM. Each name in `PROCESS_MODULES` is bound in `sys.modules` to the reference module, so
every importer (the test files, and vLLM's own `Scheduler`, `KVCacheMetricsCollector`, connectors...) gets
the reference: vLLM's scheduler then allocates through `reference_impl.kv_cache`. Nothing is adapted; a
name the reference lacks fails the import that asks for it, as it would for a user.

The spec module (`vllm.v1.kv_cache_interface`) is not aliased process-wide: all of vLLM's model, attention
and platform code imports it, for far more than the allocator. The test files' own imports of it go
to the reference through `import_mapping`, so the specs a test builds are the reference's.
"""

from __future__ import annotations

import importlib
import sys

from harness.upstream.import_mapping import MAPPED_MODULES

__all__ = ["PROCESS_MODULES", "install"]

# vLLM module -> reference module: the allocator's `v1/core` modules, taken from the test-file mapping
# (one home for the module names); the spec and HiSparse modules stay vLLM's process-wide (see above).
PROCESS_MODULES: dict[str, str] = {
    name: ref for name, ref in MAPPED_MODULES.items() if name.startswith("vllm.v1.core.")
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
