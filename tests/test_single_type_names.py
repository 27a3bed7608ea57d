"""`single_type_kv_cache_manager` keeps vLLM's names while its classes live one family per module.

The managers are defined in `reference_impl.kv_cache.single_type.*`; vLLM's code and tests import them from
`vllm.v1.core.single_type_kv_cache_manager`, which the upstream job binds to the reference's module of that
name (`harness/upstream/process_alias.py`). A name missing there fails the import of every vLLM module or test
that asks for it, so the names are checked here without vLLM.
"""

from __future__ import annotations

import importlib
import pkgutil

import reference_impl.kv_cache.single_type as single_type
from reference_impl.kv_cache import single_type_kv_cache_manager as stm

# Every name vLLM imports from `vllm.v1.core.single_type_kv_cache_manager`: in its own modules (`kv_cache_coordinator`,
# `kv_cache_manager`, `kv_cache_utils`, `kv_cache_spec_registry`, `engine/core`, `hisparse/coordinator`, the
# offloading and Mooncake store connectors; the wheels of 0.10, 0.11, 0.12, 0.13, 0.14, 0.20, 0.22, 0.32, 0.33 and
# 0.34) and in the tests of the 0.33.0 and 0.34.0 sdists, read with ast on 2026-12-06. 0.34's
# `SinkFullAttentionManager`, imported only by `tests/v1/test_kv_cache_spec_registry.py` (outside the folder the
# upstream job runs), is not one: the reference serves sink full attention with `FullAttentionManager`.
VLLM_IMPORTED = frozenset({
    "SingleTypeKVCacheManager", "FullAttentionManager", "RSWAManager", "SlidingWindowManager",
    "ChunkedLocalAttentionManager", "CircularBufferManager", "CrossAttentionManager", "MambaManager",
    "HiSparseSourceManager", "HiSparseHotManager", "HiSparseResidentManager",
    "get_manager_for_kv_cache_spec", "register_all_kvcache_specs", "spec_manager_map",
})


def test_every_name_vllm_imports_is_exported():
    assert VLLM_IMPORTED <= set(stm.__all__), sorted(VLLM_IMPORTED - set(stm.__all__))
    assert all(hasattr(stm, name) for name in stm.__all__), [n for n in stm.__all__ if not hasattr(stm, n)]


def test_every_manager_defined_in_the_family_modules_is_exported_once():
    """Each public class of `single_type/*` is the same object under vLLM's module name (isinstance checks in
    vLLM's code see one class), and the dispatch names only exported classes."""
    defined = {}
    for info in pkgutil.iter_modules(single_type.__path__):
        module = importlib.import_module(f"{single_type.__name__}.{info.name}")
        for name in getattr(module, "__all__", ()):
            assert name not in defined, f"{name} is exported by {defined[name]} and {info.name}"
            defined[name] = info.name
            assert getattr(stm, name) is getattr(module, name), name
    assert set(defined) <= set(stm.__all__), sorted(set(defined) - set(stm.__all__))
    dispatched = {*stm.spec_manager_map.values(), *stm.role_manager_map.values()}
    assert {cls.__name__ for cls in dispatched} <= set(defined), sorted(c.__name__ for c in dispatched)
