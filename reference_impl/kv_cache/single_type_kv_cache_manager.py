"""Single-type managers: one per KV cache group, each owning that group's block tables (vLLM 0.33's
`single_type_kv_cache_manager`, same class names and method signatures).

The classes live in `reference_impl.kv_cache.single_type`, one class family per module; this module is their
public home under vLLM's name (it re-exports every one) and holds the dispatch as data: `spec_manager_map`
(spec type -> manager class) and `role_manager_map` (group role -> manager class), read by
`manager_class_for_spec` and `get_manager_for_kv_cache_spec`.
"""

from __future__ import annotations

from reference_impl.kv_cache.kv_cache_spec_registry import KVCacheSpecRegistry
from reference_impl.kv_cache.kv_cache_interface import (
    ChunkedLocalAttentionSpec,
    CircularBufferSpec,
    CrossAttentionSpec,
    FullAttentionSpec,
    HiSparseHotSpec,
    HiSparseResidentSpec,
    KVCacheGroupRole,
    KVCacheSpec,
    MambaSpec,
    MLAAttentionSpec,
    RSWASpec,
    ScratchSpec,
    SinkFullAttentionSpec,
    SlidingWindowMLASpec,
    SlidingWindowSpec,
    UniformTypeKVCacheSpecs,
)
from reference_impl.kv_cache.single_type.base import SingleTypeKVCacheManager
from reference_impl.kv_cache.single_type.chunked_local_attention import ChunkedLocalAttentionManager
from reference_impl.kv_cache.single_type.cross_attention import CrossAttentionManager
from reference_impl.kv_cache.single_type.full_attention import (
    CircularBufferManager,
    FullAttentionManager,
    RSWAManager,
)
from reference_impl.kv_cache.single_type.hisparse import (
    HiSparseHotManager,
    HiSparseResidentManager,
    HiSparseSourceManager,
    bind_hisparse_host_pool,
)
from reference_impl.kv_cache.single_type.mamba import MambaManager
from reference_impl.kv_cache.single_type.sliding_window import SlidingWindowManager

__all__ = [
    "SingleTypeKVCacheManager",
    "FullAttentionManager",
    "RSWAManager",
    "SlidingWindowManager",
    "CircularBufferManager",
    "ChunkedLocalAttentionManager",
    "CrossAttentionManager",
    "MambaManager",
    "HiSparseSourceManager",
    "HiSparseHotManager",
    "HiSparseResidentManager",
    "UnsupportedKVCacheSpecError",
    "bind_hisparse_host_pool",
    "manager_class_for_spec",
    "role_manager_map",
    "spec_manager_map",
    "get_manager_for_kv_cache_spec",
    "register_all_kvcache_specs",
]


spec_manager_map: dict[type, type[SingleTypeKVCacheManager]] = {
    FullAttentionSpec: FullAttentionManager,
    MLAAttentionSpec: FullAttentionManager,
    SinkFullAttentionSpec: FullAttentionManager,
    RSWASpec: RSWAManager,
    SlidingWindowSpec: SlidingWindowManager,
    SlidingWindowMLASpec: SlidingWindowManager,
    ChunkedLocalAttentionSpec: ChunkedLocalAttentionManager,
    MambaSpec: MambaManager,
    CircularBufferSpec: CircularBufferManager,
    ScratchSpec: FullAttentionManager,  # never read back, so any table that covers the tokens will do
    CrossAttentionSpec: CrossAttentionManager,
    HiSparseHotSpec: HiSparseHotManager,
    HiSparseResidentSpec: HiSparseResidentManager,
}

#: Managers chosen by a group's role rather than its spec (vLLM's role registry).
role_manager_map: dict[str, type[SingleTypeKVCacheManager]] = {
    KVCacheGroupRole.HISPARSE_SOURCE: HiSparseSourceManager,
}


def register_all_kvcache_specs(vllm_config=None) -> dict[type, type[SingleTypeKVCacheManager]]:
    """The built-in spec -> manager registry (fixed in the reference; returned for inspection)."""
    return spec_manager_map


class UnsupportedKVCacheSpecError(ValueError, AssertionError):
    """No manager is registered for a spec's type. vLLM asserts here, so this is an AssertionError as
    well as the reference's ValueError for bad input."""


def manager_class_for_spec(kv_cache_spec: KVCacheSpec, role: str | None = None) -> type[SingleTypeKVCacheManager]:
    """The manager class for a group: its role's manager if the role has one, else the class registered
    for the spec's type or its nearest registered base (a same-type wrapper: its layers')."""
    if role is not None and role in role_manager_map:
        return role_manager_map[role]
    spec_type = type(kv_cache_spec)
    if spec_type is UniformTypeKVCacheSpecs:
        spec_type = type(kv_cache_spec.first_spec)
    for base in spec_type.__mro__:
        manager_cls = spec_manager_map.get(base)
        if manager_cls is not None:
            return manager_cls
    raise UnsupportedKVCacheSpecError(
        f"kv_cache_spec: unsupported spec type {type(kv_cache_spec).__name__}; accepted: "
        f"{', '.join(t.__name__ for t in spec_manager_map)} (or a subclass)")


KVCacheSpecRegistry.register_manager_lookup(manager_class_for_spec)


def get_manager_for_kv_cache_spec(kv_cache_spec: KVCacheSpec, max_in_flight_tokens: int | None = None,
                                  max_model_len: int | None = None, role: str | None = None,
                                  **kwargs) -> SingleTypeKVCacheManager:
    """Instantiate the manager class for the spec (and the group's `role`, see `manager_class_for_spec`).

    Given `max_in_flight_tokens` and `max_model_len` (vLLM's arguments), a spec whose blocks recycle or
    spill (sliding window, chunked local, HiSparse resident) gets its admission cap from them, unless
    `max_admission_blocks_per_request` is passed explicitly.
    """
    manager_cls = manager_class_for_spec(kv_cache_spec, role)
    if max_in_flight_tokens is not None and max_model_len is not None \
            and kwargs.get("max_admission_blocks_per_request") is None \
            and isinstance(kv_cache_spec, (SlidingWindowSpec, ChunkedLocalAttentionSpec, HiSparseResidentSpec)):
        kwargs["max_admission_blocks_per_request"] = kv_cache_spec.max_admission_blocks_per_request(
            max_in_flight_tokens, max_model_len)
    return manager_cls(kv_cache_spec, **kwargs)
