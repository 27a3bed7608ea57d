"""Single-type managers: one per KV cache group, each owning that group's block tables.

All managers share the coordinator's one `BlockPool`. A table is position-indexed (entry i covers tokens
[i*bs, (i+1)*bs)); entries that hold no useful KV are the null block. Tables only grow, except that entries
are replaced in place by the null block (window skipping, Mamba).
"""

from __future__ import annotations

from collections.abc import Sequence

from reference_impl.kv_cache.block_pool import BlockPool, KVCacheBlock
from reference_impl.kv_cache.specs import (
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    KVCacheSpec,
    MambaSpec,
    ScratchSpec,
    SlidingWindowSpec,
    cdiv,
)

__all__ = [
    "SingleTypeKVCacheManager",
    "FullAttentionManager",
    "SlidingWindowManager",
    "ChunkedLocalAttentionManager",
    "MambaManager",
    "spec_manager_map",
    "get_manager_for_kv_cache_spec",
]


class SingleTypeKVCacheManager:
    """Block tables of one group: allocation, hit adoption, caching, window skipping and freeing."""

    #: Whether hits of this type are downward closed (any shorter aligned prefix of a hit is a hit).
    downward_closed = False

    def __init__(self, kv_cache_spec: KVCacheSpec, block_pool: BlockPool, enable_caching: bool,
                 kv_cache_group_id: int, scheduler_block_size: int, dcp_world_size: int = 1,
                 pcp_world_size: int = 1, needs_kv_cache_zeroing: bool = False,
                 max_admission_blocks_per_request: int | None = None,
                 retention_interval: int | None = None):
        self.kv_cache_spec = kv_cache_spec
        self.block_size = kv_cache_spec.block_size * dcp_world_size * pcp_world_size
        self.block_pool = block_pool
        self.enable_caching = enable_caching
        self.kv_cache_group_id = kv_cache_group_id
        self.alignment_tokens = scheduler_block_size
        self.max_admission_blocks_per_request = max_admission_blocks_per_request
        self.retention_interval = retention_interval
        self.req_to_blocks: dict[str, list[KVCacheBlock]] = {}
        self.num_cached_block: dict[str, int] = {}
        self._null_block = block_pool.null_block

    # ------------------------------------------------------------------------------------------ skipping
    def get_num_skipped_tokens(self, num_computed_tokens: int) -> int:
        """Leading tokens whose KV is no longer needed once `num_computed_tokens` are computed."""
        return 0

    def remove_skipped_blocks(self, request_id: str, num_computed_tokens: int) -> None:
        """Replace wholly skipped blocks by the null block and free them, highest position first."""
        num_skipped = self.get_num_skipped_tokens(num_computed_tokens)
        if num_skipped <= 0:
            return
        table = self.req_to_blocks.get(request_id)
        if not table:
            return
        k = min(num_skipped // self.block_size, len(table))
        null = self._null_block
        removed = []
        for i in range(k - 1, -1, -1):
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
                                   apply_admission_cap: bool = False) -> int:
        """Free-queue blocks this allocation consumes: new blocks plus evictable hit blocks it touches."""
        required = cdiv(num_tokens, self.block_size)
        if apply_admission_cap and self.max_admission_blocks_per_request is not None:
            required = min(required, self.max_admission_blocks_per_request)
        table = self.req_to_blocks.get(request_id)
        if table is not None and not new_computed_blocks:
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
                                  total_computed_tokens: int) -> None:
        """Adopt prefix hits for a new request: skipped positions become null, the rest are touched."""
        if request_id in self.req_to_blocks and self.req_to_blocks[request_id]:
            raise ValueError(f"request {request_id!r} already has blocks in group {self.kv_cache_group_id}; "
                             "prefix hits can only be adopted by a new request")
        skipped = min(self.get_num_skipped_tokens(total_computed_tokens) // self.block_size,
                      len(new_computed_blocks))
        kept = new_computed_blocks[skipped:]
        self.block_pool.touch(kept)
        self.req_to_blocks[request_id] = [self._null_block] * skipped + list(kept)
        self.num_cached_block[request_id] = skipped + len(kept)

    def allocate_external_computed_blocks(self, request_id: str, total_computed_tokens: int) -> list[KVCacheBlock]:
        """Fresh blocks for connector-loaded tokens (skipped positions get the null block)."""
        table = self.req_to_blocks.setdefault(request_id, [])
        target = cdiv(total_computed_tokens, self.block_size)
        if target <= len(table):
            return []
        skipped = self.get_num_skipped_tokens(total_computed_tokens) // self.block_size
        num_null = max(0, min(skipped, target) - len(table))
        table.extend([self._null_block] * num_null)
        new = self.block_pool.get_new_blocks(target - len(table))
        table.extend(new)
        return new

    def allocate_new_blocks(self, request_id: str, num_tokens: int) -> list[KVCacheBlock]:
        """Append blocks so the table covers `num_tokens`; returns the new ones."""
        table = self.req_to_blocks.get(request_id)
        if table is None:
            table = self.req_to_blocks[request_id] = []
        n = cdiv(num_tokens, self.block_size) - len(table)
        if n <= 0:
            return []
        new = self.block_pool.get_new_blocks(n)
        table.extend(new)
        return new

    # ------------------------------------------------------------------------------------------ caching
    def blocks_needed_for_hit(self) -> int:
        """Contiguous cached blocks a hit of this type needs at its end (0: all of them)."""
        return 0

    def reachable_block_mask(self, request, num_full_blocks: int,
                             replay_boundaries: Sequence[int]) -> list[bool] | None:
        """Which full blocks can ever serve a hit (None: all). Sparse for windowed/state types."""
        need = self.blocks_needed_for_hit()
        if need <= 0:
            return None
        rti = self.retention_interval
        segment = self.alignment_tokens if rti is None else rti
        bs = self.block_size
        if segment:
            per = segment // bs
            if need >= per:
                return None
            mask = [i % per >= per - need for i in range(num_full_blocks)]
        else:
            mask = [False] * num_full_blocks
        if rti is not None:
            align = self.alignment_tokens
            for boundary in (*replay_boundaries, getattr(request, "shared_prefix_boundary", 0) or 0):
                end = boundary // align * align // bs
                for j in range(max(0, end - need), min(end, num_full_blocks)):
                    mask[j] = True
        return mask

    def cache_blocks(self, request, num_tokens: int, replay_boundaries: Sequence[int] = ()) -> None:
        """Register the request's newly full blocks (up to `num_tokens`) in the prefix cache."""
        request_id = request.request_id
        bs = self.block_size
        num_full = min(num_tokens, len(request.block_hashes) * self.block_pool.hash_block_size) // bs
        num_cached = self.num_cached_block.get(request_id, 0)
        if num_full <= num_cached:
            return
        table = self.req_to_blocks[request_id]
        mask = self.reachable_block_mask(request, num_full, replay_boundaries)
        self.block_pool.cache_full_blocks(request, table, num_cached, num_full, bs, self.kv_cache_group_id, mask)
        self.num_cached_block[request_id] = num_full

    # ------------------------------------------------------------------------------------------ freeing
    def free(self, request_id: str) -> None:
        """Release the request's table, tail first (so its longest-prefix cached block is evicted first)."""
        table = self.req_to_blocks.pop(request_id, None)
        self.num_cached_block.pop(request_id, None)
        if table:
            self.block_pool.free_blocks(reversed(table))

    def new_step_starts(self) -> None:
        """Hook called at the start of every scheduling step."""

    # ------------------------------------------------------------------------------------------- lookup
    @classmethod
    def find_longest_cache_hit(cls, block_hashes: Sequence[bytes], max_length: int,
                               kv_cache_group_ids: Sequence[int], block_pool: BlockPool,
                               kv_cache_spec: KVCacheSpec, use_eagle: bool,
                               alignment_tokens: int) -> tuple[list[KVCacheBlock], ...]:
        """Hit blocks per group id for the longest hit of at most `max_length` tokens."""
        raise NotImplementedError


