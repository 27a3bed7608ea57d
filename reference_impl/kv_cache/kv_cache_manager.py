"""`KVCacheManager` and `KVCacheBlocks`: the scheduler-facing API of the allocator (vLLM 0.33 shapes)."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

from reference_impl.kv_cache.block_pool import KVCacheBlock
from reference_impl.kv_cache.kv_cache_utils import KVCacheBlockCopy
from reference_impl.kv_cache.kv_cache_coordinator import get_kv_cache_coordinator
from reference_impl.kv_cache.request import Request, RequestStatus, prefix_cache_hit_limit
from reference_impl.kv_cache.request import max_cache_hit_length as _max_hit_length
from reference_impl.kv_cache.single_type_kv_cache_manager import (
    FullAttentionManager,
    MambaManager,
    SlidingWindowManager,
)
from reference_impl.kv_cache.kv_cache_interface import (
    AttentionSpec,
    CrossAttentionSpec,
    EncoderOnlyAttentionSpec,
    KVCacheConfig,
    MambaSpec,
    SlidingWindowSpec,
    get_kv_cache_spec_kind,
    get_kv_cache_spec_sliding_window,
)

__all__ = ["KVCacheBlocks", "KVCacheManager", "PrefixCacheStats", "Request"]

logger = logging.getLogger(__name__)

_WAITING_STATES = frozenset({"waiting", "preempted"})


@dataclass
class PrefixCacheStats:
    """Prefix-cache lookups since the last `make_prefix_cache_stats` (vLLM's metrics record of the same
    name): requests, queried tokens and hit tokens, counted apart for requests resumed after preemption;
    `reset` says the cache was cleared meanwhile."""

    reset: bool = False
    requests: int = 0
    queries: int = 0
    hits: int = 0
    preempted_requests: int = 0
    preempted_queries: int = 0
    preempted_hits: int = 0

    def record(self, num_tokens: int, num_hits: int, preempted: bool) -> None:
        """Count one request's lookup of `num_tokens` tokens that hit `num_hits`."""
        if preempted:
            self.preempted_requests += 1
            self.preempted_queries += num_tokens
            self.preempted_hits += num_hits
        else:
            self.requests += 1
            self.queries += num_tokens
            self.hits += num_hits


@dataclass
class KVCacheBlocks:
    """Blocks per group: `blocks[group_id][position]`."""

    blocks: tuple[Sequence[KVCacheBlock], ...]

    def __add__(self, other: "KVCacheBlocks") -> "KVCacheBlocks":
        return KVCacheBlocks(tuple(list(a) + list(b) for a, b in zip(self.blocks, other.blocks)))

    def get_block_ids(self, allow_none: bool = False, *,
                      group_ids: Sequence[int] | None = None) -> tuple[list[int], ...] | None:
        """Block ids per (selected) group; None if `allow_none` and every selected group is empty."""
        groups = self.blocks if group_ids is None else [self.blocks[g] for g in group_ids]
        if allow_none and all(len(g) == 0 for g in groups):
            return None
        return tuple([b.block_id for b in g] for g in groups)

    def get_unhashed_block_ids(self) -> list[int]:
        """Ids of the blocks without a prefix-cache key (single group only)."""
        if len(self.blocks) != 1:
            raise ValueError("get_unhashed_block_ids() needs exactly one KV cache group")
        return [b.block_id for b in self.blocks[0] if b.block_hash is None]

    def get_unhashed_block_ids_all_groups(self) -> list[list[int]]:
        """Ids of the unhashed non-null blocks, one list per group."""
        return [[b.block_id for b in g if not b.is_null and b.block_hash is None] for g in self.blocks]

    def new_empty(self) -> "KVCacheBlocks":
        """An empty KVCacheBlocks with the same number of groups."""
        return KVCacheBlocks(tuple(() for _ in self.blocks))


def _is_waiting(status) -> bool:
    # The reference's RequestStatus or vLLM's (scenario code may pass vLLM requests): compare by name.
    return status is RequestStatus.WAITING or status is RequestStatus.PREEMPTED or \
        getattr(status, "name", "").lower() in _WAITING_STATES


def _positive_int(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"KVCacheManager.{name} must be a positive integer, got {value!r}")


