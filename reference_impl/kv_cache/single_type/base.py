"""`SingleTypeKVCacheManager`: the block tables of one KV cache group, the logic every manager shares; and
`_NoPrefixCacheMixin`, for the groups that take no part in prefix caching (circular buffers, HiSparse's device
groups).

All managers share the coordinator's one `BlockPool`. A table is position-indexed (entry i covers tokens
[i*bs, (i+1)*bs)); entries that hold no useful KV are the null block. Tables only grow, except that entries
are replaced in place by the null block (window skipping, Mamba).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from reference_impl.kv_cache.block_pool import BlockPool, KVCacheBlock
from reference_impl.kv_cache.kv_cache_interface import CircularBufferSpec, KVCacheSpec, cdiv
from reference_impl.kv_cache.kv_cache_utils import gc_untrack, trim_null_head, untracked_list

__all__ = ["SingleTypeKVCacheManager"]


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


class _NoPrefixCacheMixin:
    """Groups whose blocks are never registered in, nor found in, the prefix cache."""

    def cache_blocks(self, request, num_tokens, retention_interval=None, *, replay_boundaries=()):
        return None

    @classmethod
    def find_longest_cache_hit(cls, block_hashes, max_length, kv_cache_group_ids, block_pool, kv_cache_spec,
                               drop_eagle_block, alignment_tokens, dcp_world_size=1, pcp_world_size=1):
        return tuple([] for _ in kv_cache_group_ids), 0