class FullAttentionManager(SingleTypeKVCacheManager):
    """Full attention: every position keeps its block; hits are contiguous prefixes."""

    downward_closed = True

    @classmethod
    def find_longest_cache_hit(cls, block_hashes, max_length, kv_cache_group_ids, block_pool, kv_cache_spec,
                               use_eagle, alignment_tokens):
        bs = kv_cache_spec.block_size
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
        if use_eagle and computed[0]:
            for lst in computed:
                lst.pop()
        hit = len(computed[0]) * bs
        aligned = hit // alignment_tokens * alignment_tokens
        if aligned != hit:
            keep = cdiv(aligned, bs)
            for lst in computed:
                del lst[keep:]
        return computed


class SlidingWindowManager(SingleTypeKVCacheManager):
    """Sliding window: blocks wholly before `n - window + 1` are nulled and freed as the request advances."""

    def __init__(self, kv_cache_spec: SlidingWindowSpec, *args, **kwargs):
        super().__init__(kv_cache_spec, *args, **kwargs)
        self.sliding_window = kv_cache_spec.sliding_window
        self._skip_offset = kv_cache_spec.sliding_window - 1 + kv_cache_spec.extra_retained_tokens

    def get_num_skipped_tokens(self, num_computed_tokens: int) -> int:
        return max(0, num_computed_tokens - self._skip_offset)

    def blocks_needed_for_hit(self) -> int:
        return cdiv(self.sliding_window - 1, self.block_size)

    @classmethod
    def find_longest_cache_hit(cls, block_hashes, max_length, kv_cache_group_ids, block_pool, kv_cache_spec,
                               use_eagle, alignment_tokens):
        bs = kv_cache_spec.block_size
        need = cdiv(kv_cache_spec.sliding_window - 1, bs) + (1 if use_eagle else 0)
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
            if contiguous == 0 and check_alignment and (i + 1) * bs % alignment_tokens:
                continue  # a run may only end on an aligned boundary
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
            for lst in computed:
                del lst[contiguous:]
        if use_eagle and computed[0]:
            for lst in computed:
                lst.pop()
            hit = len(computed[0]) * bs
            keep = hit // alignment_tokens * alignment_tokens // bs
            for lst in computed:
                del lst[keep:]
        return computed