class KVCacheManager:
    """Allocation, prefix-cache lookup and freeing of KV cache blocks for requests, over all groups.

    vLLM 0.33's constructor, plus one reference-only keyword: `allow_partial_hash_hits=False` keeps hits
    block-aligned where vLLM would enable fine-grained (hash-boundary) Mamba hits, for a scheduler that
    cannot split chunks at the prompt's last hash boundary or run copy-on-write copies.
    """

    def __init__(self, kv_cache_config: KVCacheConfig, max_model_len: int, scheduler_block_size: int | None = None,
                 hash_block_size: int | None = None, max_in_flight_tokens: int | None = None,
                 enable_caching: bool = True, use_eagle: bool = False, num_hash_lookahead_tokens: int = 0,
                 num_prefill_lookahead: int = 0, log_stats: bool = False, enable_kv_cache_events: bool = False,
                 dcp_world_size: int = 1, pcp_world_size: int = 1, metrics_collector=None,
                 watermark: float = 0.0, enable_mamba_shared_prefix_checkpoint: bool = False, *,
                 allow_partial_hash_hits: bool = True):
        if not isinstance(kv_cache_config, KVCacheConfig):
            raise ValueError(f"kv_cache_config must be a KVCacheConfig, got {type(kv_cache_config).__name__}")
        _positive_int("max_model_len", max_model_len)
        groups = kv_cache_config.kv_cache_groups
        sizes = [g.kv_cache_spec.block_size for g in groups]
        if scheduler_block_size is None:
            scheduler_block_size = math.lcm(*sizes) if sizes else 1
        if hash_block_size is None:
            hash_block_size = math.gcd(*sizes) if sizes else scheduler_block_size
        _positive_int("scheduler_block_size", scheduler_block_size)
        _positive_int("hash_block_size", hash_block_size)
        if not 0.0 <= watermark < 1.0:
            raise ValueError(f"KVCacheManager.watermark must be in [0, 1), got {watermark!r}")
        if groups and kv_cache_config.num_blocks < 2:
            raise ValueError(
                f"KVCacheConfig.num_blocks must be >= 2 when there are KV cache groups (block 0 is the null "
                f"block), got {kv_cache_config.num_blocks}"
            )
        for gid, g in enumerate(groups):
            g.kv_cache_spec.validate_for_model_len(max_model_len)
            if scheduler_block_size % g.kv_cache_spec.block_size:
                raise ValueError(
                    f"scheduler_block_size ({scheduler_block_size}) must be a multiple of the block_size "
                    f"({g.kv_cache_spec.block_size}) of KV cache group {gid}"
                )
        rti = kv_cache_config.prefix_cache_retention_interval
        if rti:
            if rti % scheduler_block_size:
                raise ValueError(
                    f"KVCacheConfig.prefix_cache_retention_interval ({rti}) must be a multiple of "
                    f"scheduler_block_size ({scheduler_block_size})"
                )
            if not any(isinstance(g.kv_cache_spec, (SlidingWindowSpec, MambaSpec)) for g in groups):
                raise ValueError(
                    f"KVCacheConfig.prefix_cache_retention_interval ({rti}) is set but this model has no "
                    "sliding-window or Mamba KV cache group, so retention has no effect; accepted: 0"
                )
        self.kv_cache_config = kv_cache_config
        self.max_model_len = max_model_len
        self.scheduler_block_size = scheduler_block_size
        self.hash_block_size = hash_block_size
        self.enable_caching = enable_caching
        self.use_eagle = use_eagle
        self.log_stats = log_stats
        self.num_kv_cache_groups = len(groups)
        self.watermark_blocks = int(watermark * kv_cache_config.num_blocks)
        self.coordinator = get_kv_cache_coordinator(
            kv_cache_config, max_model_len, max_in_flight_tokens, use_eagle, enable_caching, enable_kv_cache_events,
            dcp_world_size=dcp_world_size, pcp_world_size=pcp_world_size, scheduler_block_size=scheduler_block_size,
            hash_block_size=hash_block_size, metrics_collector=metrics_collector,
            num_hash_lookahead_tokens=num_hash_lookahead_tokens, num_prefill_lookahead=num_prefill_lookahead,
            allow_partial_hash_hits=allow_partial_hash_hits)
        self.block_pool = self.coordinator.block_pool
        self.enable_kv_cache_events = enable_kv_cache_events
        # (spec kind, sliding window) per group: the manager, not the pool, annotates BlockStored events
        self.kv_cache_event_metadata = tuple(
            (get_kv_cache_spec_kind(g.kv_cache_spec).value, get_kv_cache_spec_sliding_window(g.kv_cache_spec))
            for g in groups)
        self.empty_kv_cache_blocks = KVCacheBlocks(tuple(() for _ in range(self.num_kv_cache_groups)))
        self._empty_lists = tuple(() for _ in range(self.num_kv_cache_groups))
        self._managers = self.coordinator.single_type_managers
        self._skipping = self.coordinator._skipping_managers
        # Groups whose own hit may run past the request's computed prefix (HiSparse's host source keeps a
        # prefix the device groups lost); allocate_slots adopts only the part the local and external hits cover.
        self.retained_hit_group_ids = tuple(i for i, m in enumerate(self._managers) if m.retains_longer_hit)
        # Encoder-decoder models size their cross-attention groups by the encoder input: their counting and
        # allocation go through the coordinator, which knows those groups; any other model takes the
        # coordinator's decoder-only case inlined here (allocate_slots' hot path). Chosen once, here.
        if self.coordinator.cross_attention_group_ids:
            self._count_blocks_to_allocate = self.coordinator.get_num_blocks_to_allocate
            self._allocate_new_blocks = self.coordinator.allocate_new_blocks
        else:
            self._count_blocks_to_allocate = self._count_decoder_blocks_to_allocate
            self._allocate_new_blocks = self._allocate_new_decoder_blocks
        # Shared-prefix junction checkpoints: EAGLE + partial hits, and no multi-token re-prefill (which
        # would make the cached count differ from the chunk end the scheduler stops at).
        coord = self.coordinator
        self.mamba_shared_prefix_checkpoint = bool(
            enable_mamba_shared_prefix_checkpoint and coord.eagle_group_ids and coord.enable_partial_hash_hits
            and coord.num_reprefillable_tokens == 0)
        if self.mamba_shared_prefix_checkpoint:
            for m in self._managers:
                if isinstance(m, MambaManager):
                    m.shared_prefix_checkpoint = True
        # (block table map, block size, cached-block counts) per group when every group is plain attention
        # hashed at its own block size (base-class allocation and caching, no partial entries): allocate_slots
        # then has a fast path for steps that need no new block (most decode steps). None for any other layout.
        hbs = self.block_pool.hash_block_size
        self._plain_groups = _table_views(self._managers) \
            if all(type(m) in (FullAttentionManager, SlidingWindowManager) and m.block_size == hbs
                   for m in self._managers) else None
        # The same for full attention hashed at its block size plus one align-mode Mamba group: (plain
        # groups, Mamba manager), whose decode steps mostly need no block either. None for any other layout.
        self._state_decode_groups = None
        mambas = tuple(m for m in self._managers if type(m) is MambaManager)
        plain = tuple(m for m in self._managers if type(m) is FullAttentionManager and m.block_size == hbs)
        if len(mambas) == 1 and plain and len(plain) + 1 == len(self._managers) \
                and mambas[0].mamba_cache_mode == "align":
            self._state_decode_groups = (_table_views(plain), mambas[0])
        self.prefix_cache_queries = 0
        self.prefix_cache_hits = 0
        # As vLLM: a stats record only when stats are logged (the totals above are always kept).
        self.prefix_cache_stats = PrefixCacheStats() if log_stats else None

    # ---------------------------------------------------------------------------------------- properties
    @property
    def usage(self) -> float:
        """Fraction of the pool's usable blocks in use."""
        return self.block_pool.get_usage()

    def create_kv_cache_blocks(self, blocks: tuple[Sequence[KVCacheBlock], ...]) -> KVCacheBlocks:
        """Wrap per-group lists (the shared empty instance when every group is empty)."""
        for g in blocks:
            if g:
                return KVCacheBlocks(blocks)
        return self.empty_kv_cache_blocks

    # -------------------------------------------------------------------------------------------- lookup
    def prefix_cache_lookup_enabled(self, request) -> bool:
        """Whether a local prefix-cache lookup may run for this request (caching on, hit limit not 0)."""
        return self.enable_caching and prefix_cache_hit_limit(request) != 0

    def get_num_cached_tokens(self, request) -> int:
        """How many of the request's tokens the prefix cache holds now: a probe that takes no reference,
        allocates nothing and emits no event (0 when lookups are off for it)."""
        if not self.prefix_cache_lookup_enabled(request):
            return 0
        return self.coordinator.find_longest_cache_hit(request.block_hashes, request.num_tokens - 1)[1]

    def estimate_cached_tokens(self, request) -> int:
        """Tokens of the request the prefix cache covers through its own block table: per prefix-cacheable
        group the coverage of its last keyed block, the smallest over groups."""
        cached = None
        for group, blocks in zip(self.kv_cache_config.kv_cache_groups, self.get_blocks(request.request_id).blocks):
            spec = group.kv_cache_spec
            if not spec.prefix_cacheable or isinstance(spec, (CrossAttentionSpec, EncoderOnlyAttentionSpec)):
                continue
            covered = 0
            for block in reversed(blocks):
                if block.block_hash_num_tokens:
                    covered = block.block_hash_num_tokens
                    break
            cached = covered if cached is None else min(cached, covered)
        return cached or 0

    def get_computed_blocks(self, request, max_cache_hit_length: int | None = None) -> tuple[KVCacheBlocks, int, int]:
        """(hit blocks, hit tokens, shared_prefix_boundary); does not change ref counts.

        The hit is at most `request.get_max_cache_hit_length(max_cache_hit_length)` tokens."""
        if not self.prefix_cache_lookup_enabled(request):
            return self.empty_kv_cache_blocks, 0, 0
        length = _max_hit_length(request, max_cache_hit_length)
        blocks, hit, uncached = self.coordinator.find_longest_cache_hit(request.block_hashes, length)
        if hit > 0 and self.enable_kv_cache_events and getattr(request, "kv_cache_report_mode", None) == "full":
            # "full" reporting: consumers also hear of the prefix blocks this request reused
            self.coordinator.emit_cached_block_events(request, blocks)
        self.prefix_cache_queries += request.num_tokens
        self.prefix_cache_hits += hit
        return self.create_kv_cache_blocks(blocks), hit, (hit + uncached if uncached else 0)

    def get_computed_blocks_for_connector(self, request, max_cache_hit_length: int | None = None
                                          ) -> tuple[KVCacheBlocks, int, int, bool]:
        """Local lookup for a request scheduled with a KV connector: `get_computed_blocks`' triple plus
        `hit_diverged`.

        In a hybrid model with Mamba and full attention, groups' own hits can diverge (a full-attention
        tail evicted while a deeper Mamba state survives, or the reverse). The full-attention hit is then
        reported as the local prefix, with each group's own blocks, and flagged when a group lags behind
        it (the connector must supply that group's state; without external tokens the caller falls back
        to `get_computed_blocks`). A group hitting deeper than full attention, and every other model,
        gets the reconciled lookup.
        """
        coord = self.coordinator
        fa_gid = getattr(coord, "full_attention_group_id", None)
        has_mamba = any(isinstance(g.kv_cache_spec, MambaSpec) for g in self.kv_cache_config.kv_cache_groups)
        if not has_mamba or fa_gid is None:
            return *self.get_computed_blocks(request, max_cache_hit_length), False
        if not self.prefix_cache_lookup_enabled(request):
            return self.empty_kv_cache_blocks, 0, 0, False
        length = _max_hit_length(request, max_cache_hit_length)
        blocks, hits = coord.find_longest_cache_hit_per_group(request.block_hashes, length)
        num_local = hits[fa_gid]
        if any(hit > num_local for hit in hits):
            return *self.get_computed_blocks(request, max_cache_hit_length), False
        # A per-group lookup does not detect an uncached shared prefix: boundary 0.
        return self.create_kv_cache_blocks(blocks), num_local, 0, min(hits) < num_local

    # ---------------------------------------------------------------------------------------- allocation
    def allocate_slots(self, request, num_new_tokens: int, num_new_computed_tokens: int = 0,
                       new_computed_blocks: KVCacheBlocks | None = None, num_lookahead_tokens: int = 0,
                       num_external_computed_tokens: int = 0, delay_cache_blocks: bool = False,
                       num_encoder_tokens: int = 0, full_sequence_must_fit: bool = False,
                       reserved_blocks: int = 0, has_scheduled_reqs: bool = True,
                       skip_zeroing_group_ids: Sequence[int] = ()) -> KVCacheBlocks | None:
        """Allocate blocks for `num_new_tokens` (+ lookahead) after adopting hits and external tokens.

        Returns the newly allocated blocks, or None (and nothing but out-of-window frees changed) when they
        do not fit.
        """
        if num_new_tokens == 0 and num_new_computed_tokens == 0 and num_external_computed_tokens == 0:
            raise ValueError("num_new_tokens must be greater than 0 when there are no computed tokens to adopt")
        if num_new_tokens < 0 or num_new_computed_tokens < 0 or num_lookahead_tokens < 0 \
                or num_external_computed_tokens < 0:
            raise ValueError(
                "allocate_slots: num_new_tokens, num_new_computed_tokens, num_lookahead_tokens and "
                f"num_external_computed_tokens must be >= 0, got {num_new_tokens}, {num_new_computed_tokens}, "
                f"{num_lookahead_tokens}, {num_external_computed_tokens}"
            )
        request_id = request.request_id
        max_len = self.max_model_len
        local = request.num_computed_tokens + num_new_computed_tokens
        if local + num_external_computed_tokens + num_new_tokens > max_len:
            raise ValueError(
                f"allocate_slots: num_new_tokens ({num_new_tokens}) after {local + num_external_computed_tokens} "
                f"computed tokens exceeds max_model_len ({max_len}) for request {request_id!r}"
            )
        total = local + num_external_computed_tokens
        need_slots = total + num_new_tokens + num_lookahead_tokens
        if need_slots > max_len:
            need_slots = max_len
        pool = self.block_pool
        plain, state = self._plain_groups, self._state_decode_groups
        if (plain is not None or state is not None) and new_computed_blocks is None \
                and not num_new_computed_tokens and not num_external_computed_tokens and not full_sequence_must_fit:
            # Every table already covers the new slots: nothing to allocate or adopt (what the general path
            # below computes as needed == 0), only window skipping and the newly full blocks.
            if plain is not None:
                nothing = _tables_cover(plain, request_id, need_slots)
            else:
                nothing = num_new_tokens == 1 and _tables_cover(state[0], request_id, need_slots) \
                    and state[1].step_allocates_nothing(request_id, 1, total + 1)
            if nothing:
                return self._allocate_nothing(request, total, num_new_tokens, reserved_blocks,
                                              has_scheduled_reqs, delay_cache_blocks)
        hits = self._empty_lists if new_computed_blocks is None else new_computed_blocks.blocks
        if self.retained_hit_group_ids and new_computed_blocks is not None:
            # A longer retained hit past the adopted prefix would hold blocks for tokens nobody computes.
            reused = num_new_computed_tokens + num_external_computed_tokens
            hits = list(hits)
            for i in self.retained_hit_group_ids:
                hits[i] = hits[i][:-(-reused // self._managers[i].block_size)]
            hits = tuple(hits)
        adopting = num_external_computed_tokens > 0 or any(hits)

        free = pool.free_block_queue.num_free_blocks
        watermark = 0
        if self.watermark_blocks and has_scheduled_reqs and _is_waiting(request.status):
            watermark = self.watermark_blocks
        main_model = total + num_new_tokens
        coordinator = self.coordinator
        # The scheduler's prefill boundary (a resumed request replays its outputs as prefill too).
        prefill_end = coordinator.checkpoint_prefill_end(max(request.num_prompt_tokens, request.num_tokens - 1))
        if full_sequence_must_fit:
            # The whole sequence must fit in the free pool; `reserved_blocks` is held back for the current
            # chunk only (below), not from this check.
            whole = min(request.num_tokens, max_len)
            needed_whole = self._count_blocks_to_allocate(request_id, whole, hits, num_encoder_tokens, total, local,
                                                          whole, True, prefill_end)
            if needed_whole + watermark > free:
                return None

        for m in self._skipping:
            m.remove_skipped_blocks(request_id, max(0, total - request.num_in_flight_tokens),
                                    request.num_prompt_tokens)
        free = pool.free_block_queue.num_free_blocks - reserved_blocks - watermark
        needed = self._count_blocks_to_allocate(request_id, need_slots, hits, num_encoder_tokens, total, local,
                                                main_model, False, prefill_end)
        if needed > free:
            return None

        if adopting:
            self.coordinator.allocate_new_computed_blocks(request_id, hits, local, num_external_computed_tokens,
                                                          skip_zeroing_group_ids)
        new_blocks = self._allocate_new_blocks(request_id, need_slots, main_model, num_encoder_tokens)

        if self.enable_caching and not delay_cache_blocks:
            # Only finalized tokens are cached (not drafts that may be rejected).
            coordinator.cache_blocks(request, min(total + num_new_tokens, request.num_tokens))
        for g in new_blocks:
            if g:
                return KVCacheBlocks(new_blocks)
        return self.empty_kv_cache_blocks

    def _count_decoder_blocks_to_allocate(self, request_id: str, num_tokens: int,
                                          new_computed_blocks: Sequence[Sequence[KVCacheBlock]],
                                          num_encoder_tokens: int, total_computed_tokens: int,
                                          num_local_computed_tokens: int, num_tokens_main_model: int,
                                          apply_admission_cap: bool, prefill_end: int) -> int:
        """The coordinator's `get_num_blocks_to_allocate` for a model without cross-attention groups (no group
        is sized by `num_encoder_tokens`), without its per-call setup: `prefill_end` is already the
        checkpoint prefill end."""
        needed = 0
        for i, m in enumerate(self._managers):
            needed += m.get_num_blocks_to_allocate(request_id, num_tokens, new_computed_blocks[i],
                                                   total_computed_tokens, num_local_computed_tokens,
                                                   num_tokens_main_model, apply_admission_cap, prefill_end)
        return needed

    def _allocate_new_decoder_blocks(self, request_id: str, num_tokens: int, num_tokens_main_model: int,
                                     num_encoder_tokens: int) -> tuple[list[KVCacheBlock], ...]:
        """The coordinator's `allocate_new_blocks` for a model without cross-attention groups."""
        return tuple([m.allocate_new_blocks(request_id, num_tokens, num_tokens_main_model) for m in self._managers])

    def truncate_computed_blocks(self, blocks: KVCacheBlocks, num_computed_tokens: int) -> KVCacheBlocks:
        """A lookup result cut at `num_computed_tokens` (a multiple of every cacheable group's block size).

        Every group must cover the endpoint except Mamba, whose hit may end below it (an external hit can
        supply the final state); scratch groups never carry hits. Pure slicing: no ref count changes.
        """
        out: list[list[KVCacheBlock]] = []
        for group_blocks, m, group in zip(blocks.blocks, self._managers, self.kv_cache_config.kv_cache_groups):
            if not group.kv_cache_spec.prefix_cacheable:
                assert not group_blocks, "a scratch group never carries prefix-cache hits"
                out.append([])
                continue
            assert num_computed_tokens % m.block_size == 0, \
                f"num_computed_tokens ({num_computed_tokens}) must be a multiple of group " \
                f"{m.kv_cache_group_id}'s block_size ({m.block_size})"
            n = num_computed_tokens // m.block_size
            if isinstance(m, MambaManager):
                n = min(n, len(group_blocks))
            else:
                assert n <= len(group_blocks), \
                    f"group {m.kv_cache_group_id} hit {len(group_blocks)} blocks, fewer than the {n} to keep"
            out.append(list(group_blocks[:n]))
        return self.create_kv_cache_blocks(tuple(out))

    def _allocate_nothing(self, request, total: int, num_new_tokens: int, reserved_blocks: int,
                          has_scheduled_reqs: bool, delay_cache_blocks: bool) -> KVCacheBlocks | None:
        """allocate_slots for a step whose tables already cover every new slot (no group allocates): the same
        skipping, free-pool check and caching as the general path, without the per-group counting."""
        request_id = request.request_id
        for m in self._skipping:
            m.remove_skipped_blocks(request_id, max(0, total - request.num_in_flight_tokens),
                                    request.num_prompt_tokens)
        free = self.block_pool.free_block_queue.num_free_blocks - reserved_blocks
        if self.watermark_blocks and has_scheduled_reqs and _is_waiting(request.status):
            free -= self.watermark_blocks
        if free < 0:
            return None
        if self.enable_caching and not delay_cache_blocks:
            n = min(total + num_new_tokens, request.num_tokens)
            if self._plain_groups is None:
                self.coordinator.cache_blocks(request, n)
                return self.empty_kv_cache_blocks
            # The coordinator caches at most `n` tokens per group: skip it unless a block filled up since.
            for _, bs, cached in self._plain_groups:
                if n // bs > cached.get(request_id, 0):
                    self.coordinator.cache_blocks(request, n)
                    break
        return self.empty_kv_cache_blocks

    def cache_blocks(self, request, num_computed_tokens: int) -> None:
        """Register the request's full blocks up to `num_computed_tokens` in the prefix cache."""
        if self.enable_caching:
            self.coordinator.cache_blocks(request, num_computed_tokens)

    def remove_skipped_blocks(self, request_id: str, processed_computed_tokens: int,
                              num_prompt_tokens: int | None = None) -> None:
        """Null and free the blocks that no group needs after `processed_computed_tokens`."""
        self.coordinator.remove_skipped_blocks(request_id, processed_computed_tokens, num_prompt_tokens)

    # ------------------------------------------------------------------------------------------- freeing
    def free(self, request) -> None:
        """Release every block of the request (per group, tail first). A request holding no blocks (e.g.
        aborted while waiting) is a no-op, as in vLLM."""
        self.coordinator.free(request.request_id)

    def pop_blocks_for_free(self, request) -> list[KVCacheBlock]:
        """Detach the request's blocks for a deferred free, in freeing order (each group tail first)."""
        return self.coordinator.pop_blocks_for_free(request.request_id)

    def reset_prefix_cache(self) -> bool:
        """Clear the prefix cache (refused while any block is in use)."""
        if not self.block_pool.reset_prefix_cache():
            return False
        if self.prefix_cache_stats is not None:
            self.prefix_cache_stats.reset = True
        return True

    # ----------------------------------------------------------------------------- scheduler bookkeeping
    def make_prefix_cache_stats(self) -> PrefixCacheStats | None:
        """The lookups recorded since the last call (a fresh record starts), or None without log_stats."""
        if not self.log_stats:
            return None
        stats, self.prefix_cache_stats = self.prefix_cache_stats, PrefixCacheStats()
        return stats

    def record_prefix_cache_stats(self, request, num_hits: int) -> None:
        """Record one scheduled request's lookup (a request that skipped the lookup is not counted)."""
        if self.log_stats and self.prefix_cache_lookup_enabled(request):
            self.prefix_cache_stats.record(num_tokens=request.num_tokens, num_hits=num_hits,
                                           preempted=request.num_preemptions > 0)

    def get_block_ids_for_computed_tokens(self, request_id: str, num_computed_tokens: int) -> tuple[list[int], ...]:
        """The request's block ids per group, attention groups cut to the blocks covering its computed
        tokens (state, cross-attention and encoder-only groups whole)."""
        clipped = []
        for group, ids in zip(self.kv_cache_config.kv_cache_groups, self.get_block_ids(request_id)):
            spec = group.kv_cache_spec
            if isinstance(spec, AttentionSpec) and not isinstance(spec, (CrossAttentionSpec, EncoderOnlyAttentionSpec)):
                ids = ids[:-(-num_computed_tokens // spec.block_size)]
            clipped.append(ids)
        return tuple(clipped)

    def record_blocks_for_zeroing(self, request_id: str, start_token: int) -> None:
        """Record the request's blocks from `start_token` (block-aligned) for zeroing again in every group
        the worker zeroes, e.g. blocks a failed async KV load left unwritten."""
        for m in self._managers:
            m.record_blocks_for_zeroing(request_id, start_token)

    def evict_blocks(self, block_ids) -> None:
        """Drop these blocks from the prefix cache."""
        self.block_pool.evict_blocks(block_ids)

    def take_events(self) -> list:
        """Drain KV cache events; each BlockStored gets its group's spec kind and sliding window.

        An event naming a group this config lacks is returned unannotated, with a warning.
        """
        events = self.block_pool.take_events()
        metadata = self.kv_cache_event_metadata
        for event in events:
            gid = getattr(event, "group_idx", None)
            if gid is None or not hasattr(event, "kv_cache_spec_kind"):
                continue  # BlockRemoved / AllBlocksCleared carry no spec metadata
            if not 0 <= gid < len(metadata):
                logger.warning("Group index `%s` not in KV cache metadata", gid)
                continue
            event.kv_cache_spec_kind, event.kv_cache_spec_sliding_window = metadata[gid]
        return events

    def new_step_starts(self) -> None:
        """Start of a scheduling step (releases Mamba same-step deferrals)."""
        self.coordinator.new_step_starts()

    # ------------------------------------------------------------------------------------------- queries
    def get_blocks(self, request_id: str) -> KVCacheBlocks:
        """The request's full block tables (null entries included)."""
        return self.create_kv_cache_blocks(self.coordinator.get_blocks(request_id))

    def get_block_ids(self, request_id: str) -> tuple[list[int], ...]:
        """The request's block ids, one list per group (null block = 0)."""
        return tuple([b.block_id for b in g] for g in self.coordinator.get_blocks(request_id))

    def get_num_common_prefix_blocks(self, running_request_id: str) -> list[int]:
        """Deprecated in vLLM 0.33: zeros, one per group."""
        return [0] * self.num_kv_cache_groups

    # ---------------------------------------------------------------------------- connector hand-offs
    def take_kv_cache_block_copies(self) -> tuple[list[KVCacheBlockCopy], list[KVCacheBlock]]:
        """Drain the queued copy-on-write copies: (copies for the worker, their endpoint blocks). Each
        endpoint still holds the reference taken for the copy; the caller frees them once it has run."""
        pairs = [pair for m in self._managers for pair in m.take_pending_cow_copies()]
        copies = [KVCacheBlockCopy(src_block_id=src.block_id, dst_block_id=dst.block_id) for src, dst in pairs]
        return copies, [block for pair in pairs for block in pair]

    def take_boundary_state_offloads(self) -> dict[str, list[tuple[int, int, int]]]:
        """Drain this step's boundary-state offers: {request id: [(group id, block id, boundary tokens)]}.

        Mamba "align" groups offer each committed boundary state and, after a sub-block partial hit, the
        copy of the prompt's last boundary state; a connector reads exactly these blocks (never by table
        position) and offloads them so a later request can hit that prefix. Empty for other groups.
        """
        offloads: dict[str, list[tuple[int, int, int]]] = {}
        for m in self._managers:
            for request_id, group_id, block, boundary_tokens in m.take_pending_boundary_state_offloads():
                offloads.setdefault(request_id, []).append((group_id, block.block_id, boundary_tokens))
        return offloads

    def finalize_partial_tail_offloads(self, request) -> list[tuple[int, int, int]]:
        """At a request's finish, its own partial-tail states still safe to offload (nothing computed or
        in flight past the boundary): [(group id, block id, boundary tokens)]. The connector pins them
        before the request's blocks are freed."""
        out = []
        for m in self._managers:
            tail = m.finalize_partial_tail_offload(request.request_id, request.num_computed_tokens,
                                                   getattr(request, "num_in_flight_tokens", 0))
            if tail is not None:
                group_id, block, boundary_tokens = tail
                out.append((group_id, block.block_id, boundary_tokens))
        return out

    def take_new_block_ids(self) -> list[int]:
        """Ids of the blocks the worker must zero, recorded since the last call (groups in order): new
        attention blocks when the cache needs zeroing (`KVCacheConfig.needs_kv_cache_zeroing`: Mamba
        layers or mixed precision) and blocks re-recorded by `record_blocks_for_zeroing`."""
        return [i for m in self._managers for i in m.take_new_block_ids()]


def _table_views(managers) -> tuple:
    """(block table map, block size, cached-block counts) per manager: what the fast paths read."""
    return tuple((m.req_to_blocks, m.block_size, m.num_cached_block) for m in managers)


def _tables_cover(groups, request_id: str, num_slots: int) -> bool:
    """Whether the request's table in every (block table map, block size, cached counts) group already
    holds `num_slots` slots."""
    for tables, bs, _ in groups:
        table = tables.get(request_id)
        if not table or len(table) * bs < num_slots:
            return False
    return True
