"""Full attention and the managers built on its tables: `FullAttentionManager` (contiguous prefix hits, partial
tail blocks), `RSWAManager` (a decode window after a full-attention prompt) and `CircularBufferManager`
(one scratch ring block per request)."""

from __future__ import annotations

from collections.abc import Sequence

from reference_impl.kv_cache.block_pool import KVCacheBlock
from reference_impl.kv_cache.kv_cache_interface import (
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    RSWASpec,
    ScratchSpec,
    cdiv,
)
from reference_impl.kv_cache.kv_cache_utils import BlockHashListWithBlockSize, resolve_block_hashes
from reference_impl.kv_cache.single_type.base import SingleTypeKVCacheManager, _NoPrefixCacheMixin

__all__ = ["FullAttentionManager", "RSWAManager", "CircularBufferManager"]


class FullAttentionManager(SingleTypeKVCacheManager):
    """Full attention: every position keeps its block; hits are contiguous prefixes."""

    downward_closed = True
    supports_fine_grained_hash_lookup = True

    @classmethod
    def find_longest_cache_hit(cls, block_hashes, max_length, kv_cache_group_ids, block_pool, kv_cache_spec,
                               drop_eagle_block, alignment_tokens, dcp_world_size=1, pcp_world_size=1):
        assert isinstance(kv_cache_spec, (FullAttentionSpec, ChunkedLocalAttentionSpec, ScratchSpec)), \
            "FullAttentionManager can only be used for full attention and chunked local attention groups"
        bs = kv_cache_spec.block_size * (dcp_world_size if dcp_world_size > 1 else 1)
        fine_hashes = block_hashes
        block_hashes = resolve_block_hashes(block_hashes, block_pool.hash_block_size, bs,
                                            supports_fine_grained_hash_lookup=True, alignment_tokens=alignment_tokens)
        fine = block_hashes is fine_hashes and alignment_tokens < bs
        if fine:
            # Partial hits: full blocks are looked up through a coarse view; the raw list at hash
            # granularity (== alignment_tokens) is kept for the boundaries inside the first missing block.
            block_hashes = BlockHashListWithBlockSize(fine_hashes, alignment_tokens, bs)
        max_blocks = min(max_length // bs, len(block_hashes))
        ids = block_pool.cached_block_hash_to_block._ids
        if len(kv_cache_group_ids) == 1:
            suffix = kv_cache_group_ids[0].to_bytes(4, "big")
            pool_blocks = block_pool.blocks
            hits = []
            append = hits.append
            for i in range(max_blocks):
                block_id = ids.get(block_hashes[i] + suffix)
                if block_id is None:
                    break
                append(pool_blocks[block_id])
            computed = (hits,)
        else:
            computed = tuple([] for _ in kv_cache_group_ids)
            for i in range(max_blocks):
                cached = block_pool.get_cached_block(block_hashes[i], kv_cache_group_ids)
                if cached is None:
                    break
                for lst, block in zip(computed, cached):
                    lst.append(block)
        hit = len(computed[0]) * bs
        if fine:
            # Extend into the first missing block: its latest cached interior boundary (partial entry).
            scale = bs // alignment_tokens
            first = len(computed[0]) * scale
            last = min(first + scale - 1, max_length // alignment_tokens, len(fine_hashes))
            for j in range(last - 1, first - 1, -1):
                cached = block_pool.get_cached_block(fine_hashes[j], kv_cache_group_ids)
                if cached is not None:
                    for lst, block in zip(computed, cached):
                        lst.append(block)
                    hit = (j + 1) * alignment_tokens
                    break
        if drop_eagle_block and hit:
            # One hash unit when fine-grained (the tail block still covers the shorter hit), else one block.
            hit -= min(alignment_tokens, bs)
        aligned = hit // alignment_tokens * alignment_tokens
        keep = cdiv(aligned, bs)
        if keep != len(computed[0]):
            for lst in computed:
                del lst[keep:]
        return computed, aligned

    def cache_blocks(self, request, num_tokens: int, retention_interval: int | None = None, *,
                     replay_boundaries: Sequence[int] = ()) -> None:
        if self.block_size == self.block_pool.hash_block_size:
            # No partial tails: only newly full blocks, if any (most decode steps complete none).
            if num_tokens // self.block_size > self.num_cached_block.get(request.request_id, 0):
                super().cache_blocks(request, num_tokens, retention_interval, replay_boundaries=replay_boundaries)
            return
        super().cache_blocks(request, num_tokens, retention_interval, replay_boundaries=replay_boundaries)
        if self.enable_caching:
            self._cache_partial_tail_block(request, num_tokens)

    def _cache_partial_tail_block(self, request, num_tokens: int) -> None:
        """Register the prompt's last hash boundary when it falls inside a block (a partial entry), so a
        later request sharing the prompt can hit up to it. Only that boundary: interior boundaries of
        the same block are not registered."""
        hbs = self.block_pool.hash_block_size
        # A resend hits at most `num_prompt_tokens - 1` tokens; an EAGLE lookup reads the whole prompt
        # before dropping a hash unit.
        limit = request.num_prompt_tokens if self.use_eagle else request.num_prompt_tokens - 1
        boundary = min(limit // hbs, len(request.block_hashes)) * hbs
        if boundary == 0 or boundary > num_tokens or boundary % self.block_size == 0:
            return
        table = self.req_to_blocks[request.request_id]
        block_idx = boundary // self.block_size
        if block_idx < len(table):
            self.block_pool.cache_partial_block(request, table[block_idx], boundary, self.kv_cache_group_id,
                                                self.block_size)


class RSWAManager(FullAttentionManager):
    """Full attention over the prompt plus a decode window of `rswa_window` tokens: hits are full-attention
    prefixes; decode blocks between the prompt's last block and the window are nulled and freed (the gap)."""

    def __init__(self, kv_cache_spec: RSWASpec, *args, **kwargs):
        super().__init__(kv_cache_spec, *args, **kwargs)
        self.rswa_window = kv_cache_spec.rswa_window

    def remove_skipped_blocks(self, request_id: str, processed_computed_tokens: int,
                              num_prompt_tokens: int | None = None) -> None:
        """Free the gap: blocks wholly in [prompt end rounded up to a block, window start), where the window
        starts `rswa_window` tokens before `processed_computed_tokens` but never inside the prompt. Without
        `num_prompt_tokens` nothing is freed (the gap is undefined)."""
        if num_prompt_tokens is None:
            return
        first_gap_block = cdiv(num_prompt_tokens, self.block_size)
        window_start = max(num_prompt_tokens, processed_computed_tokens - self.rswa_window)
        last_gap_block = window_start // self.block_size
        if first_gap_block < last_gap_block:
            self._remove_blocks_in_range(request_id, first_gap_block, last_gap_block)



class CircularBufferManager(_NoPrefixCacheMixin, FullAttentionManager):
    """Scratch attention memory never read back by later tokens: one ring block per request for its whole
    life; never cached, never hit, never skipped."""

    def _claim_ring_block(self, request_id: str) -> list[KVCacheBlock]:
        table = self.req_to_blocks[request_id]
        if table:
            return []
        new = self.block_pool.get_new_blocks(1)
        table.extend(new)
        return new

    def get_num_blocks_to_allocate(self, request_id, num_tokens, new_computed_blocks, total_computed_tokens,
                                   num_local_computed_tokens=0, num_tokens_main_model=None,
                                   apply_admission_cap=False, prefill_end=0):
        return 0 if self.req_to_blocks.get(request_id) else 1

    def allocate_new_blocks(self, request_id, num_tokens, num_tokens_main_model=None):
        return self._claim_ring_block(request_id)

    def allocate_external_computed_blocks(self, request_id, num_local_computed_tokens,
                                          num_external_computed_tokens=0, record_for_zeroing=True):
        return self._claim_ring_block(request_id)

    def add_local_computed_blocks(self, request_id, new_computed_blocks, num_local_computed_tokens,
                                  num_external_computed_tokens=0):
        return None

    def remove_skipped_blocks(self, request_id, processed_computed_tokens, num_prompt_tokens=None):
        return None

