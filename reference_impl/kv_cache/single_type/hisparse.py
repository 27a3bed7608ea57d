"""HiSparse's managers: the host source group, the hot region and the resident pages (`bind_hisparse_host_pool`).

HiSparse keeps a sparse-MLA model's source KV in a host pool (the "source" group, role HISPARSE_SOURCE)
and on the device only: an indexer group (ordinary full attention), resident copies of recent source
pages (HiSparseResidentSpec) and a per-request hot region (HiSparseHotSpec). vLLM's HiSparseCoordinator
(outside v1/core; the reference's is `hisparse_coordinator`) drives spills, residency changes and host
publication; it binds itself to these managers through their `coordinator` attribute. With none bound,
a source page counts as durable once computed, so it is published at once.
"""

from __future__ import annotations

from collections.abc import Sequence

from reference_impl.kv_cache.block_pool import BlockPool, KVCacheBlock, SharedEventQueueBlockPool
from reference_impl.kv_cache.kv_cache_interface import (
    HiSparseHotSpec,
    HiSparseResidentSpec,
    KVCacheGroupRole,
    KVCacheSpec,
    cdiv,
)
from reference_impl.kv_cache.kv_cache_utils import gc_untrack, trim_null_head
from reference_impl.kv_cache.kv_events import MEDIUM_CPU
from reference_impl.kv_cache.release import RESERVES_IMPORT_PAGES, follows
from reference_impl.kv_cache.single_type.base import SingleTypeKVCacheManager, _NoPrefixCacheMixin
from reference_impl.kv_cache.single_type.full_attention import FullAttentionManager

__all__ = ["HiSparseSourceManager", "HiSparseHotManager", "HiSparseResidentManager", "bind_hisparse_host_pool"]


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

