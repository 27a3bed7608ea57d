"""`MambaManager`: Mamba state blocks ("none" and "align" cache modes, checkpoints, speculative blocks)."""

from __future__ import annotations

from reference_impl.kv_cache.block_pool import BlockPool, KVCacheBlock
from reference_impl.kv_cache.kv_cache_interface import (
    MambaSpec,
    cdiv,
    get_mamba_prefill_checkpoint_position,
    is_mamba_prefill_checkpoint_valid,
)
from reference_impl.kv_cache.kv_cache_utils import resolve_block_hashes
from reference_impl.kv_cache.single_type.base import SingleTypeKVCacheManager

__all__ = ["MambaManager"]


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

