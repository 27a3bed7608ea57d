"""Coordinators: one `BlockPool`, one manager per group, and the cross-group cache-hit search
(vLLM 0.33's `kv_cache_coordinator`, same class names and signatures)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from reference_impl.kv_cache.block_pool import BlockPool, KVCacheBlock
from reference_impl.kv_cache.kv_cache_utils import BlockHashListWithBlockSize
from reference_impl.kv_cache.single_type_kv_cache_manager import (
    FullAttentionManager,
    MambaManager,
    SingleTypeKVCacheManager,
    get_manager_for_kv_cache_spec,
)
from reference_impl.kv_cache.kv_cache_interface import (
    ChunkedLocalAttentionSpec,
    KVCacheConfig,
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
]


class KVCacheCoordinator:
    """Owns the single pool and the per-group managers; fans every operation out group by group."""

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
            if isinstance(spec, (SlidingWindowSpec, ChunkedLocalAttentionSpec)):
                cap = spec.max_admission_blocks_per_request(in_flight, max_model_len)
            managers.append(get_manager_for_kv_cache_spec(
                spec, block_pool=self.block_pool, enable_caching=enable_caching, kv_cache_group_id=gid,
                scheduler_block_size=scheduler_block_size, dcp_world_size=dcp_world_size,
                pcp_world_size=pcp_world_size, max_admission_blocks_per_request=cap, retention_interval=rti))
        self.retention_interval = rti
        self.single_type_managers: tuple[SingleTypeKVCacheManager, ...] = tuple(managers)
        # A group whose hits drop the EAGLE block must also keep that block cached (sparse SWA masks).
        for gid, m in enumerate(managers):
            m.use_eagle = gid in self.drop_eagle_group_ids
        # Managers whose skipped-token count can be non-zero (full attention never skips).
        self._skipping_managers = tuple(m for m in managers if not isinstance(m, FullAttentionManager))

    # ----------------------------------------------------------------------------------------- counting
    def get_num_blocks_to_allocate(self, request_id: str, num_tokens: int,
                                   new_computed_blocks: Sequence[Sequence[KVCacheBlock]],
                                   num_encoder_tokens: int, total_computed_tokens: int,
                                   num_local_computed_tokens: int = 0, num_tokens_main_model: int | None = None,
                                   apply_admission_cap: bool = False, prefill_end: int = 0) -> int:
        """Free-queue blocks the allocation needs, summed over groups."""
        if num_tokens_main_model is None:
            num_tokens_main_model = num_tokens
        return sum(
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
        allocation cannot evict another group's not-yet-touched hits)."""
        for i, m in enumerate(self.single_type_managers):
            m.add_local_computed_blocks(request_id, new_computed_blocks[i], num_local_computed_tokens,
                                        num_external_computed_tokens)
        if num_external_computed_tokens > 0:
            for m in self.single_type_managers:
                m.allocate_external_computed_blocks(request_id, num_local_computed_tokens,
                                                    num_external_computed_tokens)

    def allocate_new_blocks(self, request_id: str, num_tokens: int, num_tokens_main_model: int | None = None,
                            num_encoder_tokens: int = 0) -> tuple[list[KVCacheBlock], ...]:
        """Grow every group's table to cover `num_tokens`; the new table entries per group."""
        return tuple(m.allocate_new_blocks(request_id, num_tokens, num_tokens_main_model)
                     for m in self.single_type_managers)

    def cache_blocks(self, request, num_computed_tokens: int) -> None:
        """Register the request's newly full blocks in every group."""
        boundaries = replay_boundaries(request.num_prompt_tokens, self.scheduler_block_size,
                                       bool(self.drop_eagle_group_ids))
        for m in self.single_type_managers:
            m.cache_blocks(request, num_computed_tokens, replay_boundaries=boundaries)

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
    """Several groups: hits are the fixed point of per-type searches, aligned to `scheduler_block_size`."""

    def __init__(self, kv_cache_config: KVCacheConfig, *args, **kwargs):
        super().__init__(kv_cache_config, *args, **kwargs)
        by_key: dict[tuple, list[int]] = {}
        order: list[tuple] = []
        for gid, m in enumerate(self.single_type_managers):
            key = (m.kv_cache_spec, type(m))
            if key not in by_key:
                by_key[key] = []
                order.append(key)
            by_key[key].append(gid)
        drop = self.drop_eagle_group_ids
        spec_groups = [SpecGroup(spec, tuple(by_key[(spec, cls)]), cls,
                                 any(g in drop for g in by_key[(spec, cls)]), spec.block_size)
                       for spec, cls in order]
        spec_groups.sort(key=lambda sg: not sg.is_full_attention)  # stable: full attention first
        for sg in spec_groups:  # the drop applies to the whole spec group, so does its caching
            for gid in sg.group_ids:
                self.single_type_managers[gid].use_eagle = sg.use_eagle
        self.attention_groups = spec_groups
        self.full_attention_group_id = next((sg.group_ids[0] for sg in spec_groups if sg.is_full_attention), None)
        self._num_groups = len(self.single_type_managers)
        for m in self.single_type_managers:
            if self.scheduler_block_size % m.block_size:
                raise ValueError(
                    f"scheduler_block_size ({self.scheduler_block_size}) must be a multiple of every group's "
                    f"block_size (group {m.kv_cache_group_id} has {m.block_size})"
                )
            if self.enable_caching and m.block_size % self.hash_block_size:
                raise ValueError(
                    f"hash_block_size ({self.hash_block_size}) must divide every group's block_size "
                    f"(group {m.kv_cache_group_id} has {m.block_size})"
                )

    def cache_blocks(self, request, num_computed_tokens: int) -> None:
        # Blocks past the last aligned boundary can never serve a hit.
        sbs = self.scheduler_block_size
        super().cache_blocks(request, num_computed_tokens // sbs * sbs)

    def find_longest_cache_hit(self, block_hashes, max_cache_hit_length):
        sbs = self.scheduler_block_size
        hbs = self.hash_block_size
        pool = self.block_pool
        views = {}
        for sg in self.attention_groups:
            if sg.block_size not in views:
                views[sg.block_size] = block_hashes if sg.block_size == hbs else \
                    BlockHashListWithBlockSize(block_hashes, hbs, sg.block_size)
        results: list = [None] * self._num_groups
        full_hits: dict[int, int] = {}
        candidate = max_cache_hit_length // sbs * sbs
        longest = 0
        groups = self.attention_groups
        two_with_full_first = len(groups) == 2 and groups[0].is_full_attention
        # EAGLE groups drop their last block at most once per candidate length: they look one block past
        # the candidate and drop it, landing back on the candidate (re-verified when the candidate shrinks).
        eagle_verified: set[int] = set()
        max_hashed = len(block_hashes) * hbs
        while True:
            cur = candidate
            for idx, sg in enumerate(groups):
                if sg.is_full_attention and idx in full_hits:
                    cur = min(cur, full_hits[idx])
                    continue
                drop = sg.use_eagle and idx not in eagle_verified
                max_length = cur
                if drop and sg.manager_cls is not MambaManager:
                    max_length = min(cur + sg.block_size, max_hashed)
                blocks, new_hit = sg.manager_cls.find_longest_cache_hit(
                    views[sg.block_size], max_length, sg.group_ids, pool, sg.spec, drop, sbs)
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
            if sg.is_full_attention:
                keep = cdiv(candidate, sg.block_size)
                for gid in sg.group_ids:
                    del results[gid][keep:]
        return tuple(results), candidate, longest - candidate


def replay_boundaries(num_prompt_tokens: int, scheduler_block_size: int, use_eagle: bool) -> tuple[int, ...]:
    """Token positions a later request replaying this prompt can resume at (sparse retention keeps the
    reachable tail ending on each).

    Without EAGLE that is the resend cap, `num_prompt_tokens - 1`. Under EAGLE a hit drops its last block,
    so the reachable positions sit one scheduler block below both the resend's aligned cap and a longer
    sibling's last aligned block (they differ only when the prompt is block-aligned).
    """
    if not use_eagle:
        return (num_prompt_tokens - 1,)
    resend = (num_prompt_tokens - 1) // scheduler_block_size * scheduler_block_size
    extension = num_prompt_tokens // scheduler_block_size * scheduler_block_size
    return tuple(sorted({max(resend - scheduler_block_size, 0), max(extension - scheduler_block_size, 0)}))


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
    cls = UnitaryKVCacheCoordinator if len(kv_cache_config.kv_cache_groups) == 1 else HybridKVCacheCoordinator
    return cls(kv_cache_config, max_model_len, max_in_flight_tokens, use_eagle, enable_caching,
               enable_kv_cache_events, **tail)