class ChunkedLocalAttentionManager(SingleTypeKVCacheManager):
    """Chunked local attention: blocks of earlier chunks are nulled; hits before the chunk start are free."""

    def __init__(self, kv_cache_spec: ChunkedLocalAttentionSpec, *args, **kwargs):
        super().__init__(kv_cache_spec, *args, **kwargs)
        self.attention_chunk_size = kv_cache_spec.attention_chunk_size

    def get_num_skipped_tokens(self, num_computed_tokens: int) -> int:
        return num_computed_tokens // self.attention_chunk_size * self.attention_chunk_size

    @classmethod
    def find_longest_cache_hit(cls, block_hashes, max_length, kv_cache_group_ids, block_pool, kv_cache_spec,
                               use_eagle, alignment_tokens):
        if use_eagle:
            raise ValueError("chunked local attention does not support EAGLE (use_eagle=True)")
        bs = kv_cache_spec.block_size
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
        return computed


class MambaManager(SingleTypeKVCacheManager):
    """Mamba in "align" mode: a position-indexed table holding only the running state (and the previous
    one until it has been consumed); a cached block is the state after exactly (i+1)*block_size tokens."""

    def __init__(self, kv_cache_spec: MambaSpec, block_pool: BlockPool, enable_caching: bool, *args, **kwargs):
        if enable_caching and kv_cache_spec.mamba_cache_mode != "align":
            raise ValueError("Mamba prefix caching requires mamba_cache_mode='align'")
        if kv_cache_spec.num_speculative_blocks:
            raise ValueError("MambaSpec.num_speculative_blocks > 0 is not supported by the reference allocator")
        super().__init__(kv_cache_spec, block_pool, enable_caching, *args, **kwargs)
        self._cached_this_step: set[int] = set()

    def get_num_skipped_tokens(self, num_computed_tokens: int) -> int:
        return max(0, num_computed_tokens - 1)

    def blocks_needed_for_hit(self) -> int:
        return 1

    def get_num_blocks_to_allocate(self, request_id, num_tokens, new_computed_blocks, total_computed_tokens,
                                   apply_admission_cap=False):
        if new_computed_blocks and any(b.block_id in self._cached_this_step for b in new_computed_blocks):
            # The state is written at the end of this step's forward pass: defer the request.
            return self.block_pool.num_gpu_blocks + 1
        required = cdiv(num_tokens, self.block_size)
        table = self.req_to_blocks.get(request_id)
        have = (len(table) if table else 0) + len(new_computed_blocks)
        num_new = 1 if required > have else 0
        skipped = self.get_num_skipped_tokens(total_computed_tokens) // self.block_size
        evictable = sum(1 for b in new_computed_blocks[skipped:] if b.ref_cnt == 0 and not b.is_null)
        return num_new + evictable

    def allocate_new_blocks(self, request_id: str, num_tokens: int) -> list[KVCacheBlock]:
        table = self.req_to_blocks.get(request_id)
        if table is None:
            table = self.req_to_blocks[request_id] = []
        required = cdiv(num_tokens, self.block_size)
        if required <= len(table):
            return []
        # Positions before the new running state hold nothing: pad with the null block.
        table.extend([self._null_block] * (required - 1 - len(table)))
        new = self.block_pool.get_new_blocks(1)
        table.extend(new)
        return new

    def allocate_external_computed_blocks(self, request_id, total_computed_tokens):
        return super().allocate_external_computed_blocks(request_id, total_computed_tokens)

    def cache_blocks(self, request, num_tokens, replay_boundaries=()):
        before = self.num_cached_block.get(request.request_id, 0)
        super().cache_blocks(request, num_tokens, replay_boundaries)
        after = self.num_cached_block.get(request.request_id, 0)
        if after > before:
            table = self.req_to_blocks[request.request_id]
            for block in table[before:after]:
                if block._block_hash is not None:
                    self._cached_this_step.add(block.block_id)

    def new_step_starts(self) -> None:
        self._cached_this_step.clear()

    @classmethod
    def find_longest_cache_hit(cls, block_hashes, max_length, kv_cache_group_ids, block_pool, kv_cache_spec,
                               use_eagle, alignment_tokens):
        if use_eagle:
            raise ValueError("Mamba prefix caching in the reference allocator does not support EAGLE")
        bs = kv_cache_spec.block_size
        max_blocks = min(max_length // bs, len(block_hashes))
        null = block_pool.null_block
        for i in range(max_blocks - 1, -1, -1):
            if (i + 1) * bs % alignment_tokens:
                continue
            cached = block_pool.get_cached_block(block_hashes[i], kv_cache_group_ids)
            if cached is not None:
                return tuple([null] * i + [block] for block in cached)
        return tuple([] for _ in kv_cache_group_ids)


spec_manager_map: dict[type, type[SingleTypeKVCacheManager]] = {
    FullAttentionSpec: FullAttentionManager,
    SlidingWindowSpec: SlidingWindowManager,
    ChunkedLocalAttentionSpec: ChunkedLocalAttentionManager,
    MambaSpec: MambaManager,
    ScratchSpec: FullAttentionManager,  # never read back, so any table that covers the tokens will do
}


def get_manager_for_kv_cache_spec(kv_cache_spec: KVCacheSpec, **kwargs) -> SingleTypeKVCacheManager:
    """Instantiate the manager class registered for the spec's type."""
    manager_cls = spec_manager_map.get(type(kv_cache_spec))
    if manager_cls is None:
        raise ValueError(f"kv_cache_spec: unsupported spec type {type(kv_cache_spec).__name__}; accepted: "
                         f"{', '.join(t.__name__ for t in spec_manager_map)}")
    return manager_cls(kv_cache_spec, **kwargs)
