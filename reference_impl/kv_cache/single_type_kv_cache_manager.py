"""Single-type managers: one per KV cache group, each owning that group's block tables (vLLM 0.33's
`single_type_kv_cache_manager`, same class names and method signatures).

All managers share the coordinator's one `BlockPool`. A table is position-indexed (entry i covers tokens
[i*bs, (i+1)*bs)); entries that hold no useful KV are the null block. Tables only grow, except that entries
are replaced in place by the null block (window skipping, Mamba).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from reference_impl.kv_cache.kv_cache_spec_registry import KVCacheSpecRegistry
from reference_impl.kv_cache.block_pool import BlockPool, KVCacheBlock, SharedEventQueueBlockPool
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
    cdiv,
    get_mamba_prefill_checkpoint_position,
    is_mamba_prefill_checkpoint_valid,
)
from reference_impl.kv_cache.kv_cache_utils import (
    BlockHashListWithBlockSize,
    gc_untrack,
    resolve_block_hashes,
    trim_null_head,
    untracked_list,
)
from reference_impl.kv_cache.kv_events import MEDIUM_CPU
from reference_impl.kv_cache.release import RESERVES_IMPORT_PAGES, follows

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


class SingleTypeKVCacheManager:
    """Block tables of one group: allocation, hit adoption, caching, window skipping and freeing."""

    #: Whether hits of this type are downward closed (any shorter aligned prefix of a hit is a hit).
    downward_closed = False

    #: Whether a hit of this type may end inside a block (on a hash boundary) when the coordinator
    #: aligns hits below the block size.
    supports_fine_grained_hash_lookup = False

    #: Whether the group keeps its own longer hit instead of being trimmed to the common one.
    retains_longer_hit = False

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
        # Blocks hold no strong reference back to these lists or their owner (their pool is a weakref), so the
        # lists are hidden from the cyclic GC, which would otherwise visit every block of every request.
        self.req_to_blocks: defaultdict[str, list[KVCacheBlock]] = defaultdict(untracked_list)
        self.num_cached_block: dict[str, int] = {}
        # Workers zero new attention blocks when the cache needs it (scratch rings excepted). The blocks are
        # kept as the lists they were allocated in (one append per allocation, no per-block work); their
        # ids are read out when the scheduler drains them (`take_new_block_ids`), once per step.
        self._new_blocks_to_zero: list[Sequence[KVCacheBlock]] = []
        self._record_new_block_ids = needs_kv_cache_zeroing and hasattr(kv_cache_spec, "num_kv_heads") \
            and not isinstance(kv_cache_spec, CircularBufferSpec)
        self._null_block = block_pool.null_block
        # Copy-on-write copies queued for the worker: (source, destination) pairs, both endpoints holding a
        # reference until the scheduler releases them after the copy has run.
        self._pending_cow_copies: list[tuple[KVCacheBlock, KVCacheBlock]] = []
        # Boundary states a KV connector may offload: (request id, group id, block, exact token boundary).
        # Only Mamba "align" offers them: its table is not positional (interior states are nulled,
        # speculative blocks move), so a connector must be told which block holds which boundary.
        self._pending_boundary_state_offloads: list[tuple[str, int, KVCacheBlock, int]] = []
        # Partial hits (a hit ending inside a block): request -> (table index, shared source block) until
        # the request's next allocation redirects that position to a private copy-on-write block.
        self._partial_hit_reqs: dict[str, tuple[int, KVCacheBlock]] = {}

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
        if self._has_partial_local_hit(new_computed_blocks, num_local_computed_tokens):
            num_new += 1  # the private copy of the shared tail block
        return num_new + evictable

    def _has_partial_local_hit(self, new_computed_blocks: Sequence[KVCacheBlock],
                               num_local_computed_tokens: int) -> bool:
        """Whether the local hit ends inside one of this group's blocks (its tail block is then shared
        with the request that cached it and must be copied before this request writes into it)."""
        return bool(new_computed_blocks) and num_local_computed_tokens % self.block_size != 0

    # -------------------------------------------------------------------------------------- allocation
    def add_local_computed_blocks(self, request_id: str, new_computed_blocks: Sequence[KVCacheBlock],
                                  num_local_computed_tokens: int, num_external_computed_tokens: int = 0) -> None:
        """Adopt prefix hits for a new request: skipped positions become null, the rest are touched.

        Every skipped position is null even past the hit's blocks: a group that found no hit of its own
        (one that takes no part in prefix caching) still skips what the computed tokens leave behind."""
        if self.req_to_blocks.get(request_id):
            raise ValueError(f"request {request_id!r} already has blocks in group {self.kv_cache_group_id}; "
                             "prefix hits can only be adopted by a new request")
        total_computed_tokens = num_local_computed_tokens + num_external_computed_tokens
        skipped = self.get_num_skipped_tokens(total_computed_tokens) // self.block_size
        kept = new_computed_blocks[skipped:]
        self.block_pool.touch(kept)
        self.req_to_blocks[request_id] = gc_untrack([self._null_block] * skipped + list(kept))
        self.num_cached_block[request_id] = skipped + len(kept)
        if self._has_partial_local_hit(kept, num_local_computed_tokens):
            # The tail block is only partly valid for this request: copy it on the next allocation, and
            # count only the full blocks as cached so the copy gets registered once it fills up.
            block_idx = num_local_computed_tokens // self.block_size
            self._partial_hit_reqs[request_id] = (block_idx, kept[-1])
            self.num_cached_block[request_id] = block_idx

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
        if self._record_new_block_ids and record_for_zeroing and new:
            self._new_blocks_to_zero.append(new)
        return new

    def allocate_new_blocks(self, request_id: str, num_tokens: int,
                            num_tokens_main_model: int | None = None) -> list[KVCacheBlock]:
        """Append blocks so the table covers `num_tokens`; returns the new ones (a partial hit's private
        copy of its tail block first)."""
        cow = self._redirect_partial_hit(request_id) if self._partial_hit_reqs else []
        table = self.req_to_blocks[request_id]
        n = cdiv(num_tokens, self.block_size) - len(table)
        if n <= 0:
            return cow
        new = self.block_pool.get_new_blocks(n)
        table.extend(new)
        if self._record_new_block_ids:
            self._new_blocks_to_zero.append(new)
        return cow + new if cow else new

    def _redirect_partial_hit(self, request_id: str) -> list[KVCacheBlock]:
        """Replace a pending partial hit's shared tail block by a fresh private copy; [copy] or []."""
        partial = self._partial_hit_reqs.pop(request_id, None)
        if partial is None:
            return []
        cow = self.block_pool.get_new_blocks(1)[0]
        self._apply_cow(request_id, partial[0], partial[1], cow)
        if self._record_new_block_ids:
            self._new_blocks_to_zero.append((cow,))
        return [cow]

    def _apply_cow(self, request_id: str, block_idx: int, source_block: KVCacheBlock,
                   cow_block: KVCacheBlock) -> None:
        """Point table position `block_idx` at `cow_block` and queue the copy from `source_block`.

        Both ends stay referenced until the copy has run (the source keeps the hit's reference, the copy
        takes one more besides the table's), so a same-step free cannot recycle either.
        """
        table = self.req_to_blocks[request_id]
        assert block_idx < len(table) and table[block_idx] is source_block, \
            f"request {request_id!r}: position {block_idx} no longer holds the partially hit block"
        assert not source_block.is_null and source_block.ref_cnt > 0
        table[block_idx] = cow_block
        self._pending_cow_copies.append((source_block, cow_block))
        cow_block.ref_cnt += 1

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
        """Register the request's newly full blocks (up to `num_tokens`) in the prefix cache; nothing for a
        group that takes no part in prefix caching (scratch rings, bounded-replay windows)."""
        if not self.kv_cache_spec.prefix_cacheable:
            return
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
        self._partial_hit_reqs.pop(request_id, None)
        return trim_null_head(table) if table else []

    def free(self, request_id: str) -> None:
        """Release the request's table, tail first; a request holding nothing is a no-op."""
        table = self.req_to_blocks.pop(request_id, None)
        self.num_cached_block.pop(request_id, None)
        self._partial_hit_reqs.pop(request_id, None)
        if table:
            self.block_pool.free_blocks(reversed(table))

    def take_new_block_ids(self) -> list[int]:
        """Ids of the blocks to zero recorded since the last call (new blocks, and blocks re-recorded by
        `record_blocks_for_zeroing`), in recording order; empty unless the worker zeroes this group."""
        lists, self._new_blocks_to_zero = self._new_blocks_to_zero, []
        return [block.block_id for blocks in lists for block in blocks]

    def record_blocks_for_zeroing(self, request_id: str, start_token: int) -> None:
        """Record the request's blocks from `start_token` (block-aligned: a partly valid block must not be
        wiped) for zeroing again, e.g. blocks a failed KV load left unwritten; nothing for a group the
        worker does not zero."""
        if not self._record_new_block_ids:
            return
        if start_token % self.block_size:
            raise ValueError(f"record_blocks_for_zeroing: start_token {start_token} is not a multiple of group "
                             f"{self.kv_cache_group_id}'s block_size {self.block_size}")
        self._new_blocks_to_zero.append(self.req_to_blocks[request_id][start_token // self.block_size:])

    def new_step_starts(self) -> None:
        """Hook called at the start of every scheduling step."""

    # ------------------------------------------------------------------------------- connector hand-offs
    def take_pending_cow_copies(self) -> list[tuple[KVCacheBlock, KVCacheBlock]]:
        """Drain the queued (source, destination) copy-on-write pairs."""
        pending, self._pending_cow_copies = self._pending_cow_copies, []
        return pending

    def take_pending_boundary_state_offloads(self) -> list[tuple[str, int, KVCacheBlock, int]]:
        """Drain the queued (request id, group id, block, boundary tokens) offers. The request's table
        does not keep these blocks alive for long: a caller reading them later must take a reference."""
        pending, self._pending_boundary_state_offloads = self._pending_boundary_state_offloads, []
        return pending

    def finalize_partial_tail_offload(self, request_id: str, num_computed_tokens: int,
                                      num_in_flight_tokens: int) -> tuple[int, KVCacheBlock, int] | None:
        """(group id, block, boundary tokens) of a finished request's own partial-tail state, if it may
        still be offloaded; only Mamba "align" has such tails."""
        return None

    def _drop_pending_offloads(self, request_id: str) -> None:
        # An offer holds only until its blocks go back to the pool: a freed request's unclaimed offers
        # would let a connector read a block another request already owns.
        if self._pending_boundary_state_offloads:
            self._pending_boundary_state_offloads = [
                entry for entry in self._pending_boundary_state_offloads if entry[0] != request_id]

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
        #: Requests that cached their own last-prompt-boundary partial tail: (table block, boundary tokens).
        #: A finished request hands that block to the connector (finalize_partial_tail_offload); a running
        #: one's copy-on-write copy is offered instead.
        self._producer_partial_tail_reqs: dict[str, tuple[KVCacheBlock, int]] = {}
        #: Whether the worker can export a prefill checkpoint: the state at a hash boundary inside a chunk,
        #: written into an extra block just below the chunk's running state.
        self.has_prefill_checkpoint_blocks = self._align and kv_cache_spec.num_prefill_checkpoint_blocks > 0
        #: Whether checkpoints sit one hash block lower, at EAGLE's replay boundary (set by the coordinator).
        self.drop_eagle_checkpoint_block = False
        #: Whether a request's shared-prefix junction may also be registered as a partial entry.
        self.shared_prefix_checkpoint = False
        #: Prefill checkpoint of the current allocation per request: (token position, table index of the
        #: reserved block the worker exports the state at that position into).
        self._checkpoints: dict[str, tuple[int, int]] = {}

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
        if not self._align:
            return super().remove_skipped_blocks(request_id, processed_computed_tokens, num_prompt_tokens)
        # Most steps retire nothing new: the skipped prefix ends within the already retired blocks (what
        # `_remove_blocks_in_range` would find after clamping), so skip the call.
        table = self.req_to_blocks.get(request_id)
        if table:
            last = min((processed_computed_tokens - 1) // self.block_size, len(table))
            if last > self._num_retired_blocks.get(request_id, 0):
                self._remove_blocks_in_range(request_id, 0, last)
        idx = self.last_state_block_idx.get(request_id)
        if idx is not None and idx < cdiv(processed_computed_tokens, self.block_size) - 1:
            table = self.req_to_blocks[request_id]
            if idx < len(table) and not table[idx].is_null:
                self.block_pool.free_blocks([table[idx]])
                table[idx] = self._null_block

    # ------------------------------------------------------------------------------ prefill checkpoints
    def _checkpoint_position(self, num_tokens: int) -> int:
        """The hash boundary a prefill ending at `num_tokens` checkpoints its state at (0: none): the
        last hit boundary that leaves a token to recompute (or the hash lookahead), one hash block lower
        under EAGLE's replay drop. The worker derives the same position from the same inputs."""
        return get_mamba_prefill_checkpoint_position(
            num_tokens, self.cache_hit_alignment_tokens, self.drop_eagle_checkpoint_block,
            num_hash_lookahead_tokens=self.block_pool.num_hash_lookahead_tokens)

    def _needs_internal_checkpoint(self, request_id: str, query_start: int, query_end: int,
                                   checkpoint_position: int, prefill_end: int) -> bool:
        """Whether the chunk [query_start, query_end) gets a checkpoint block: the spec has checkpoint
        blocks, the chunk reaches `prefill_end` (0 under dense retention: every chunk), the worker can export
        the position in this chunk, and the checkpoint column holds nothing the request still needs (it is
        past the table, null, or one of the request's own speculative scratch blocks)."""
        if not self.has_prefill_checkpoint_blocks or query_end < prefill_end:
            return False
        if not is_mamba_prefill_checkpoint_valid(
                query_start=query_start, query_end=query_end, checkpoint_position=checkpoint_position,
                hash_block_size=self.block_pool.hash_block_size, mamba_block_size=self.block_size,
                checkpoint_alignment=self.kv_cache_spec.prefill_checkpoint_alignment):
            return False
        column = cdiv(query_end, self.block_size) - 2
        if column < 0:
            return False
        table = self.req_to_blocks.get(request_id) or ()
        return (column >= len(table) or table[column].is_null
                or (request_id in self._allocated_block_reqs
                    and column >= len(table) - self.num_speculative_blocks))

    def _plan_checkpoint(self, request_id: str, query_start: int, query_end: int, prefill_end: int,
                         record: bool) -> int:
        """1 if this allocation reserves a checkpoint block, else 0. With `record` (a real allocation, not
        the admission estimate) the checkpoint's position and column are kept for `allocate_new_blocks`
        and `cache_blocks`, or any earlier one dropped."""
        # A chunk below `prefill_end`, or of one token (a decode step: no position lies strictly inside
        # it), never checkpoints; skip computing the position then.
        if not self.has_prefill_checkpoint_blocks or query_end < prefill_end or query_end <= query_start + 1:
            position = 0
        else:
            position = self._checkpoint_position(query_end)
            if not self._needs_internal_checkpoint(request_id, query_start, query_end, position, prefill_end):
                position = 0
        if record:
            if position:
                self._checkpoints[request_id] = (position, cdiv(query_end, self.block_size) - 2)
            else:
                self._checkpoints.pop(request_id, None)
        return int(position > 0)

    def _cache_checkpoint_block(self, request, retention_interval: int | None) -> bytes | None:
        """Key the checkpoint block by the prefix hash at its checkpoint position, dropping whatever key
        it had (full-block caching may just have keyed that column at its block end, a state the column
        does not hold). A checkpoint that is neither the prompt's own, nor on a retained boundary, nor the
        shared-prefix junction is transient: its block loses every key. Returns the new key, if any."""
        position, column = self._checkpoints[request.request_id]
        block = self.req_to_blocks[request.request_id][column]
        is_prompt_checkpoint = position == self._checkpoint_position(request.num_prompt_tokens)
        is_retained = False
        if position % self.block_size == 0:
            block_idx = position // self.block_size - 1
            mask = self.reachable_block_mask(block_idx, block_idx + 1, self.cache_hit_alignment_tokens,
                                             self.kv_cache_spec, self.drop_eagle_checkpoint_block,
                                             retention_interval=retention_interval)
            is_retained = mask is None or mask[0]
        junction = getattr(request, "shared_prefix_boundary", 0)
        if not is_prompt_checkpoint and not is_retained and position != junction:
            self.block_pool._maybe_evict_cached_block(block)
            return None
        if block.block_hash_num_tokens == position:
            return None
        return self.block_pool.cache_partial_block(request=request, block=block, num_tokens=position,
                                                   kv_cache_group_id=self.kv_cache_group_id,
                                                   block_size=self.block_size, replace_existing_hashes=True)

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
        checkpoint_block = self._plan_checkpoint(request_id, total_computed_tokens, n, prefill_end,
                                                 record=not apply_admission_cap)
        # A partial hit (or a partial tail this request registered itself) needs one copy-on-write block.
        partial = int(bool(self._partial_hit_reqs) and request_id in self._partial_hit_reqs
                      or bool(new_computed_blocks)
                      and self._has_partial_local_hit(new_computed_blocks, num_local_computed_tokens))
        if partial:
            num_new = max(num_new, 0) + 1
        if num_new > 0:
            # One state block per step (plus the checkpoint's and a copy-on-write target), whatever the chunk
            # spans; the speculative blocks come with the first allocation and are moved along afterwards.
            cap = (1 if request_id in self._allocated_block_reqs else 1 + spec) + checkpoint_block + partial
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
        checkpoint_block = int(request_id in self._checkpoints)
        partial = self._partial_hit_reqs.pop(request_id, None) if self._partial_hit_reqs else None
        if required <= prev and not checkpoint_block and partial is None:  # over-allocated last round
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
        # A checkpoint step keeps the column just below the running state for the checkpoint's block.
        first_kept = running - checkpoint_block
        if prev < first_kept:
            table.extend([self._null_block] * (first_kept - prev))
        if allocated:
            # Speculative blocks the step leaves behind move to the tail (their scratch content is dead);
            # one already at the checkpoint column stays there and receives the checkpoint.
            for i in range(prev - spec, min(prev, first_kept)):
                self._relocate_speculative_block(table, i)
        new = self.block_pool.get_new_blocks(max(required - len(table), 0) + (partial is not None))
        returned = table[prev:]
        if partial is not None:
            cow, new = new[0], new[1:]
            if allocated:
                self._preserve_partial_tail(partial[1], cow)
                self._offer_producer_tail_copy(request_id, cow)
            else:
                self._apply_cow(request_id, partial[0], partial[1], cow)
                returned.insert(0, cow)
        returned += new
        table.extend(new)
        self._allocated_block_reqs.add(request_id)
        return returned

    def step_allocates_nothing(self, request_id: str, num_new_tokens: int, num_tokens_main_model: int) -> bool:
        """Whether an align-mode step of at most one new token without hits needs no block here (the
        table already covers the running state and speculative blocks, no copy-on-write is pending).
        If so, records the step as `get_num_blocks_to_allocate` + `allocate_new_blocks` would (no
        checkpoint: none lies inside a one-token chunk); otherwise changes nothing."""
        if not self._align or num_new_tokens > 1 or request_id not in self._allocated_block_reqs \
                or (self._partial_hit_reqs and request_id in self._partial_hit_reqs):
            return False
        table = self.req_to_blocks.get(request_id)
        if not table or len(table) < cdiv(num_tokens_main_model, self.block_size) + self.num_speculative_blocks:
            return False
        self._checkpoints.pop(request_id, None)
        return True

    def _preserve_partial_tail(self, source_block: KVCacheBlock, cow_block: KVCacheBlock) -> None:
        """A running request keeps writing its state into `source_block`, which a partial entry points at:
        move the entry to `cow_block` and queue the copy (the worker's table is append-only, so the
        request itself stays on `source_block`). Hits on the moved entry wait for the next step."""
        self.block_pool.move_block_hashes(source_block, cow_block)
        self._pending_cow_copies.append((source_block, cow_block))
        source_block.ref_cnt += 1  # held until the copy has run
        if cow_block.block_hash is not None:
            self.cached_blocks_this_step.add(cow_block.block_hash)

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
        self._checkpoints.pop(request_id, None)
        self.last_state_block_idx.pop(request_id, None)
        self._num_retired_blocks.pop(request_id, None)
        self._producer_partial_tail_reqs.pop(request_id, None)
        self._drop_pending_offloads(request_id)

    def pop_blocks_for_free(self, request_id: str) -> list[KVCacheBlock]:
        self._forget(request_id)
        return super().pop_blocks_for_free(request_id)

    def free(self, request_id: str) -> None:
        self._forget(request_id)
        super().free(request_id)

    def cache_blocks(self, request, num_tokens, retention_interval=None, *, replay_boundaries=()):
        before = self.num_cached_block.get(request.request_id, 0)
        if num_tokens // self.block_size <= before and (not self._align or (
                num_tokens > request.num_prompt_tokens and request.request_id not in self._checkpoints)):
            # A decode step that completes no state block: no full block, checkpoint or partial tail to key.
            return
        super().cache_blocks(request, num_tokens, retention_interval, replay_boundaries=replay_boundaries)
        # A checkpoint this step is re-keyed; without one, a step ending on a hash boundary within the
        # prompt may register the prompt's partial tail (cheap tests first: decode steps are not).
        if self._align and (request.request_id in self._checkpoints or (self.enable_caching and (
                num_tokens <= request.num_prompt_tokens and num_tokens % self.block_pool.hash_block_size == 0))):
            partial_key = self._cache_partial_tail_block(request, num_tokens, retention_interval=retention_interval)
            if partial_key is not None:
                self.cached_blocks_this_step.add(partial_key)
        after = self.num_cached_block.get(request.request_id, 0)
        if after > before:
            table = self.req_to_blocks[request.request_id]
            for block in table[before:after]:
                if block.block_hash is not None:
                    self.cached_blocks_this_step.add(block.block_hash)
                    if self._align:
                        # every retained boundary state is offered with its exact block and boundary; the
                        # connector filters by its own save window (which may pass the prompt on resume)
                        self._pending_boundary_state_offloads.append(
                            (request.request_id, self.kv_cache_group_id, block, block.block_hash_num_tokens))

    def new_step_starts(self) -> None:
        self.cached_blocks_this_step.clear()

    def finalize_partial_tail_offload(self, request_id: str, num_computed_tokens: int,
                                      num_in_flight_tokens: int) -> tuple[int, KVCacheBlock, int] | None:
        """The finished request's own partial-tail block, consumed once; only while nothing past its
        boundary was computed or is in flight (a later token would have overwritten the state)."""
        if not self._align:
            return None
        tail = self._producer_partial_tail_reqs.pop(request_id, None)
        if tail is None:
            return None
        block, boundary_tokens = tail
        if num_in_flight_tokens != 0 or num_computed_tokens != boundary_tokens:
            return None
        return self.kv_cache_group_id, block, boundary_tokens

    def _offer_producer_tail_copy(self, request_id: str, cow_block: KVCacheBlock) -> None:
        """After a running producer's partial tail was copied into `cow_block`, offer that durable copy
        (the table block is overwritten by the next forward pass)."""
        tail = self._producer_partial_tail_reqs.pop(request_id, None)
        if tail is not None:
            self._pending_boundary_state_offloads.append(
                (request_id, self.kv_cache_group_id, cow_block, tail[1]))

    def _cache_partial_tail_block(self, request, num_tokens: int,
                                  retention_interval: int | None = None) -> bytes | None:
        """Register the state at the prompt's last reusable hash boundary (or, with shared-prefix
        checkpoints, at the request's junction) when this step's computation ends exactly there; the key,
        or None. A request with a prefill checkpoint this step has its checkpoint block re-keyed instead
        (`_cache_checkpoint_block`, under `retention_interval`, else the manager's), as in vLLM.

        The boundary usually falls inside the running state block, which the next step overwrites: the
        request is then recorded as owning a partial tail, and its next allocation moves the entry to a
        private copy (see `_preserve_partial_tail`).
        """
        if request.request_id in self._checkpoints:
            return self._cache_checkpoint_block(
                request, self.retention_interval if retention_interval is None else retention_interval)
        hbs = self.block_pool.hash_block_size
        if num_tokens <= 0 or num_tokens % hbs:
            return None
        boundary = get_mamba_prefill_checkpoint_position(request.num_prompt_tokens, hbs,
                                                         self.drop_eagle_checkpoint_block,
                                                         self.block_pool.num_hash_lookahead_tokens)
        junction = getattr(request, "shared_prefix_boundary", 0) or 0
        if num_tokens != boundary and not (
                self.shared_prefix_checkpoint and num_tokens == junction
                and request.num_computed_tokens < num_tokens <= request.num_prompt_tokens):
            return None
        block_idx = cdiv(num_tokens, self.block_size) - 1
        table = self.req_to_blocks[request.request_id]
        if block_idx >= len(table) or table[block_idx].is_null:
            return None
        source = table[block_idx]
        if source.block_hash_num_tokens == num_tokens:
            return None  # already keyed here (a hit or an earlier step): re-keying would defer siblings
        key = self.block_pool.cache_partial_block(request, source, num_tokens, self.kv_cache_group_id,
                                                  self.block_size)
        if key is not None and num_tokens % self.block_size:
            self._partial_hit_reqs[request.request_id] = (block_idx, source)
            self.num_cached_block[request.request_id] = block_idx
            # A finished producer hands this block to its connector; a running one offers the copy.
            self._producer_partial_tail_reqs[request.request_id] = (source, num_tokens)
        return key

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


class _NoPrefixCacheMixin:
    """Groups whose blocks are never registered in, nor found in, the prefix cache."""

    def cache_blocks(self, request, num_tokens, retention_interval=None, *, replay_boundaries=()):
        return None

    @classmethod
    def find_longest_cache_hit(cls, block_hashes, max_length, kv_cache_group_ids, block_pool, kv_cache_spec,
                               drop_eagle_block, alignment_tokens, dcp_world_size=1, pcp_world_size=1):
        return tuple([] for _ in kv_cache_group_ids), 0


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


# ---------------------------------------------------------------------------------------------- HiSparse
# HiSparse keeps a sparse-MLA model's source KV in a host pool (the "source" group, role HISPARSE_SOURCE)
# and on the device only: an indexer group (ordinary full attention), resident copies of recent source
# pages (HiSparseResidentSpec) and a per-request hot region (HiSparseHotSpec). vLLM's HiSparseCoordinator
# (outside v1/core; the reference's is `hisparse_coordinator`) drives spills, residency changes and host
# publication; it binds itself to these managers through their `coordinator` attribute. With none bound,
# a source page counts as durable once computed, so it is published at once.


class HiSparseSourceManager(FullAttentionManager):
    """The host-tier group: full-attention tables over a private host pool (`bind_host_pool`).

    Host blocks never count against the device pool; an allocation the host pool cannot back is refused
    with the same sentinel Mamba uses (more blocks than the device pool has), so every page computed on
    the device has a host block to be written back to.
    """

    coordinator = None
    # The host tier keeps prefixes the device groups have already lost.
    retains_longer_hit = True

    def __init__(self, kv_cache_spec: KVCacheSpec, *args, **kwargs):
        super().__init__(kv_cache_spec, *args, **kwargs)
        self.device_pool: BlockPool = self.block_pool
        self._pending_cow_copies: list = []
        self._record_new_block_ids = False  # host blocks are never zeroed by the device worker
        # vLLM 0.34 reserves the host pages an admitted import has yet to allocate (`get_num_blocks_to_allocate`);
        # 0.33 admitted an import when its own prompt's pages fit, whatever earlier imports still needed.
        self._reserves_import_pages = follows(RESERVES_IMPORT_PAGES)

    def bind_host_pool(self, num_blocks: int) -> None:
        """Give the group its own pool of `num_blocks` host blocks (block 0: the host pool's null block)."""
        device_pool = self.device_pool
        self.block_pool = SharedEventQueueBlockPool(
            num_blocks, self.enable_caching and self.kv_cache_spec.prefix_cacheable, device_pool.hash_block_size,
            device_pool.enable_kv_cache_events, medium=MEDIUM_CPU, event_owner=device_pool)
        self._null_block = self.block_pool.null_block

    @property
    def host_pool_bound(self) -> bool:
        """Whether the group allocates from a host pool of its own."""
        return self.block_pool is not self.device_pool

    def take_pending_cow_copies(self) -> list:
        """Host copies never go through the device worker's block-copy path."""
        return []

    def take_host_cow_copies(self) -> list:
        """Drain the host copies (for whoever moves host data)."""
        copies, self._pending_cow_copies = self._pending_cow_copies, []
        return copies

    def get_num_blocks_to_allocate(self, request_id, num_tokens, new_computed_blocks, total_computed_tokens,
                                   num_local_computed_tokens=0, num_tokens_main_model=None,
                                   apply_admission_cap=False, prefill_end=0):
        available = self.block_pool.get_num_free_blocks()
        if apply_admission_cap and total_computed_tokens > num_local_computed_tokens \
                and self.coordinator is not None and self._reserves_import_pages:
            # Admitting an external import: a waiting import keeps its host pages and is never preempted,
            # so two imports that together need more pages than are left would both wait forever. Its whole
            # sequence (with the spec-decode step it runs on resume) must fit beside the pages earlier
            # imports have yet to allocate; the coordinator keeps that size if the admission goes ahead.
            num_tokens += self.coordinator.import_step_tokens
            available -= self.coordinator.reserved_import_pages
            self.coordinator.size_import(request_id, cdiv(num_tokens, self.block_size))
        required = super().get_num_blocks_to_allocate(request_id, num_tokens, new_computed_blocks,
                                                      total_computed_tokens, num_local_computed_tokens,
                                                      num_tokens_main_model)
        if not self.host_pool_bound:
            return required
        if required > available:
            return self.device_pool.num_gpu_blocks + 1
        return 0

    def allocate_external_computed_blocks(self, request_id, num_local_computed_tokens,
                                          num_external_computed_tokens=0, record_for_zeroing=True):
        # The connector is still writing these host pages: they become readable (and publishable) when
        # the load succeeds, which the coordinator learns from `finish_host_import`, not from here.
        if num_external_computed_tokens > 0 and self.coordinator is not None:
            self.coordinator.record_pending_host_import(
                request_id, num_local_computed_tokens + num_external_computed_tokens)
        result = super().allocate_external_computed_blocks(request_id, num_local_computed_tokens,
                                                           num_external_computed_tokens, record_for_zeroing)
        if num_external_computed_tokens > 0 and self.coordinator is not None and self._reserves_import_pages:
            self.coordinator.update_import_reservation(request_id, len(self.req_to_blocks[request_id]))
        return result

    def allocate_new_blocks(self, request_id, num_tokens, num_tokens_main_model=None):
        new_blocks = super().allocate_new_blocks(request_id, num_tokens, num_tokens_main_model)
        if new_blocks and self.coordinator is not None and self._reserves_import_pages:
            # Pages an admitted import now holds are no longer reserved for it.
            self.coordinator.update_import_reservation(request_id, len(self.req_to_blocks[request_id]))
        return new_blocks

    def cache_blocks(self, request, num_tokens, retention_interval=None, *, replay_boundaries=()):
        if self.coordinator is not None:
            self.coordinator.publish_when_ready(request, num_tokens, retention_interval,
                                                replay_boundaries=replay_boundaries)
            return
        self.publish_blocks(request, num_tokens, retention_interval, replay_boundaries=replay_boundaries)

    def publish_blocks(self, request, num_tokens, retention_interval=None, *, replay_boundaries=()):
        """Register the request's full host pages in the host pool's prefix cache."""
        super().cache_blocks(request, num_tokens, retention_interval, replay_boundaries=replay_boundaries)

    def pop_blocks_for_free(self, request_id: str) -> list[KVCacheBlock]:
        # The coordinator detaches the request first: a finished request's in-flight write-backs take their
        # own references on the host blocks they still need. The caller's `free_blocks` returns host blocks
        # to the host pool (a block is freed into the pool it belongs to).
        if self.coordinator is not None:
            self.coordinator.free(request_id)
        return super().pop_blocks_for_free(request_id)

    def free(self, request_id: str) -> None:
        if self.coordinator is not None:
            self.coordinator.free(request_id)
        super().free(request_id)


class _HiSparseAuxiliaryManager(_NoPrefixCacheMixin, SingleTypeKVCacheManager):
    """Device groups derived from the host source: never cached, never hit (the source owns caching)."""

    coordinator = None

    def _grow_to(self, request_id: str, num_blocks: int) -> list[KVCacheBlock]:
        """Append fresh blocks until the request's table has `num_blocks`; returns the new ones."""
        table = self.req_to_blocks[request_id]
        n = num_blocks - len(table)
        if n <= 0:
            return []
        new = self.block_pool.get_new_blocks(n)
        table.extend(new)
        return new


class HiSparseHotManager(_HiSparseAuxiliaryManager):
    """The hot region: `blocks_per_request` blocks, allocated only once the request needs to read history
    from the host (an external import, a resumed host prefix, or `require_hot`), then kept until free."""

    def __init__(self, kv_cache_spec: HiSparseHotSpec, *args, **kwargs):
        super().__init__(kv_cache_spec, *args, **kwargs)
        self.blocks_per_request = kv_cache_spec.blocks_per_request
        self.hot_required: set[str] = set()

    def require_hot(self, request_id: str) -> None:
        """Mark the request as reading from the host: its next allocation takes the hot region."""
        self.hot_required.add(request_id)

    def has_hot(self, request_id: str) -> bool:
        """Whether the request holds its whole hot region."""
        return len(self.req_to_blocks.get(request_id, ())) == self.blocks_per_request

    def get_num_required_blocks(self, request_id: str) -> int:
        """Blocks still missing from the request's hot region."""
        return max(self.blocks_per_request - len(self.req_to_blocks.get(request_id, ())), 0)

    def get_num_blocks_to_allocate(self, request_id, num_tokens, new_computed_blocks, total_computed_tokens,
                                   num_local_computed_tokens=0, num_tokens_main_model=None,
                                   apply_admission_cap=False, prefill_end=0):
        assert not new_computed_blocks, "HiSparse hot groups never take prefix hits"
        # A running request keeps the answer it got at admission; a new one needs the region when it
        # imports external tokens or resumes a host prefix.
        host_import = total_computed_tokens > num_local_computed_tokens
        resumes_host_prefix = num_local_computed_tokens > 0 and request_id not in self.num_cached_block
        if host_import or resumes_host_prefix or request_id in self.hot_required:
            return self.get_num_required_blocks(request_id)
        return 0

    def add_local_computed_blocks(self, request_id, new_computed_blocks, num_local_computed_tokens,
                                  num_external_computed_tokens=0):
        assert not new_computed_blocks, "HiSparse hot groups never take prefix hits"
        self.num_cached_block[request_id] = 0
        no_resident_groups = self.coordinator is not None and not self.coordinator.resident_managers
        if num_local_computed_tokens > 0 or no_resident_groups:
            self.require_hot(request_id)

    def allocate_external_computed_blocks(self, request_id, num_local_computed_tokens,
                                          num_external_computed_tokens=0, record_for_zeroing=True):
        self.require_hot(request_id)
        return []

    def allocate_new_blocks(self, request_id, num_tokens, num_tokens_main_model=None):
        # A cold admission may bypass add_local_computed_blocks: mark the request as admitted here too.
        self.num_cached_block[request_id] = 0
        if request_id not in self.hot_required:
            return []
        return self._grow_to(request_id, self.blocks_per_request)

    def pop_blocks_for_free(self, request_id: str) -> list[KVCacheBlock]:
        self.hot_required.discard(request_id)
        return super().pop_blocks_for_free(request_id)

    def free(self, request_id: str) -> None:
        self.hot_required.discard(request_id)
        super().free(request_id)


class HiSparseResidentManager(_HiSparseAuxiliaryManager):
    """Device-resident copies of source pages, position-indexed like a full-attention table; a page that
    lives only on the host is the null block. Residency changes after allocation (adopting a surviving
    device copy, dropping a page) are kept apart from the append-only table (`residency_changes`)."""

    def __init__(self, kv_cache_spec: HiSparseResidentSpec, *args, **kwargs):
        super().__init__(kv_cache_spec, *args, **kwargs)
        self.residency_changes: dict[str, dict[int, KVCacheBlock]] = {}

    def get_num_blocks_to_allocate(self, request_id, num_tokens, new_computed_blocks, total_computed_tokens,
                                   num_local_computed_tokens=0, num_tokens_main_model=None,
                                   apply_admission_cap=False, prefill_end=0):
        assert not new_computed_blocks, "HiSparse resident groups never take prefix hits"
        existing = len(self.req_to_blocks.get(request_id, ()))
        if total_computed_tokens > num_local_computed_tokens:
            # Imported pages stay on the host except the last, which must stay writable (it is replayed
            # on a full prompt hit).
            imported_pages = cdiv(total_computed_tokens, self.block_size)
            needs_tail = self.get_resident_page(request_id, imported_pages - 1) is None
            return int(needs_tail) + max(cdiv(num_tokens, self.block_size) - max(imported_pages, existing), 0)
        host_pages = cdiv(num_local_computed_tokens, self.block_size)
        required = cdiv(num_tokens, self.block_size)
        if apply_admission_cap and self.max_admission_blocks_per_request is not None:
            required = min(required, self.max_admission_blocks_per_request)
        return max(required - max(existing, host_pages), 0)

    def allocate_external_computed_blocks(self, request_id, num_local_computed_tokens,
                                          num_external_computed_tokens=0, record_for_zeroing=True):
        """Reserve the writable last page of an import; the earlier imported pages stay on the host."""
        if num_external_computed_tokens <= 0:
            raise ValueError(f"num_external_computed_tokens must be > 0 for an import, "
                             f"got {num_external_computed_tokens!r}")
        table = self.req_to_blocks[request_id]
        tail_page = (num_local_computed_tokens + num_external_computed_tokens - 1) // self.block_size
        if len(table) <= tail_page:
            table.extend([self._null_block] * (tail_page + 1 - len(table)))
        if self.get_resident_page(request_id, tail_page) is not None:
            return []
        table[tail_page] = self.block_pool.get_new_blocks(1)[0]
        return [table[tail_page]]

    def add_local_computed_blocks(self, request_id, new_computed_blocks, num_local_computed_tokens,
                                  num_external_computed_tokens=0):
        assert not new_computed_blocks, "HiSparse resident groups never take prefix hits"
        if self.req_to_blocks.get(request_id):
            raise ValueError(f"request {request_id!r} already has blocks in group {self.kv_cache_group_id}; "
                             "prefix hits can only be adopted by a new request")
        num_host_pages = cdiv(num_local_computed_tokens, self.block_size)
        self.req_to_blocks[request_id] = gc_untrack([self._null_block] * num_host_pages)
        self.num_cached_block[request_id] = 0
        if self.coordinator is not None:
            self.coordinator.commit_computed_blocks(request_id, num_host_pages)

    def allocate_new_blocks(self, request_id, num_tokens, num_tokens_main_model=None):
        return self._grow_to(request_id, cdiv(num_tokens, self.block_size))

    def pop_blocks_for_free(self, request_id: str) -> list[KVCacheBlock]:
        if self.coordinator is not None:
            self.coordinator.free(request_id)
        row = self.get_residency_row(request_id)
        self.residency_changes.pop(request_id, None)
        super().pop_blocks_for_free(request_id)
        return trim_null_head(row)

    def free(self, request_id: str) -> None:
        row = self.pop_blocks_for_free(request_id)
        if row:
            self.block_pool.free_blocks(reversed(row))

    def adopt_resident_page(self, request_id: str, block_idx: int, block: KVCacheBlock) -> bool:
        """Point a host-only page at a device copy of its content; False when the page is out of the
        table or already resident."""
        table = self.req_to_blocks.get(request_id)
        if table is None or block_idx >= len(table) or self.get_resident_page(request_id, block_idx) is not None:
            return False
        self.residency_changes.setdefault(request_id, {})[block_idx] = block
        return True

    def drop_resident_page(self, request_id: str, block_idx: int) -> KVCacheBlock | None:
        """Stop reading a page from the device; returns the block it was read from (None if host-only)."""
        block = self.get_resident_page(request_id, block_idx)
        if block is not None:
            self.residency_changes.setdefault(request_id, {})[block_idx] = self._null_block
        return block

    def get_resident_page(self, request_id: str, block_idx: int) -> KVCacheBlock | None:
        """The device block page `block_idx` is read from, residency changes applied; None if host-only."""
        table = self.req_to_blocks.get(request_id)
        if table is None or block_idx >= len(table):
            return None
        block = table[block_idx]
        changes = self.residency_changes.get(request_id)
        if changes:
            block = changes.get(block_idx, block)
        return None if block.is_null else block

    def get_residency_row(self, request_id: str, start: int = 0) -> list[KVCacheBlock]:
        """The request's pages from `start` with residency changes applied (host-only pages: null)."""
        table = self.req_to_blocks.get(request_id, [])[start:]
        changes = self.residency_changes.get(request_id)
        if not changes:
            return table
        return [changes.get(i, block) for i, block in enumerate(table, start)]


def bind_hisparse_host_pool(kv_cache_config, managers: Sequence[SingleTypeKVCacheManager]) -> None:
    """Give the HiSparse source group (if any) its host pool of `hisparse_host_num_blocks`, after checking
    the layout vLLM's HiSparse coordinator requires (ValueError otherwise, with vLLM's wording)."""
    sources = [i for i, m in enumerate(managers) if isinstance(m, HiSparseSourceManager)]
    if not sources:
        return
    if len(sources) > 1:
        raise ValueError(f"Only one HiSparse host group is supported; groups {sources} have role "
                         f"{KVCacheGroupRole.HISPARSE_SOURCE.value!r}")
    host_id = sources[0]
    num_host_blocks = kv_cache_config.hisparse_host_num_blocks
    if num_host_blocks is None:
        raise ValueError(f"HiSparse host group needs host capacity: group {host_id} has role "
                         f"{KVCacheGroupRole.HISPARSE_SOURCE.value!r} but KVCacheConfig.hisparse_host_num_blocks "
                         "is None; accepted: an integer >= 1")
    resident = [i for i, m in enumerate(managers) if isinstance(m, HiSparseResidentManager)]
    if resident:
        if host_id > min(resident):
            raise ValueError(f"HiSparse host group must precede resident groups: host group {host_id}, "
                             f"resident groups {resident}")
        sizes = {managers[i].block_size for i in resident}
        if len(sizes) != 1:
            raise ValueError(f"HiSparse resident cache groups must use one block size, got {sorted(sizes)}")
        if managers[host_id].block_size not in sizes:
            raise ValueError(f"HiSparse host and resident block sizes must match: host "
                             f"{managers[host_id].block_size}, resident {sizes.pop()}")
    managers[host_id].bind_host_pool(num_host_blocks)


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
