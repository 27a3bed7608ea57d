"""`SlidingWindowManager`: sliding-window attention (window skipping, window-sized hits)."""

from __future__ import annotations

from reference_impl.kv_cache.kv_cache_interface import SlidingWindowSpec, cdiv
from reference_impl.kv_cache.kv_cache_utils import resolve_block_hashes
from reference_impl.kv_cache.single_type.base import SingleTypeKVCacheManager

__all__ = ["SlidingWindowManager"]


class SlidingWindowManager(SingleTypeKVCacheManager):
    """Sliding window: blocks wholly before `n - window + 1` are nulled and freed as the request advances."""

    def __init__(self, kv_cache_spec: SlidingWindowSpec, *args, **kwargs):
        super().__init__(kv_cache_spec, *args, **kwargs)
        self.sliding_window = kv_cache_spec.sliding_window
        self._skip_offset = kv_cache_spec.sliding_window - 1 + kv_cache_spec.extra_retained_tokens

    def get_num_skipped_tokens(self, num_computed_tokens: int) -> int:
        return max(0, num_computed_tokens - self._skip_offset)

    @classmethod
    def _contiguous_blocks_for_hit(cls, window_size: int, block_size: int, use_eagle: bool) -> int:
        """Cached blocks a hit needs right before its end: the window's reach, plus the block EAGLE drops."""
        return cdiv(window_size - 1, block_size) + (1 if use_eagle else 0)

    @classmethod
    def reachable_block_mask(cls, start_block, end_block, alignment_tokens, kv_cache_spec, use_eagle,
                             retention_interval=None, reachable_boundaries=(), dcp_world_size=1,
                             final_segment_end_block=None):
        """Keep only the window-sized tail before each boundary a hit can land on."""
        assert isinstance(kv_cache_spec, SlidingWindowSpec)
        if alignment_tokens is None:
            return None
        block_size = kv_cache_spec.block_size * dcp_world_size
        if alignment_tokens % block_size:
            # A block-granular mask cannot express a sub-block alignment: keep every block.
            return None
        need = cls._contiguous_blocks_for_hit(kv_cache_spec.sliding_window, block_size, use_eagle)
        # Under EAGLE the hit peeks one block past the boundary, so tails end one block later.
        shift = 1 if use_eagle else 0
        mask = [False] * (end_block - start_block)
        if retention_interval is None:
            segment_tokens = alignment_tokens
        else:
            segment_tokens = retention_interval or None
        if segment_tokens is not None:
            per_segment = segment_tokens // block_size
            if need >= per_segment:
                return None
            for i in range(start_block, end_block):
                if i >= shift and (i - shift) % per_segment >= per_segment - need:
                    mask[i - start_block] = True
            if final_segment_end_block is not None and not use_eagle:
                partial = final_segment_end_block % per_segment
                if partial:
                    tail_start = max(final_segment_end_block - partial, final_segment_end_block - need)
                    for i in range(max(start_block, tail_start), min(end_block, final_segment_end_block)):
                        mask[i - start_block] = True
        if retention_interval is not None:
            for boundary in reachable_boundaries:
                end = boundary // alignment_tokens * alignment_tokens // block_size + shift
                for j in range(max(start_block, end - need), min(end_block, end)):
                    mask[j - start_block] = True
        return mask

    @classmethod
    def find_longest_cache_hit(cls, block_hashes, max_length, kv_cache_group_ids, block_pool, kv_cache_spec,
                               drop_eagle_block, alignment_tokens, dcp_world_size=1, pcp_world_size=1):
        assert isinstance(kv_cache_spec, SlidingWindowSpec), \
            "SlidingWindowManager can only be used for sliding window groups"
        assert dcp_world_size == 1, "DCP not support sliding window attn now."
        assert pcp_world_size == 1, "PCP not support sliding window attn now."
        bs = kv_cache_spec.block_size
        block_hashes = resolve_block_hashes(block_hashes, block_pool.hash_block_size, bs)
        need = cdiv(kv_cache_spec.sliding_window - 1, bs) + (1 if drop_eagle_block else 0)
        max_blocks = min(max_length // bs, len(block_hashes))
        null = block_pool.null_block
        computed = tuple([null] * max_blocks for _ in kv_cache_group_ids)
        contiguous = 0
        match_found = False
        check_alignment = alignment_tokens != bs
        for i in range(max_blocks - 1, -1, -1):
            cached = block_pool.get_cached_block(block_hashes[i], kv_cache_group_ids)
            if cached is None:
                contiguous = 0
                continue
            # A run may only end on an aligned boundary (after EAGLE's drop, when it applies).
            if contiguous == 0 and check_alignment and (i if drop_eagle_block else i + 1) * bs % alignment_tokens:
                continue
            for lst, block in zip(computed, cached):
                lst[i] = block
            contiguous += 1
            if contiguous >= need:
                for lst in computed:
                    del lst[i + contiguous:]
                match_found = True
                break
        if not match_found:
            # No full run: a run starting at block 0 still counts (the window reaches before the prompt).
            keep = contiguous
            if check_alignment:
                keep = keep * bs // alignment_tokens * alignment_tokens // bs
            for lst in computed:
                del lst[keep:]
        if drop_eagle_block and computed[0]:
            keep = (len(computed[0]) - 1) * bs // alignment_tokens * alignment_tokens // bs
            for lst in computed:
                del lst[keep:]
        return computed, len(computed[0]) * bs

