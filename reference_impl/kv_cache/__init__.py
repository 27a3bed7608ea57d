"""The reference hybrid KV cache allocator, named and shaped after vLLM 0.33's `v1/core`.

Modules, named as vLLM names them: `kv_cache_interface` (layer specs, groups, config), `kv_cache_planning`
(layer specs -> groups -> a `KVCacheConfig`, HiSparse's dispatch, memory accounting; `kv_cache_config_builder`
its pluggable placement), `kv_cache_utils` (prefix block hashes and the config helpers),
`request`, `block_pool` (blocks, free queue, prefix-cache map), `single_type_kv_cache_manager` (the spec ->
manager dispatch, re-exporting the managers, which live one class family per module in `single_type/`),
`kv_cache_coordinator`, `kv_cache_manager`, `tensors` (the KV memory itself),
`hisparse_layout` (HiSparse's groups, host-pool sizing and concurrency bound), `hisparse_coordinator`
(HiSparse's write-back spills, device residency and host publication) and `hisparse_types` (what it
hands the worker). Two modules vLLM keeps inside its planning module sit below planning and HiSparse's
layout, which both use them: `kv_cache_grouping` (layer specs -> groups, HMA-off promotion) and
`kv_cache_placement` (groups -> tensors in a KV cache layout).
"""

from reference_impl.kv_cache.block_pool import BlockHashToBlockMap, BlockPool, FreeKVCacheBlockQueue, KVCacheBlock
from reference_impl.kv_cache.kv_cache_planning import get_kv_cache_config_from_groups, get_kv_cache_groups
from reference_impl.kv_cache.kv_cache_utils import (
    BlockHashListWithBlockSize,
    get_request_block_hasher,
    hash_block_tokens,
    make_block_hash_with_group_id,
    sha256,
)
from reference_impl.kv_cache.kv_cache_manager import KVCacheBlocks, KVCacheManager
from reference_impl.kv_cache.request import LoRARequest, MultiModalFeature, Request
from reference_impl.kv_cache.kv_cache_interface import (
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    KVCacheTensor,
    MambaSpec,
    RSWASpec,
    SlidingWindowSpec,
)

__all__ = [
    "BlockHashListWithBlockSize", "BlockHashToBlockMap", "BlockPool", "ChunkedLocalAttentionSpec",
    "FreeKVCacheBlockQueue", "FullAttentionSpec", "KVCacheBlock", "KVCacheBlocks", "KVCacheConfig",
    "KVCacheGroupSpec", "KVCacheManager", "KVCacheTensor", "LoRARequest", "MambaSpec", "MultiModalFeature",
    "RSWASpec", "Request", "SlidingWindowSpec", "get_kv_cache_config_from_groups", "get_kv_cache_groups",
    "get_request_block_hasher", "hash_block_tokens", "make_block_hash_with_group_id", "sha256",
]
