"""`CrossAttentionManager`: encoder-decoder cross attention (one static table per request, never cached)."""

from __future__ import annotations

from reference_impl.kv_cache.kv_cache_interface import CrossAttentionSpec
from reference_impl.kv_cache.single_type.base import SingleTypeKVCacheManager

__all__ = ["CrossAttentionManager"]


class CrossAttentionManager(SingleTypeKVCacheManager):
    """Encoder-decoder cross attention: one static table per request, sized by its encoder input tokens
    (the coordinator passes those instead of the decoder's), never prefix-cached (encoder states are
    unique per request) and never loaded externally."""

    def add_local_computed_blocks(self, request_id, new_computed_blocks, num_local_computed_tokens,
                                  num_external_computed_tokens=0):
        """Nothing to adopt: cross-attention blocks are never shared between requests."""
        assert len(new_computed_blocks) == 0, "cross attention never has prefix-cache hits"

    def allocate_external_computed_blocks(self, request_id, num_local_computed_tokens,
                                          num_external_computed_tokens=0, record_for_zeroing=True):
        """Nothing: cross attention takes part in neither prefix caching nor external KV loads."""
        return None

    def cache_blocks(self, request, num_tokens, retention_interval=None, *, replay_boundaries=()):
        """Never called: an encoder-decoder model runs without prefix caching (as vLLM, a ValueError)."""
        raise ValueError("CrossAttentionManager.cache_blocks should not be called: prefix caching is disabled "
                         "for cross attention")

    @classmethod
    def find_longest_cache_hit(cls, block_hashes, max_length, kv_cache_group_ids, block_pool, kv_cache_spec,
                               drop_eagle_block, alignment_tokens, dcp_world_size=1, pcp_world_size=1):
        assert isinstance(kv_cache_spec, CrossAttentionSpec), \
            "CrossAttentionManager can only be used for cross-attention groups"
        raise NotImplementedError("CrossAttentionManager does not support caching")

