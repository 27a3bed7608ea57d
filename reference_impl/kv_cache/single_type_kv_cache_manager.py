"""Single-type managers: one per KV cache group, each owning that group's block tables (vLLM 0.33's
`single_type_kv_cache_manager`, same class names and method signatures).

All managers share the coordinator's one `BlockPool`. A table is position-indexed (entry i covers tokens
[i*bs, (i+1)*bs)); entries that hold no useful KV are the null block. Tables only grow, except that entries
are replaced in place by the null block (window skipping, Mamba).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from reference_impl.kv_cache.block_pool import BlockPool, KVCacheBlock
from reference_impl.kv_cache.kv_cache_interface import (
    ChunkedLocalAttentionSpec,
    CircularBufferSpec,
    CrossAttentionSpec,
    FullAttentionSpec,
    KVCacheSpec,
    MambaSpec,
    MLAAttentionSpec,
    RSWASpec,
    ScratchSpec,
    SinkFullAttentionSpec,
    SlidingWindowMLASpec,
    SlidingWindowSpec,
    UniformTypeKVCacheSpecs,
    cdiv,
)
from reference_impl.kv_cache.kv_cache_utils import resolve_block_hashes, trim_null_head

__all__ = [
    "SingleTypeKVCacheManager",
    "FullAttentionManager",
    "RSWAManager",
    "SlidingWindowManager",
    "CircularBufferManager",
    "ChunkedLocalAttentionManager",
    "MambaManager",
    "spec_manager_map",
    "get_manager_for_kv_cache_spec",
    "register_all_kvcache_specs",
]


class SingleTypeKVCacheManager:
    """Block tables of one group: allocation, hit adoption, caching, window skipping and freeing."""

    #: Whether hits of this type are downward closed (any shorter aligned prefix of a hit is a hit).
    downward_closed = False

    #: Whether a hit of this type may end inside a block (on a hash boundary) when the coordinator
    #: aligns hits below the block size.
    supports_fine_grained_hash_lookup = False

    def __init__(self, kv_cache_spec: KVCacheSpec, block_pool: BlockPool, enable_caching: bool,
                 kv_cache_group_id: int, scheduler_block_size: int, dcp_world_size: int = 1,
                 pcp_world_size: int = 1, needs_kv_cache_zeroing: bool = False,
                 max_admission_blocks_per_request: int | None = None,
                 retention_interval: int | None = None):
        self.kv_cache_spec = kv_cache_spec
        # Decode context parallelism spreads an attention block's tokens over the ranks; a state (Mamba)
        # block is not sharded, so its span stays the spec's block size.
        sharded = getattr(kv_cache_spec, "dcp_sharded", False)
        self.dcp_world_size = dcp_world_size if sharded else 1
        self.pcp_world_size = pcp_world_size if sharded else 1
        self.block_size = kv_cache_spec.block_size * self.dcp_world_size
        self.block_pool = block_pool
        self.enable_caching = enable_caching
        self.kv_cache_group_id = kv_cache_group_id
        self.scheduler_block_size = scheduler_block_size
        self.cache_hit_alignment_tokens = scheduler_block_size
        self.max_admission_blocks_per_request = max_admission_blocks_per_request
        self.retention_interval = retention_interval
        # Whether this group's hits drop the EAGLE lookahead block (only sparse SWA masks read it).
        self.use_eagle = False
        self.req_to_blocks: defaultdict[str, list[KVCacheBlock]] = defaultdict(list)
        self.num_cached_block: dict[str, int] = {}
        self.new_block_ids: list[int] = []
        # Workers zero new attention blocks when the cache needs it (scratch rings excepted).
        self._record_new_block_ids = needs_kv_cache_zeroing and hasattr(kv_cache_spec, "num_kv_heads") \
            and not isinstance(kv_cache_spec, CircularBufferSpec)
        self._null_block = block_pool.null_block

    @property
    def records_new_block_ids(self) -> bool:
        """Whether this manager's new blocks are zeroed by the worker (so their ids are recorded)."""
        return self._record_new_block_ids

    @property
    def alignment_tokens(self) -> int:
        """Token granularity hits of this group land on (the scheduler block size by default)."""
        return self.cache_hit_alignment_tokens

    @alignment_tokens.setter
    def alignment_tokens(self, value: int) -> None:
        self.cache_hit_alignment_tokens = value

    # ------------------------------------------------------------------------------------------ skipping
    def get_num_skipped_tokens(self, num_computed_tokens: int) -> int:
        """Leading tokens whose KV is no longer needed once `num_computed_tokens` are computed."""
        return 0

    def remove_skipped_blocks(self, request_id: str, processed_computed_tokens: int,
                              num_prompt_tokens: int | None = None) -> None:
        """Replace wholly skipped blocks by the null block and free them, highest position first."""
        num_skipped = self.get_num_skipped_tokens(processed_computed_tokens)
        if num_skipped <= 0:
            return
        table = self.req_to_blocks.get(request_id)
        if not table:
            return
        last = min(num_skipped // self.block_size, len(table))
        if last <= 0:
            return
        # Most steps skip nothing new: the last skipped position was nulled by an earlier call and the base
        # range walk would stop right there, so save the call (not for a subclass whose walk goes on past
        # nulls, e.g. Mamba's gaps between states).
        if table[last - 1] is self._null_block \
                and type(self)._remove_blocks_in_range is SingleTypeKVCacheManager._remove_blocks_in_range:
            return
        self._remove_blocks_in_range(request_id, 0, last)

    def _remove_blocks_in_range(self, request_id: str, first_block: int, last_block: int) -> None:
        """Null and free the table's blocks in [first_block, last_block), stopping at a null (the earlier
        positions were freed by a previous call)."""
        table = self.req_to_blocks.get(request_id)
        if not table:
            return
        k = min(last_block, len(table))
        null = self._null_block
        removed = []
        for i in range(k - 1, first_block - 1, -1):
            block = table[i]
            if block is null:
                break  # earlier positions were freed by a previous call
            removed.append(block)
            table[i] = null
        if removed:
            self.block_pool.free_blocks(removed)

    # ------------------------------------------------------------------------------------------ counting
    def get_num_blocks_to_allocate(self, request_id: str, num_tokens: int,
                                   new_computed_blocks: Sequence[KVCacheBlock], total_computed_tokens: int,
                                   num_local_computed_tokens: int = 0, num_tokens_main_model: int | None = None,
                                   apply_admission_cap: bool = False, prefill_end: int = 0) -> int:
        """Free-queue blocks this allocation consumes: new blocks plus evictable hit blocks it touches.

        `num_tokens_main_model` (vLLM: the tokens without speculative lookahead) only matters to Mamba.
        """
        required = cdiv(num_tokens, self.block_size)
        if apply_admission_cap and self.max_admission_blocks_per_request is not None:
            required = min(required, self.max_admission_blocks_per_request)
        table = self.req_to_blocks.get(request_id)
        if table and not new_computed_blocks:
            return max(required - len(table), 0)
        have = len(table) if table else 0
        skipped = self.get_num_skipped_tokens(total_computed_tokens) // self.block_size
        num_new = max(required - max(skipped, len(new_computed_blocks) + have), 0)
        evictable = 0
        for block in new_computed_blocks[skipped:]:
            if block.ref_cnt == 0 and not block.is_null:
                evictable += 1
        return num_new + evictable

    # -------------------------------------------------------------------------------------- allocation
    def add_local_computed_blocks(self, request_id: str, new_computed_blocks: Sequence[KVCacheBlock],
                                  num_local_computed_tokens: int, num_external_computed_tokens: int = 0) -> None:
        """Adopt prefix hits for a new request: skipped positions become null, the rest are touched."""
        if self.req_to_blocks.get(request_id):
            raise ValueError(f"request {request_id!r} already has blocks in group {self.kv_cache_group_id}; "
                             "prefix hits can only be adopted by a new request")
        total_computed_tokens = num_local_computed_tokens + num_external_computed_tokens
        skipped = min(self.get_num_skipped_tokens(total_computed_tokens) // self.block_size,
                      len(new_computed_blocks))
        kept = new_computed_blocks[skipped:]
        self.block_pool.touch(kept)
        self.req_to_blocks[request_id] = [self._null_block] * skipped + list(kept)
        self.num_cached_block[request_id] = skipped + len(kept)

    def allocate_external_computed_blocks(self, request_id: str, num_local_computed_tokens: int,
                                          num_external_computed_tokens: int = 0,
                                          record_for_zeroing: bool = True) -> list[KVCacheBlock]:
        """Fresh blocks for connector-loaded tokens (skipped positions get the null block)."""
        total_computed_tokens = num_local_computed_tokens + num_external_computed_tokens
        table = self.req_to_blocks[request_id]
        target = cdiv(total_computed_tokens, self.block_size)
        if target <= len(table):
            return []
        skipped = self.get_num_skipped_tokens(total_computed_tokens) // self.block_size
        num_null = max(0, min(skipped, target) - len(table))
        table.extend([self._null_block] * num_null)
        new = self.block_pool.get_new_blocks(target - len(table))
        table.extend(new)
        if self._record_new_block_ids and record_for_zeroing:
            self.new_block_ids.extend(b.block_id for b in new)
        return new

    def allocate_new_blocks(self, request_id: str, num_tokens: int,
                            num_tokens_main_model: int | None = None) -> list[KVCacheBlock]:
        """Append blocks so the table covers `num_tokens`; returns the new ones."""
        table = self.req_to_blocks[request_id]
        n = cdiv(num_tokens, self.block_size) - len(table)
        if n <= 0:
            return []
        new = self.block_pool.get_new_blocks(n)
        table.extend(new)
        if self._record_new_block_ids:
            self.new_block_ids.extend(b.block_id for b in new)
        return new

    # ------------------------------------------------------------------------------------------ caching
    @classmethod
    def reachable_block_mask(cls, start_block: int, end_block: int, alignment_tokens: int | None,
                             kv_cache_spec: KVCacheSpec, use_eagle: bool, retention_interval: int | None = None,
                             reachable_boundaries: Sequence[int] = (), dcp_world_size: int = 1,
                             final_segment_end_block: int | None = None) -> list[bool] | None:
        """Which of the full blocks [start_block, end_block) can ever serve a hit, as a mask over that
        range (None: all of them). Dense types cache every block; windowed/state types override.

        `retention_interval`: None keeps a tail at every `alignment_tokens` boundary, 0 keeps only the
        `reachable_boundaries` (replay points, shared-prefix junctions), n > 0 one tail per n tokens.
        """
        return None

    def _reachable_boundaries(self, request, replay_boundaries: Sequence[int]) -> list[int]:
        """Token positions whose reachable tail sparse retention must keep: replay points and the
        request's shared-prefix junction (one block lower too under EAGLE, whose hit drops a block)."""
        boundaries = [*replay_boundaries]
        junction = getattr(request, "shared_prefix_boundary", 0) or 0
        if junction:
            boundaries.append(junction)
            if self.use_eagle:
                boundaries.append(junction - self.block_size)
        return boundaries

    def cache_blocks(self, request, num_tokens: int, retention_interval: int | None = None, *,
                     replay_boundaries: Sequence[int] = ()) -> None:
        """Register the request's newly full blocks (up to `num_tokens`) in the prefix cache."""
        request_id = request.request_id
        bs = self.block_size
        num_full = min(num_tokens, len(request.block_hashes) * self.block_pool.hash_block_size) // bs
        num_cached = self.num_cached_block.get(request_id, 0)
        if num_full <= num_cached:
            return
        table = self.req_to_blocks[request_id]
        mask = self.reachable_block_mask(
            start_block=num_cached, end_block=num_full, alignment_tokens=self.cache_hit_alignment_tokens,
            kv_cache_spec=self.kv_cache_spec, use_eagle=self.use_eagle,
            retention_interval=self.retention_interval if retention_interval is None else retention_interval,
            reachable_boundaries=self._reachable_boundaries(request, replay_boundaries),
            dcp_world_size=self.dcp_world_size)
        self.block_pool.cache_full_blocks(request, table, num_cached, num_full, bs, self.kv_cache_group_id, mask)
        self.num_cached_block[request_id] = num_full

    # ------------------------------------------------------------------------------------------ freeing
    def pop_blocks_for_free(self, request_id: str) -> list[KVCacheBlock]:
        """Detach the request's table without freeing it: its blocks in allocation order, leading nulls
        dropped. The caller frees them reversed (so the tail is evicted first)."""
        table = self.req_to_blocks.pop(request_id, None)
        self.num_cached_block.pop(request_id, None)
        return trim_null_head(table) if table else []

    def free(self, request_id: str) -> None:
        """Release the request's table, tail first; a request holding nothing is a no-op."""
        table = self.req_to_blocks.pop(request_id, None)
        self.num_cached_block.pop(request_id, None)
        if table:
            self.block_pool.free_blocks(reversed(table))

    def take_new_block_ids(self) -> list[int]:
        """Newly allocated block ids since the last call (for worker-side zeroing)."""
        ids, self.new_block_ids = self.new_block_ids, []
        return ids

    def new_step_starts(self) -> None:
        """Hook called at the start of every scheduling step."""

    # ------------------------------------------------------------------------------------------- lookup
    @classmethod
    def find_longest_cache_hit(cls, block_hashes: Sequence[bytes], max_length: int,
                               kv_cache_group_ids: Sequence[int], block_pool: BlockPool,
                               kv_cache_spec: KVCacheSpec, drop_eagle_block: bool, alignment_tokens: int,
                               dcp_world_size: int = 1,
                               pcp_world_size: int = 1) -> tuple[tuple[list[KVCacheBlock], ...], int]:
        """(hit blocks per group id, hit tokens) for the longest hit of at most `max_length` tokens.

        `block_hashes` are at the pool's hash block size (or already viewed at this spec's block size).
        With `drop_eagle_block` the hit is shortened by one block so EAGLE recomputes the last one.
        """
        raise NotImplementedError


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
        block_hashes = resolve_block_hashes(block_hashes, block_pool.hash_block_size, bs)
        max_blocks = min(max_length // bs, len(block_hashes))
        cache = block_pool.cached_block_hash_to_block._cache
        block_type = KVCacheBlock
        if len(kv_cache_group_ids) == 1:
            suffix = kv_cache_group_ids[0].to_bytes(4, "big")
            hits = []
            append = hits.append
            for i in range(max_blocks):
                entry = cache.get(block_hashes[i] + suffix)
                if entry is None:
                    break
                append(entry if type(entry) is block_type else next(iter(entry.values())))
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
        if drop_eagle_block and hit:
            hit -= min(alignment_tokens, bs)
        aligned = hit // alignment_tokens * alignment_tokens
        keep = cdiv(aligned, bs)
        if keep != len(computed[0]):
            for lst in computed:
                del lst[keep:]
        return computed, aligned


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


class MambaManager(SingleTypeKVCacheManager):
    """Mamba. In "align" mode a position-indexed table holds only the running state (and the previous
    one until the step after it has been consumed); a cached block is the state after exactly
    (i+1)*block_size tokens. Positions between states are null, so freeing skips over nulls."""

    supports_fine_grained_hash_lookup = True

    def __init__(self, kv_cache_spec: MambaSpec, block_pool: BlockPool, enable_caching: bool, *args, **kwargs):
        assert kv_cache_spec.mamba_cache_mode == "align" or not enable_caching, \
            "Mamba prefix caching requires mamba_cache_mode='align'"
        super().__init__(kv_cache_spec, block_pool, enable_caching, *args, **kwargs)
        #: Scratch state blocks kept past the running state for speculative decoding (MTP/EAGLE).
        self.num_speculative_blocks = kv_cache_spec.num_speculative_blocks
        self.mamba_cache_mode = kv_cache_spec.mamba_cache_mode
        self._align = self.mamba_cache_mode == "align"
        #: Prefix-cache keys registered this step: their state is written at the end of the step's forward
        #: pass, so a request hitting one is deferred to the next step.
        self.cached_blocks_this_step: set[bytes] = set()
        #: Index of the previous state block per request, freed once the next state has been computed.
        self.last_state_block_idx: dict[str, int] = {}
        self._num_retired_blocks: dict[str, int] = {}
        self._allocated_block_reqs: set[str] = set()

    def get_num_skipped_tokens(self, num_computed_tokens: int) -> int:
        return num_computed_tokens - 1

    @classmethod
    def reachable_block_mask(cls, start_block, end_block, alignment_tokens, kv_cache_spec, use_eagle,
                             retention_interval=None, reachable_boundaries=(), dcp_world_size=1,
                             final_segment_end_block=None):
        """Sparse state retention: a hit needs only the one state block ending on its boundary."""
        if retention_interval is None or alignment_tokens is None:
            return None  # dense: every state is cached
        assert isinstance(kv_cache_spec, MambaSpec)
        block_size = kv_cache_spec.block_size
        mask = [False] * (end_block - start_block)
        if retention_interval:
            per_segment = retention_interval // block_size
            if per_segment <= 1:
                return None
            first = (start_block + per_segment) // per_segment * per_segment - 1
            for i in range(first - start_block, len(mask), per_segment):
                mask[i] = True
        for boundary in reachable_boundaries:
            block = boundary // alignment_tokens * alignment_tokens // block_size - 1
            if start_block <= block < end_block:
                mask[block - start_block] = True
        return mask

    def _remove_blocks_in_range(self, request_id: str, first_block: int, last_block: int) -> None:
        if not self._align:
            return super()._remove_blocks_in_range(request_id, first_block, last_block)
        table = self.req_to_blocks.get(request_id)
        if not table:
            return
        first_block = max(first_block, self._num_retired_blocks.get(request_id, 0))
        last_block = min(last_block, len(table))
        if first_block >= last_block:
            return
        # Prefill leaves null gaps between states: keep going past them, up to the retired prefix.
        freed = []
        null = self._null_block
        for i in range(last_block - 1, first_block - 1, -1):
            block = table[i]
            if block.is_null:
                continue
            freed.append(block)
            table[i] = null
        if freed:
            self.block_pool.free_blocks(freed)
        self._num_retired_blocks[request_id] = last_block

    def remove_skipped_blocks(self, request_id: str, processed_computed_tokens: int,
                              num_prompt_tokens: int | None = None) -> None:
        super().remove_skipped_blocks(request_id, processed_computed_tokens, num_prompt_tokens)
        if self._align:
            idx = self.last_state_block_idx.get(request_id)
            if idx is not None and idx < cdiv(processed_computed_tokens, self.block_size) - 1:
                table = self.req_to_blocks[request_id]
                if idx < len(table) and not table[idx].is_null:
                    self.block_pool.free_blocks([table[idx]])
                    table[idx] = self._null_block

    def get_num_blocks_to_allocate(self, request_id, num_tokens, new_computed_blocks, total_computed_tokens,
                                   num_local_computed_tokens=0, num_tokens_main_model=None,
                                   apply_admission_cap=False, prefill_end=0):
        if new_computed_blocks and new_computed_blocks[-1].block_hash in self.cached_blocks_this_step:
            # The state is written at the end of this step's forward pass: defer the request.
            return self.block_pool.num_gpu_blocks + 1
        spec = self.num_speculative_blocks
        if not self._align:
            return super().get_num_blocks_to_allocate(
                request_id, num_tokens + spec * self.block_size, new_computed_blocks, total_computed_tokens,
                num_local_computed_tokens, num_tokens_main_model, apply_admission_cap, prefill_end)
        # Align mode ignores lookahead tokens (draft models have no Mamba layers): main-model tokens only.
        n = num_tokens if num_tokens_main_model is None else num_tokens_main_model
        table = self.req_to_blocks.get(request_id)
        num_new = cdiv(n, self.block_size) + spec - len(new_computed_blocks) - (len(table) if table else 0)
        if num_new > 0:
            # One state block per step, whatever the chunk spans; the speculative blocks come with the
            # first allocation and are moved along (not reallocated) afterwards.
            cap = 1 if request_id in self._allocated_block_reqs else 1 + spec
            num_new = min(num_new, cap)
        else:
            num_new = 0
        evictable = 0
        for block in new_computed_blocks:
            if block.ref_cnt == 0 and not block.is_null:
                evictable += 1
        return num_new + evictable

    def allocate_new_blocks(self, request_id: str, num_tokens: int,
                            num_tokens_main_model: int | None = None) -> list[KVCacheBlock]:
        spec = self.num_speculative_blocks
        if not self._align:
            return super().allocate_new_blocks(request_id, num_tokens + spec * self.block_size,
                                               num_tokens_main_model)
        n = num_tokens if num_tokens_main_model is None else num_tokens_main_model
        table = self.req_to_blocks[request_id]
        required = cdiv(n, self.block_size) + spec
        prev = len(table)
        if required <= prev:  # over-allocated last round (rejected drafts)
            self._allocated_block_reqs.add(request_id)
            return []
        allocated = request_id in self._allocated_block_reqs
        if allocated:
            # The running state sits just before the request's speculative blocks.
            self.last_state_block_idx[request_id] = prev - 1 - spec
        elif prev:
            self.last_state_block_idx[request_id] = prev - 1  # the prefix hit's state
        # Positions before the new running state hold nothing: pad with the null block. The pads are part
        # of the returned new entries, so a worker extending its table by them stays position-aligned.
        running = required - spec - 1
        if prev < running:
            table.extend([self._null_block] * (running - prev))
        if allocated:
            # Speculative blocks the step leaves behind move to the tail (their scratch content is dead).
            for i in range(prev - spec, min(prev, running)):
                self._relocate_speculative_block(table, i)
        new = self.block_pool.get_new_blocks(max(required - len(table), 0))
        returned = table[prev:] + new
        table.extend(new)
        self._allocated_block_reqs.add(request_id)
        return returned

    def _relocate_speculative_block(self, table: list[KVCacheBlock], block_idx: int) -> None:
        """Move the speculative block at `block_idx` to the table's tail, leaving the null block behind;
        only a block this request alone owns and that is not in the prefix cache may move."""
        block = table[block_idx]
        assert self.block_pool.is_block_writable(block), \
            f"Speculative Mamba blocks must be exclusively owned and unhashed before relocation " \
            f"(block {block.block_id})"
        table.append(block)
        table[block_idx] = self._null_block

    def _forget(self, request_id: str) -> None:
        self._allocated_block_reqs.discard(request_id)
        self.last_state_block_idx.pop(request_id, None)
        self._num_retired_blocks.pop(request_id, None)

    def pop_blocks_for_free(self, request_id: str) -> list[KVCacheBlock]:
        self._forget(request_id)
        return super().pop_blocks_for_free(request_id)

    def free(self, request_id: str) -> None:
        self._forget(request_id)
        super().free(request_id)

    def cache_blocks(self, request, num_tokens, retention_interval=None, *, replay_boundaries=()):
        before = self.num_cached_block.get(request.request_id, 0)
        super().cache_blocks(request, num_tokens, retention_interval, replay_boundaries=replay_boundaries)
        after = self.num_cached_block.get(request.request_id, 0)
        if after > before:
            table = self.req_to_blocks[request.request_id]
            for block in table[before:after]:
                if block._block_hash is not None:
                    self.cached_blocks_this_step.add(block._block_hash)

    def new_step_starts(self) -> None:
        self.cached_blocks_this_step.clear()

    @classmethod
    def find_longest_cache_hit(cls, block_hashes, max_length, kv_cache_group_ids, block_pool, kv_cache_spec,
                               drop_eagle_block, alignment_tokens, dcp_world_size=1, pcp_world_size=1):
        assert isinstance(kv_cache_spec, MambaSpec), "MambaManager can only be used for mamba groups"
        assert dcp_world_size == 1, "DCP not support mamba now."
        assert pcp_world_size == 1, "PCP not support mamba now."
        bs = kv_cache_spec.block_size
        hbs = block_pool.hash_block_size
        null = block_pool.null_block
        if alignment_tokens < bs and bs % alignment_tokens == 0 and alignment_tokens == hbs:
            # Fine-grained: a state may be cached at any hash boundary (a prompt's last one); the hit
            # ends at the latest cached boundary and the state's block sits at that boundary's position.
            scale = bs // hbs
            for fine in range(min(max_length // hbs, len(block_hashes)) - 1, -1, -1):
                cached = block_pool.get_cached_block(block_hashes[fine], kv_cache_group_ids)
                if cached is not None:
                    return tuple([null] * (fine // scale) + [block] for block in cached), (fine + 1) * hbs
            return tuple([] for _ in kv_cache_group_ids), 0
        block_hashes = resolve_block_hashes(block_hashes, hbs, bs)
        max_blocks = min(max_length // bs, len(block_hashes))
        check_alignment = alignment_tokens != bs
        for i in range(max_blocks - 1, -1, -1):
            if check_alignment and (i + 1) * bs % alignment_tokens:
                continue
            cached = block_pool.get_cached_block(block_hashes[i], kv_cache_group_ids)
            if cached is not None:
                return tuple([null] * i + [block] for block in cached), (i + 1) * bs
        return tuple([] for _ in kv_cache_group_ids), 0


class RSWAManager(FullAttentionManager):
    """Full attention whose reads stop `rswa_window` tokens back: hits are full-attention prefixes; the
    reference keeps every block (a superset of what vLLM keeps)."""


class CircularBufferManager(FullAttentionManager):
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

    def cache_blocks(self, request, num_tokens, retention_interval=None, *, replay_boundaries=()):
        return None

    @classmethod
    def find_longest_cache_hit(cls, block_hashes, max_length, kv_cache_group_ids, block_pool, kv_cache_spec,
                               drop_eagle_block, alignment_tokens, dcp_world_size=1, pcp_world_size=1):
        return tuple([] for _ in kv_cache_group_ids), 0


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
    CrossAttentionSpec: FullAttentionManager,
}


def register_all_kvcache_specs(vllm_config=None) -> dict[type, type[SingleTypeKVCacheManager]]:
    """The built-in spec -> manager registry (fixed in the reference; returned for inspection)."""
    return spec_manager_map


def get_manager_for_kv_cache_spec(kv_cache_spec: KVCacheSpec, **kwargs) -> SingleTypeKVCacheManager:
    """Instantiate the manager class registered for the spec's type (a same-type wrapper: its layers')."""
    spec_type = type(kv_cache_spec)
    if spec_type is UniformTypeKVCacheSpecs:
        spec_type = type(kv_cache_spec.first_spec)
    manager_cls = spec_manager_map.get(spec_type)
    if manager_cls is None:
        raise ValueError(f"kv_cache_spec: unsupported spec type {type(kv_cache_spec).__name__}; accepted: "
                         f"{', '.join(t.__name__ for t in spec_manager_map)}")
    return manager_cls(kv_cache_spec, **kwargs)
