"""`ChunkedLocalAttentionManager`: chunked local attention (earlier chunks skipped)."""

from __future__ import annotations

from reference_impl.kv_cache.kv_cache_interface import ChunkedLocalAttentionSpec
from reference_impl.kv_cache.kv_cache_utils import resolve_block_hashes
from reference_impl.kv_cache.single_type.base import SingleTypeKVCacheManager

__all__ = ["ChunkedLocalAttentionManager"]


class ChunkedLocalAttentionManager(SingleTypeKVCacheManager):
    """Chunked local attention: blocks of earlier chunks are nulled; hits before the chunk start are free."""

    def __init__(self, kv_cache_spec: ChunkedLocalAttentionSpec, *args, **kwargs):
        super().__init__(kv_cache_spec, *args, **kwargs)
        self.attention_chunk_size = kv_cache_spec.attention_chunk_size

    def get_num_skipped_tokens(self, num_computed_tokens: int) -> int:
        return num_computed_tokens // self.attention_chunk_size * self.attention_chunk_size

    @classmethod
    def find_longest_cache_hit(cls, block_hashes, max_length, kv_cache_group_ids, block_pool, kv_cache_spec,
                               drop_eagle_block, alignment_tokens, dcp_world_size=1, pcp_world_size=1):
        assert isinstance(kv_cache_spec, ChunkedLocalAttentionSpec), \
            "ChunkedLocalAttentionManager can only be used for chunked local attention groups"
        assert not drop_eagle_block, "Hybrid KV cache is not supported for eagle + chunked local attention."
        bs = kv_cache_spec.block_size
        block_hashes = resolve_block_hashes(block_hashes, block_pool.hash_block_size, bs)
        chunk = kv_cache_spec.attention_chunk_size
        max_blocks = max_length // bs
        start_block = (max_length // chunk * chunk) // bs if max_length > 0 else 0
        null = block_pool.null_block
        computed = tuple([null] * start_block for _ in kv_cache_group_ids)
        for i in range(start_block, min(max_blocks, len(block_hashes))):
            cached = block_pool.get_cached_block(block_hashes[i], kv_cache_group_ids)
            if cached is None:
                break
            for lst, block in zip(computed, cached):
                lst.append(block)
        return computed, len(computed[0]) * bs

