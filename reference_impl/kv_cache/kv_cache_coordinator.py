"""Coordinators: one `BlockPool`, one manager per group, and the cross-group cache-hit search
(vLLM 0.33's `kv_cache_coordinator`, same class names and signatures)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from reference_impl.kv_cache.block_pool import BlockPool, KVCacheBlock
from reference_impl.kv_cache.kv_cache_utils import eagle_proof_margin, partial_hash_hits_enabled
from reference_impl.kv_cache.single_type_kv_cache_manager import (
    CrossAttentionManager,
    FullAttentionManager,
    MambaManager,
    RSWAManager,
    SingleTypeKVCacheManager,
    bind_hisparse_host_pool,
    get_manager_for_kv_cache_spec,
)
from reference_impl.kv_cache.kv_cache_interface import (
    ChunkedLocalAttentionSpec,
    HiSparseResidentSpec,
    KVCacheConfig,
    MambaSpec,
    KVCacheSpec,
    SlidingWindowSpec,
    cdiv,
)

__all__ = [
    "KVCacheCoordinator",
    "KVCacheCoordinatorNoPrefixCache",
    "UnitaryKVCacheCoordinator",
    "HybridKVCacheCoordinator",
    "SpecGroup",
    "get_kv_cache_coordinator",
    "replay_boundaries",
]


def replay_boundaries(num_prompt_tokens: int, scheduler_block_size: int, use_eagle: bool) -> tuple[int, ...]:
    """Token positions a later request replaying this prompt can resume at (sparse retention keeps them).

    Without EAGLE: `num_prompt_tokens - 1` (a resend recomputes its last token). With EAGLE a hit drops one
    scheduler block from where it matched, so both a resend (matching up to the last block boundary below
    `num_prompt_tokens - 1`) and a longer sibling (matching up to the last boundary below the prompt end)
    land one block lower; on a block-aligned prompt those two differ.
    """
    if not use_eagle:
        return (num_prompt_tokens - 1,)
    block = scheduler_block_size
    resend = (num_prompt_tokens - 1) // block * block
    extension = num_prompt_tokens // block * block
    return tuple(sorted({max(resend - block, 0), max(extension - block, 0)}))


class KVCacheCoordinator:
    """Owns the single pool and the per-group managers; fans every operation out group by group."""

    #: Whether hits may end on any hash boundary, inside a block (set by the hybrid coordinator).
    enable_partial_hash_hits = False

    def __init__(self, kv_cache_config: KVCacheConfig, max_model_len: int, max_in_flight_tokens: int | None,
                 use_eagle: bool, enable_caching: bool, enable_kv_cache_events: bool, dcp_world_size: int = 1,
                 pcp_world_size: int = 1, scheduler_block_size: int | None = None, hash_block_size: int = 16,
                 metrics_collector=None, num_prefill_lookahead: int = 0, num_hash_lookahead_tokens: int = 0):
        if scheduler_block_size is None:
            scheduler_block_size = hash_block_size
        self.kv_cache_config = kv_cache_config
        self.max_model_len = max_model_len
        self.use_eagle = use_eagle
        self.enable_caching = enable_caching
        self.hash_block_size = hash_block_size
        self.scheduler_block_size = scheduler_block_size
        self.dcp_world_size = dcp_world_size
        self.pcp_world_size = pcp_world_size
        # Multi-token prediction may re-prefill this many trailing tokens: their KV is not final yet.
        self.num_reprefillable_tokens = max(0, num_prefill_lookahead - 1)
        self.block_pool = BlockPool(kv_cache_config.num_blocks, enable_caching, hash_block_size,
                                    enable_kv_cache_events, metrics_collector, num_hash_lookahead_tokens)
        # EAGLE drops the last hit block of its groups: the flagged ones, or every group when none is.
        groups = kv_cache_config.kv_cache_groups
        self.eagle_group_ids = {i for i, g in enumerate(groups) if g.is_eagle_group}
        if use_eagle and not self.eagle_group_ids:
            self.eagle_group_ids = set(range(len(groups)))
        self.drop_eagle_group_ids = self.eagle_group_ids if use_eagle else set()
        in_flight = max_model_len if max_in_flight_tokens is None else max_in_flight_tokens
        rti = kv_cache_config.prefix_cache_retention_interval
        managers = []
        for gid, group in enumerate(kv_cache_config.kv_cache_groups):
            spec = group.kv_cache_spec
            cap = None
            if isinstance(spec, (SlidingWindowSpec, ChunkedLocalAttentionSpec, HiSparseResidentSpec)):
                cap = spec.max_admission_blocks_per_request(in_flight, max_model_len)
            managers.append(get_manager_for_kv_cache_spec(
                spec, role=group.role, block_pool=self.block_pool, enable_caching=enable_caching,
                kv_cache_group_id=gid, scheduler_block_size=scheduler_block_size, dcp_world_size=dcp_world_size,
                pcp_world_size=pcp_world_size, max_admission_blocks_per_request=cap, retention_interval=rti,
                needs_kv_cache_zeroing=kv_cache_config.needs_kv_cache_zeroing))
        bind_hisparse_host_pool(kv_cache_config, managers)
        self.retention_interval = rti
        self.single_type_managers: tuple[SingleTypeKVCacheManager, ...] = tuple(managers)
        #: Tokens one block of each group spans, as its manager allocates them (scaled by the DCP and PCP ranks
        #: where the group's spec is sharded across them), group by group (vLLM 0.31+'s attribute).
        self.group_block_sizes: tuple[int, ...] = tuple(m.block_size for m in managers)
        # A group whose hits drop the EAGLE block must also keep that block cached (sparse SWA masks).
        for gid, m in enumerate(managers):
            m.use_eagle = gid in self.drop_eagle_group_ids
            if use_eagle and isinstance(m, MambaManager):
                m.drop_eagle_checkpoint_block = True  # checkpoints follow EAGLE's replay boundary
        # Managers that may free blocks mid-request (plain full attention never does; R-SWA frees its gap).
        self._skipping_managers = tuple(
            m for m in managers
            if not isinstance(m, (FullAttentionManager, CrossAttentionManager)) or isinstance(m, RSWAManager))
        #: Groups sized by the request's encoder input tokens instead of its decoder tokens (encoder-decoder
        #: models); empty for every other model.
        self.cross_attention_group_ids = frozenset(
            gid for gid, m in enumerate(managers) if isinstance(m, CrossAttentionManager))
        # Every group may cache the same prefix when no EAGLE block is kept past a boundary and no tokens
        # await re-prefill: `cache_blocks` then skips the per-group computation on the hot path.
        self._uniform_caching = not self.drop_eagle_group_ids and not self.num_reprefillable_tokens

    @property
    def _cacheable_alignment(self) -> int:
        """Tokens a cacheable prefix is rounded down to (1: no rounding, one group's hits end anywhere)."""
        return 1

    def _align_cacheable(self, num_tokens: int) -> int:
        """The longest prefix of `num_tokens` a later hit could match."""
        align = self._cacheable_alignment
        return num_tokens // align * align

    # ----------------------------------------------------------------------------------------- counting
    def checkpoint_prefill_end(self, prefill_end: int) -> int:
        """The prefill end Mamba checkpoint reservations are keyed on: under sparse retention (interval 0)
        only the chunk reaching `prefill_end` reserves one; otherwise every chunk publishes a state (0)."""
        return prefill_end if self.retention_interval == 0 else 0

    def get_num_blocks_to_allocate(self, request_id: str, num_tokens: int,
                                   new_computed_blocks: Sequence[Sequence[KVCacheBlock]],
                                   num_encoder_tokens: int, total_computed_tokens: int,
                                   num_local_computed_tokens: int = 0, num_tokens_main_model: int | None = None,
                                   apply_admission_cap: bool = False, prefill_end: int = 0) -> int:
        """Free-queue blocks the allocation needs, summed over groups (a cross-attention group: one static
        table for `num_encoder_tokens`)."""
        if num_tokens_main_model is None:
            num_tokens_main_model = num_tokens
        prefill_end = self.checkpoint_prefill_end(prefill_end)
        cross = self.cross_attention_group_ids
        return sum(
            m.get_num_blocks_to_allocate(request_id, num_encoder_tokens, (), 0, 0, num_encoder_tokens,
                                         apply_admission_cap, prefill_end) if i in cross else
            m.get_num_blocks_to_allocate(request_id, num_tokens, new_computed_blocks[i], total_computed_tokens,
                                         num_local_computed_tokens, num_tokens_main_model, apply_admission_cap,
                                         prefill_end)
            for i, m in enumerate(self.single_type_managers)
        )

    # --------------------------------------------------------------------------------------- allocation
    def allocate_new_computed_blocks(self, request_id: str, new_computed_blocks: Sequence[Sequence[KVCacheBlock]],
                                     num_local_computed_tokens: int, num_external_computed_tokens: int,
                                     skip_zeroing_group_ids: Sequence[int] = ()) -> None:
        """Touch every group's hits first, then allocate external-token blocks (two phases, so one group's
        allocation cannot evict another group's not-yet-touched hits). The external blocks of the groups
        in `skip_zeroing_group_ids` are not zeroed: an async load writes them after this step, which
        zeroing would race."""
        for i, m in enumerate(self.single_type_managers):
            m.add_local_computed_blocks(request_id, new_computed_blocks[i], num_local_computed_tokens,
                                        num_external_computed_tokens)
        if num_external_computed_tokens > 0:
            for i, m in enumerate(self.single_type_managers):
                m.allocate_external_computed_blocks(request_id, num_local_computed_tokens,
                                                    num_external_computed_tokens,
                                                    record_for_zeroing=i not in skip_zeroing_group_ids)

    def allocate_new_blocks(self, request_id: str, num_tokens: int, num_tokens_main_model: int | None = None,
                            num_encoder_tokens: int = 0) -> tuple[list[KVCacheBlock], ...]:
        """Grow every group's table to cover `num_tokens` (a cross-attention group's: `num_encoder_tokens`);
        the new table entries per group."""
        cross = self.cross_attention_group_ids
        return tuple(m.allocate_new_blocks(request_id, num_encoder_tokens if i in cross else num_tokens,
                                           num_tokens_main_model)
                     for i, m in enumerate(self.single_type_managers))

    def get_num_cacheable_tokens(self, num_computed_tokens: int, kv_cache_group_id: int) -> int:
        """The prefix of `num_computed_tokens` group `kv_cache_group_id` may register: all but the tokens
        multi-token prediction may still re-prefill."""
        return max(0, num_computed_tokens - self.num_reprefillable_tokens)

    def cache_blocks(self, request, num_computed_tokens: int) -> None:
        """Register the request's newly full blocks in every group."""
        if self._uniform_caching:
            n = self._align_cacheable(num_computed_tokens)
            boundaries = replay_boundaries(request.num_prompt_tokens, self.scheduler_block_size, False)
            for m in self.single_type_managers:
                m.cache_blocks(request, n, retention_interval=self.retention_interval, replay_boundaries=boundaries)
            return
        boundaries = replay_boundaries(request.num_prompt_tokens, self.scheduler_block_size,
                                       bool(self.drop_eagle_group_ids))
        for gid, m in enumerate(self.single_type_managers):
            m.cache_blocks(request, self.get_num_cacheable_tokens(num_computed_tokens, gid),
                           retention_interval=self.retention_interval, replay_boundaries=boundaries)

    def remove_skipped_blocks(self, request_id: str, processed_computed_tokens: int,
                              num_prompt_tokens: int | None = None) -> None:
        """Null and free blocks that fell out of every windowed group's reach."""
        for m in self._skipping_managers:
            m.remove_skipped_blocks(request_id, processed_computed_tokens, num_prompt_tokens)

    def free(self, request_id: str) -> None:
        """Release the request group by group (each tail first)."""
        for m in self.single_type_managers:
            m.free(request_id)

    def pop_blocks_for_free(self, request_id: str) -> list[KVCacheBlock]:
        """Detach the request's blocks in every group (allocation order per group; free them reversed)."""
        out: list[KVCacheBlock] = []
        for m in self.single_type_managers:
            out.extend(m.pop_blocks_for_free(request_id))
        return out

    def emit_cached_block_events(self, request, computed_blocks: Sequence[Sequence[KVCacheBlock]]) -> None:
        """Report each group's prefix-cache hit blocks as a BlockStored (no state change)."""
        groups = self.kv_cache_config.kv_cache_groups
        for gid, blocks in enumerate(computed_blocks):
            if blocks:
                self.block_pool.emit_cached_block_events(request, len(blocks), groups[gid].kv_cache_spec.block_size,
                                                         gid)

    def reset_prefix_cache(self) -> bool:
        """Clear the prefix cache (refused while any block is in use)."""
        return self.block_pool.reset_prefix_cache()

    def get_blocks(self, request_id: str) -> tuple[list[KVCacheBlock], ...]:
        """The request's block table per group (empty lists when unknown)."""
        return tuple(m.req_to_blocks.get(request_id) or [] for m in self.single_type_managers)

    def has_request(self, request_id: str) -> bool:
        """Whether any group holds a table for the request."""
        return any(request_id in m.req_to_blocks for m in self.single_type_managers)

    def new_step_starts(self) -> None:
        """Forward the start of a scheduling step to the managers."""
        for m in self.single_type_managers:
            m.new_step_starts()

    def find_longest_cache_hit(self, block_hashes: Sequence[bytes],
                               max_cache_hit_length: int) -> tuple[tuple[list[KVCacheBlock], ...], int, int]:
        """(hit blocks per group, hit tokens, tokens a longer group could hit beyond the common hit)."""
        raise NotImplementedError


class KVCacheCoordinatorNoPrefixCache(KVCacheCoordinator):
    """Prefix caching off: lookups are always empty; any number of groups (0 included)."""

    def __init__(self, kv_cache_config: KVCacheConfig, max_model_len: int, max_in_flight_tokens: int | None,
                 use_eagle: bool, enable_kv_cache_events: bool, dcp_world_size: int = 1, pcp_world_size: int = 1,
                 scheduler_block_size: int | None = None, hash_block_size: int = 16, metrics_collector=None,
                 num_prefill_lookahead: int = 0, num_hash_lookahead_tokens: int = 0):
        super().__init__(kv_cache_config, max_model_len, max_in_flight_tokens, use_eagle, False,
                         enable_kv_cache_events, dcp_world_size, pcp_world_size, scheduler_block_size,
                         hash_block_size, metrics_collector, num_prefill_lookahead, num_hash_lookahead_tokens)

    def cache_blocks(self, request, num_computed_tokens: int) -> None:
        return None

    def find_longest_cache_hit(self, block_hashes, max_cache_hit_length):
        return tuple([] for _ in self.single_type_managers), 0, 0


class UnitaryKVCacheCoordinator(KVCacheCoordinator):
    """Exactly one group: direct calls into its manager, alignment = block size."""

    def __init__(self, kv_cache_config: KVCacheConfig, *args, **kwargs):
        super().__init__(kv_cache_config, *args, **kwargs)
        self.manager = self.single_type_managers[0]
        self.kv_cache_spec = kv_cache_config.kv_cache_groups[0].kv_cache_spec
        self.block_size = self.manager.block_size
        if self.enable_caching and self.hash_block_size != self.block_size:
            raise ValueError(
                f"hash_block_size ({self.hash_block_size}) must equal the block_size ({self.block_size}) "
                "of the only KV cache group when prefix caching is enabled"
            )

    def find_longest_cache_hit(self, block_hashes, max_cache_hit_length):
        blocks, hit = type(self.manager).find_longest_cache_hit(
            block_hashes, max_cache_hit_length, (0,), self.block_pool, self.kv_cache_spec,
            0 in self.drop_eagle_group_ids, self.block_size, self.dcp_world_size, self.pcp_world_size)
        return blocks, hit, 0


@dataclass
class SpecGroup:
    """Prefix-cacheable groups with an equal spec and manager class: one lookup must hit in all of them.

    `use_eagle`: any member is an EAGLE group, so the last-block drop applies to the whole spec group.
    """

    spec: KVCacheSpec
    group_ids: tuple[int, ...]
    manager_cls: type[SingleTypeKVCacheManager]
    use_eagle: bool = False
    block_size: int = 0

    @property
    def kv_cache_spec(self) -> KVCacheSpec:
        """The shared spec (the reference's former field name)."""
        return self.spec

    @property
    def is_full_attention(self) -> bool:
        """Full attention hits are downward closed, so they are looked up once and trimmed."""
        return self.manager_cls.downward_closed


class HybridKVCacheCoordinator(KVCacheCoordinator):
    """Several groups: hits are the fixed point of per-type searches, aligned to `scheduler_block_size`, or
    to the hash block size when fine-grained partial hits are enabled (a Mamba "align" group whose block is
    larger than the hash block, and every other cacheable group able to look hits up inside a block)."""

    def __init__(self, kv_cache_config: KVCacheConfig, *args, allow_partial_hash_hits: bool = True, **kwargs):
        super().__init__(kv_cache_config, *args, **kwargs)
        groups = kv_cache_config.kv_cache_groups
        for m in self.single_type_managers:
            if self.scheduler_block_size % m.block_size:
                raise ValueError(
                    f"scheduler_block_size ({self.scheduler_block_size}) must be a multiple of every group's "
                    f"block_size (group {m.kv_cache_group_id} has {m.block_size})"
                )
            # Scratch groups (no prefix caching) never read hashes, so their block size is free.
            if self.enable_caching and groups[m.kv_cache_group_id].kv_cache_spec.prefix_cacheable \
                    and m.block_size % self.hash_block_size:
                raise ValueError(
                    f"hash_block_size ({self.hash_block_size}) must divide every prefix-cacheable group's "
                    f"block_size (group {m.kv_cache_group_id} has {m.block_size})"
                )
        self.enable_partial_hash_hits = allow_partial_hash_hits and partial_hash_hits_enabled(
            groups, self.hash_block_size, self.dcp_world_size, [type(m) for m in self.single_type_managers])
        alignment = self._cache_hit_alignment_tokens
        for m in self.single_type_managers:
            m.cache_hit_alignment_tokens = alignment
        self.verify_and_split_kv_cache_groups()

    @property
    def _cache_hit_alignment_tokens(self) -> int:
        """Token granularity hits land on: the hash block size with partial hits, else the scheduler's."""
        return self.hash_block_size if self.enable_partial_hash_hits else self.scheduler_block_size

    def verify_and_split_kv_cache_groups(self) -> None:
        """Batch the prefix-cacheable groups by (spec, manager class) into `attention_groups`, full
        attention first (its downward-closed hit bounds the others cheaply)."""
        by_key: dict[tuple, list[int]] = {}
        order: list[tuple] = []
        for gid, m in enumerate(self.single_type_managers):
            if not self.kv_cache_config.kv_cache_groups[gid].kv_cache_spec.prefix_cacheable:
                continue  # per-request scratch: never shared, its slot of the hit stays empty
            key = (m.kv_cache_spec, type(m))
            if key not in by_key:
                by_key[key] = []
                order.append(key)
            by_key[key].append(gid)
        drop = self.drop_eagle_group_ids
        managers = self.single_type_managers
        # A spec group's block size is its managers' (decode context parallelism may scale the spec's).
        spec_groups = [SpecGroup(spec, tuple(gids), cls, any(g in drop for g in gids), managers[gids[0]].block_size)
                       for spec, cls in order for gids in (by_key[(spec, cls)],)]
        spec_groups.sort(key=lambda sg: not sg.is_full_attention)  # stable: full attention first
        for sg in spec_groups:  # the drop applies to the whole spec group, so does its caching
            for gid in sg.group_ids:
                managers[gid].use_eagle = sg.use_eagle
        self.attention_groups = spec_groups
        self.full_attention_group_id = next((sg.group_ids[0] for sg in spec_groups if sg.is_full_attention), None)
        self._num_groups = len(managers)

    @property
    def _cacheable_alignment(self) -> int:
        # Hits land on the scheduler block, or anywhere with partial hits (rounding, even to the hash
        # block, would drop the prompt's partial tail).
        return 1 if self.enable_partial_hash_hits else self.scheduler_block_size

    def get_num_cacheable_tokens(self, num_computed_tokens: int, kv_cache_group_id: int) -> int:
        aligned = self._align_cacheable(num_computed_tokens)
        manager = self.single_type_managers[kv_cache_group_id]
        if manager.use_eagle and aligned > 0:
            # An EAGLE hit matches one block past its boundary and drops it: keep that block too.
            finalized = max(0, num_computed_tokens - self.num_reprefillable_tokens)
            return min(finalized, self._align_cacheable(finalized) + manager.block_size)
        return aligned

    def _eagle_lookup_length(self, sg: "SpecGroup", length: int, num_hashes: int) -> int:
        """How far an EAGLE spec group looks past `length`: one drop unit, capped at the hashed tokens.
        Mamba never drops (draft models have no Mamba layers), so it gets no margin."""
        if sg.manager_cls is MambaManager or isinstance(sg.spec, MambaSpec):
            return length
        margin = eagle_proof_margin(sg.block_size, self.hash_block_size,
                                    self.enable_partial_hash_hits and sg.manager_cls.supports_fine_grained_hash_lookup)
        return min(length + margin, num_hashes * self.hash_block_size)

    def _lookup(self, sg: "SpecGroup", block_hashes, max_length: int, drop: bool):
        m = self.single_type_managers[sg.group_ids[0]]
        return sg.manager_cls.find_longest_cache_hit(
            block_hashes, max_length, sg.group_ids, m.block_pool, sg.spec, drop, self._cache_hit_alignment_tokens,
            m.dcp_world_size, m.pcp_world_size)

    def find_longest_cache_hit(self, block_hashes, max_cache_hit_length):
        if not self.attention_groups:  # only scratch groups: nothing is ever shared
            return tuple([] for _ in range(self._num_groups)), 0, 0
        results: list = [None] * self._num_groups
        full_hits: dict[int, int] = {}
        candidate = max_cache_hit_length
        longest = 0
        groups = self.attention_groups
        two_with_full_first = len(groups) == 2 and groups[0].is_full_attention
        # EAGLE groups drop their last unit at most once per candidate length: they look one unit past
        # the candidate and drop it, landing back on the candidate (re-verified when the candidate shrinks).
        eagle_verified: set[int] = set()
        num_hashes = len(block_hashes)
        while True:
            cur = candidate
            for idx, sg in enumerate(groups):
                if sg.is_full_attention and idx in full_hits:
                    cur = min(cur, full_hits[idx])
                    continue
                drop = sg.use_eagle and idx not in eagle_verified
                max_length = self._eagle_lookup_length(sg, cur, num_hashes) if drop else cur
                blocks, new_hit = self._lookup(sg, block_hashes, max_length, drop)
                if drop:
                    eagle_verified.add(idx)
                elif new_hit < cur:
                    eagle_verified.clear()
                cur = new_hit
                if sg.is_full_attention:
                    full_hits[idx] = cur
                for gid, lst in zip(sg.group_ids, blocks):
                    results[gid] = lst
                if cur > longest:
                    longest = cur
            if cur >= candidate:
                break
            candidate = cur
            if two_with_full_first:
                break
        for sg in groups:
            if sg.is_full_attention and not self.single_type_managers[sg.group_ids[0]].retains_longer_hit:
                keep = cdiv(candidate, sg.block_size)
                for gid in sg.group_ids:
                    del results[gid][keep:]
        return tuple([] if r is None else r for r in results), candidate, longest - candidate

    def find_longest_cache_hit_per_group(self, block_hashes, max_cache_hit_length: int
                                         ) -> tuple[tuple[list[KVCacheBlock], ...], tuple[int, ...]]:
        """Each spec group's own longest hit (no reconciliation): (blocks per group, hit tokens per group)."""
        blocks_out: list[list[KVCacheBlock]] = [[] for _ in range(self._num_groups)]
        hits: list[int] = [0] * self._num_groups
        num_hashes = len(block_hashes)
        for sg in self.attention_groups:
            length = self._eagle_lookup_length(sg, max_cache_hit_length, num_hashes) if sg.use_eagle \
                else max_cache_hit_length
            blocks, hit = self._lookup(sg, block_hashes, length, sg.use_eagle)
            for gid, lst in zip(sg.group_ids, blocks):
                blocks_out[gid] = lst
                hits[gid] = hit
        return tuple(blocks_out), tuple(hits)


def get_kv_cache_coordinator(kv_cache_config: KVCacheConfig, max_model_len: int, max_in_flight_tokens: int | None,
                             use_eagle: bool, enable_caching: bool, enable_kv_cache_events: bool,
                             dcp_world_size: int = 1, pcp_world_size: int = 1,
                             scheduler_block_size: int | None = None, hash_block_size: int = 16,
                             metrics_collector=None, num_hash_lookahead_tokens: int = 0,
                             num_prefill_lookahead: int = 0, allow_partial_hash_hits: bool = True
                             ) -> KVCacheCoordinator:
    """No caching -> no-prefix-cache coordinator; one group -> unitary; otherwise hybrid."""
    tail = dict(dcp_world_size=dcp_world_size, pcp_world_size=pcp_world_size,
                scheduler_block_size=scheduler_block_size, hash_block_size=hash_block_size,
                metrics_collector=metrics_collector, num_prefill_lookahead=num_prefill_lookahead,
                num_hash_lookahead_tokens=num_hash_lookahead_tokens)
    if not enable_caching:
        return KVCacheCoordinatorNoPrefixCache(kv_cache_config, max_model_len, max_in_flight_tokens, use_eagle,
                                               enable_kv_cache_events, **tail)
    if len(kv_cache_config.kv_cache_groups) == 1:
        return UnitaryKVCacheCoordinator(kv_cache_config, max_model_len, max_in_flight_tokens, use_eagle,
                                         enable_caching, enable_kv_cache_events, **tail)
    return HybridKVCacheCoordinator(kv_cache_config, max_model_len, max_in_flight_tokens, use_eagle, enable_caching,
                                    enable_kv_cache_events, allow_partial_hash_hits=allow_partial_hash_hits, **tail)
