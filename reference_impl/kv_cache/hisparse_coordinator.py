"""HiSparse's scheduler-side coordinator (vLLM: `vllm.v1.hisparse.coordinator`).

HiSparse keeps a sparse-MLA model's source KV in a host pool (the source group) and only a window of it
on the device (the resident groups), plus a small per-request hot region the worker reads host pages
through. The coordinator is the one place that decides where each page lives:

* write-back: every sealed device page is copied to its host block (a *spill*), planned here and run by
  the worker; a page whose copy finished is *clean*;
* residency: once a request can read from the host (it holds its hot region), its clean pages are
  *unpinned*: their device blocks count as free in the device pool but keep being read until the pool
  hands them out again (`BlockPool.unpin_blocks`), at which point the page becomes host-only;
* publication: host pages enter the host pool's prefix cache only once their host copy is durable, so
  a prefix hit never reads a page the worker has not written;
* copies: the device blocks of published pages stay indexed by the host page's hash while still
  readable, so a later hit on that prefix can read them instead of the host.

The coordinator binds itself to the HiSparse managers (their `coordinator` attribute); the managers call
back into it on prefix hits, imports, publication and free.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from reference_impl.kv_cache.block_pool import BlockPool
from reference_impl.kv_cache.hisparse_types import (
    ACTIVE_TAIL_PAGES,
    SparseKVOffloadCommand,
    SparseKVPageTransfer,
    SparseKVResidencyUpdate,
    SparseKVRowMirror,
)
from reference_impl.kv_cache.kv_cache_interface import (
    HiSparseResidentSpec,
    KVCacheConfig,
    cdiv,
)
from reference_impl.kv_cache.kv_cache_utils import (
    BlockHashWithGroupId,
    KVCacheBlock,
    KVCacheBlockCopy,
)
from reference_impl.kv_cache.single_type_kv_cache_manager import (
    HiSparseHotManager,
    HiSparseResidentManager,
    HiSparseSourceManager,
    SingleTypeKVCacheManager,
)

if TYPE_CHECKING:
    from reference_impl.kv_cache.kv_cache_manager import KVCacheManager

__all__ = ["HiSparseCoordinator", "get_hisparse_coordinator"]

PageKey = tuple[str, int]


@dataclass
class _PendingPublication:
    """A `cache_blocks` call on the source group that waits for host copies to become durable."""

    request: object
    num_computed_tokens: int
    num_pages: int
    retention_interval: int | None
    replay_boundaries: Sequence[int]
    # Set when the request is freed while copies are still running: the host blocks it held, kept
    # referenced until the copies finish and the durable prefix can be published.
    detached_blocks: list[KVCacheBlock] | None = None
    num_cached_blocks: int = 0


@dataclass
class _HiSparseRequestState:
    """Where each of one request's resident pages stands.

    A page is *dirty* (device copy only), then *clean* (`valid_pages`: the host copy is complete), then
    possibly *unpinned* (`unpinned_pages`: clean, its device reference released, still read until the
    pool reuses the block). `pinned_clean` holds clean pages that still keep their reference because the
    request cannot read from the host yet.
    """

    valid_pages: set[int] = field(default_factory=set)
    #: Length (in pages) of the leading run of clean pages: what may be published.
    ready_prefix_pages: int = 0
    #: page -> id of the transfer in flight for it.
    pending_pages: dict[int, int] = field(default_factory=dict)
    publication: _PendingPublication | None = None
    #: Pages whose device copies are already indexed in `HiSparseCoordinator.copies`.
    copies_recorded_blocks: int = 0
    pinned_clean: set[int] = field(default_factory=set)
    unpinned_pages: set[int] = field(default_factory=set)
    #: Prefix-hit pages that may adopt surviving device copies at the next residency pass (not earlier:
    #: adopting takes blocks out of the free pool the admitting allocation counted on).
    pages_to_adopt: int = 0
    #: The worker knows this request's residency for pages < synced_pages, except `stale_pages`.
    synced_pages: int = 0
    stale_pages: set[int] = field(default_factory=set)


@dataclass
class _PendingSpill:
    """A planned page transfer, with the blocks it keeps referenced until every worker ran it."""

    transfer_id: int
    page: PageKey
    request_state: _HiSparseRequestState
    host_block: KVCacheBlock
    resident_blocks: tuple[KVCacheBlock, ...]
    restore: bool = False
    expected_worker_completions: int = 0
    worker_completions: int = 0
    enqueue_applied: bool = False


class HiSparseCoordinator:
    """Owns HiSparse's host publication, write-back spills and device residency for one KV cache manager.

    Built over the manager's single-type managers: the source group (`host_manager`, over the host pool),
    the resident groups (`resident_managers`) and the hot groups (`hot_managers`). The device block table
    stays append-only; residency changes reach the worker through `take_residency_updates`.
    """

    def __init__(self, kv_cache_config: KVCacheConfig, managers: Sequence[SingleTypeKVCacheManager],
                 max_model_len: int, *, num_reprefillable_tokens: int = 0, import_step_tokens: int = 0) -> None:
        self.managers = tuple(managers)
        #: Tokens an imported request needs beyond its sequence: the spec-decode step it runs on resume.
        self.import_step_tokens = import_step_tokens
        self.max_model_len = max_model_len
        self.num_reprefillable_tokens = num_reprefillable_tokens
        groups = kv_cache_config.kv_cache_groups
        self.resident_managers: tuple[HiSparseResidentManager, ...] = ()
        self.hot_managers: tuple[HiSparseHotManager, ...] = ()
        self.host_manager: HiSparseSourceManager | None = None
        self.host_group_id: int | None = None
        resident, hot = [], []
        for group_id, (group, manager) in enumerate(zip(groups, self.managers)):
            if isinstance(group.kv_cache_spec, HiSparseResidentSpec) and \
                    not isinstance(manager, HiSparseResidentManager):
                raise TypeError(f"HiSparse resident specs require resident cache managers: group {group_id} "
                                f"has a HiSparseResidentSpec but a {type(manager).__name__}")
            if isinstance(manager, HiSparseResidentManager):
                resident.append(manager)
            elif isinstance(manager, HiSparseHotManager):
                hot.append(manager)
            elif isinstance(manager, HiSparseSourceManager):
                if self.host_manager is not None:
                    raise ValueError(f"Only one HiSparse host group is supported; groups {self.host_group_id} "
                                     f"and {group_id} are both sources")
                if kv_cache_config.hisparse_host_num_blocks is None:
                    raise ValueError("HiSparse host group needs host capacity: "
                                     "KVCacheConfig.hisparse_host_num_blocks is None")
                self.host_manager, self.host_group_id = manager, group_id
                if not manager.host_pool_bound:
                    manager.bind_host_pool(kv_cache_config.hisparse_host_num_blocks)
            else:
                continue
            manager.coordinator = self
        self.resident_managers, self.hot_managers = tuple(resident), tuple(hot)
        self.has_host_cache = self.host_manager is not None
        self.gpu_pool: BlockPool | None = None
        self.transition_watermark = 0
        self.max_spill_pages = 0
        if self.resident_managers:
            if self.host_manager is None:
                raise ValueError("HiSparse resident groups need a HiSparse host (source) group")
            # One spill per page of a max-length request is the most a step ever needs.
            self.max_spill_pages = max_model_len // self.resident_managers[0].block_size
            self.gpu_pool = self.resident_managers[0].block_pool
            # Below this many free device blocks a request starts reading from the host, so admissions
            # find reusable (unpinned) pages rather than pinned ones.
            hot_cost = sum(m.blocks_per_request for m in self.hot_managers)
            self.transition_watermark = max(hot_cost, kv_cache_config.num_blocks // 10)

        self.request_states: dict[str, _HiSparseRequestState] = {}
        self.spills_to_send: list[SparseKVPageTransfer] = []
        self.pending_spills: dict[int, _PendingSpill] = {}
        self.next_spill_id = 0
        #: Published host page hash -> the device blocks (one per resident group) still holding it.
        self.copies: dict[BlockHashWithGroupId, tuple[KVCacheBlock, ...]] = {}
        self._copy_by_block: dict[int, BlockHashWithGroupId] = {}
        # Unpinned device block id -> the (request, page) pairs still reading it.
        self._owners: dict[int, set[PageKey]] = {}
        # Host copy-on-write endpoints handed to the worker, by destination block id, until it ran them.
        self._retained_copies: dict[int, tuple[KVCacheBlock, KVCacheBlock]] = {}
        # request -> prefix length (tokens) an external load is still writing into host pages.
        self._pending_imports: dict[str, int] = {}
        # request -> host pages an admitted import needs for its whole sequence, and of those the pages it
        # has yet to allocate (reserved against later import admissions; see `size_import`).
        self._import_pages: dict[str, int] = {}
        self._import_reservations: dict[str, int] = {}
        self._num_reserved_import_pages = 0
        # (request, pages) the admission check last sized; kept only if that request's import is recorded.
        self._sized_import: tuple[str, int] | None = None
        # Requests whose resident pages were all device-backed at the last scan; a page only turns
        # host-only on a prefix hit, an import or a reuse of an unpinned block, which all clear this.
        self._resident_requests: set[str] = set()

    # ------------------------------------------------------------------------------------ small helpers
    def _get_request_state(self, request_id: str) -> _HiSparseRequestState:
        state = self.request_states.get(request_id)
        if state is None:
            state = self.request_states[request_id] = _HiSparseRequestState()
        return state

    def _device_pages(self, request_id: str, page_idx: int) -> list[KVCacheBlock] | None:
        """The device block of `page_idx` in every resident group, or None if some group lacks it."""
        blocks = []
        for manager in self.resident_managers:
            block = manager.get_resident_page(request_id, page_idx)
            if block is None:
                return None
            blocks.append(block)
        return blocks

    def get_host_block_pool(self) -> BlockPool | None:
        """The host pool the source group allocates from (None without a source group)."""
        return self.host_manager.block_pool if self.host_manager is not None else None

    # ----------------------------------------------------------------------------- manager call-backs
    def commit_computed_blocks(self, request_id: str, num_host_pages: int) -> None:
        """A new request took a prefix hit on `num_host_pages` published host pages: they are clean."""
        self._resident_requests.discard(request_id)
        if not self.resident_managers or self.host_manager is None:
            return
        num_host_pages = min(num_host_pages, len(self.host_manager.req_to_blocks.get(request_id, ())))
        if num_host_pages <= 0:
            return
        state = self._get_request_state(request_id)
        state.valid_pages.update(range(num_host_pages))
        state.ready_prefix_pages = max(state.ready_prefix_pages, num_host_pages)
        state.pages_to_adopt = max(state.pages_to_adopt, num_host_pages)
        state.copies_recorded_blocks = max(state.copies_recorded_blocks, num_host_pages)

    def record_pending_host_import(self, request_id: str, num_tokens: int) -> None:
        """An external load is writing the first `num_tokens` tokens into the request's host pages; an
        admission sized for this request (`size_import`) now holds its pages."""
        self._resident_requests.discard(request_id)
        self._pending_imports[request_id] = num_tokens
        if self._sized_import is not None and self._sized_import[0] == request_id:
            self._import_pages[request_id] = self._sized_import[1]
        self._sized_import = None

    def size_import(self, request_id: str, num_pages: int) -> None:
        """The admission check sized an import at `num_pages` host pages for its whole sequence. The
        allocation that follows in the same `allocate_slots` call records it (`record_pending_host_import`);
        a size whose admission was refused is dropped at the next recorded import."""
        self._sized_import = (request_id, num_pages)

    @property
    def reserved_import_pages(self) -> int:
        """Host pages admitted imports still need for their sequence and have not allocated."""
        return self._num_reserved_import_pages

    def update_import_reservation(self, request_id: str, num_held_pages: int) -> None:
        """The request now holds `num_held_pages` host pages: reserve the rest of its import's pages (none
        once it holds them all, when it stops being tracked)."""
        pages = self._import_pages.get(request_id)
        if pages is None:
            return
        self._set_import_reservation(request_id, max(pages - num_held_pages, 0))
        if num_held_pages >= pages:
            del self._import_pages[request_id]

    def _set_import_reservation(self, request_id: str, num_pages: int) -> None:
        self._num_reserved_import_pages += num_pages - self._import_reservations.pop(request_id, 0)
        if num_pages > 0:
            self._import_reservations[request_id] = num_pages

    def finish_host_import(self, request_id: str, *, failed: bool) -> None:
        """The external load for the request ended; on success its pages become clean and publishable."""
        num_tokens = self._pending_imports.pop(request_id, None)
        if num_tokens is not None and not failed:
            self.complete_host_import(request_id, num_tokens)

    def complete_host_import(self, request_id: str, num_computed_tokens: int) -> None:
        """Mark the full imported pages clean, restore the last imported page to its writable device
        block, and publish what is durable. A partial last page is not trusted (stale host rows)."""
        if not self.resident_managers:
            return
        block_size = self.resident_managers[0].block_size
        num_pages = num_computed_tokens // block_size
        state = self._get_request_state(request_id)
        state.valid_pages = set(range(num_pages))
        state.ready_prefix_pages = num_pages
        if num_computed_tokens > 0:
            self._plan_page_transfer(request_id, (num_computed_tokens - 1) // block_size,
                                     after_forward=False, restore=True)
        self._publish_host_blocks_if_ready(request_id)

    # ------------------------------------------------------------------------------- host copy-on-write
    def take_host_block_copies(self) -> tuple[KVCacheBlockCopy, ...]:
        """Drain the source group's host copy-on-write work for the worker; both endpoints stay
        referenced until `release_completed_host_copies` reports the copy done."""
        if self.host_manager is None:
            return ()
        pairs = self.host_manager.take_host_cow_copies()
        out = []
        for src, dst in pairs:
            self._retained_copies[dst.block_id] = (src, dst)
            out.append(KVCacheBlockCopy(src_block_id=src.block_id, dst_block_id=dst.block_id))
        return tuple(out)

    def release_completed_host_copies(self, dst_block_ids: Iterable[int]) -> None:
        """Release both endpoints of each host copy the worker reports having run."""
        released: list[KVCacheBlock] = []
        for dst_id in dst_block_ids:
            pair = self._retained_copies.pop(dst_id, None)
            if pair is not None:
                released.extend(pair)
        if released:
            self.host_manager.block_pool.free_blocks(list(reversed(released)))

    # --------------------------------------------------------------------- device copies of host pages
    def _adopt_copies(self, request_id: str, state: _HiSparseRequestState,
                      host_blocks: Sequence[KVCacheBlock]) -> None:
        """Read host-only prefix pages from surviving device copies of the same content, page by page."""
        if not self.copies:
            return
        for page_idx, host_block in enumerate(host_blocks):
            if host_block.is_null or host_block.block_hash is None:
                continue
            blocks = self.copies.get(host_block.block_hash)
            if blocks is None:
                continue
            for manager, block in zip(self.resident_managers, blocks):
                if manager.adopt_resident_page(request_id, page_idx, block):
                    manager.block_pool.touch([block])
                    state.pinned_clean.add(page_idx)
                    if page_idx < state.synced_pages:
                        state.stale_pages.add(page_idx)

    def _record_copies(self, request_id: str, num_computed_tokens: int) -> None:
        """Index the device copies of the request's newly published host pages."""
        if not self.resident_managers:
            return
        host_blocks = self.host_manager.req_to_blocks.get(request_id)
        if not host_blocks:
            return
        state = self._get_request_state(request_id)
        upto = min(num_computed_tokens // self.host_manager.block_size, len(host_blocks))
        for page_idx in range(state.copies_recorded_blocks, upto):
            # A page with a transfer in flight (an import's tail restore) has no readable device copy
            # yet: the transfer's completion records it.
            if page_idx in state.pending_pages:
                continue
            self._record_copy(request_id, page_idx, host_blocks[page_idx])
        state.copies_recorded_blocks = max(state.copies_recorded_blocks, upto)

    def _record_copy(self, request_id: str, page_idx: int, host_block: KVCacheBlock) -> None:
        if host_block.is_null or host_block.block_hash is None:
            return
        blocks = self._device_pages(request_id, page_idx)
        if blocks is None:
            return
        key = host_block.block_hash
        self._drop_copy(key)
        self.copies[key] = tuple(blocks)
        for block in blocks:
            self._copy_by_block[block.block_id] = key

    def _drop_copy(self, key: BlockHashWithGroupId) -> None:
        for block in self.copies.pop(key, ()):
            self._copy_by_block.pop(block.block_id, None)

    # ------------------------------------------------------------------------------------- residency
    def _can_read_from_host(self, request_id: str) -> bool:
        """Whether the request holds its hot region, so its device pages may be dropped under it."""
        return bool(self.hot_managers) and all(m.has_hot(request_id) for m in self.hot_managers)

    def _fills_admission_window(self, request_id: str) -> bool:
        """Whether the request already holds as many resident pages as admission reserved for it: pinning
        more would let a chunked prefill outgrow the pool it was admitted into."""
        for manager in self.resident_managers:
            cap = manager.max_admission_blocks_per_request
            if cap is not None and len(manager.req_to_blocks.get(request_id, ())) >= cap:
                return True
        return False

    def _releasable_page_blocks(self, request_id: str, page_idx: int) -> list[KVCacheBlock] | None:
        """The page's device blocks, unless it is host-only or within the in-flight tail."""
        for manager in self.resident_managers:
            if page_idx >= len(manager.req_to_blocks.get(request_id, ())) - ACTIVE_TAIL_PAGES:
                return None
        return self._device_pages(request_id, page_idx)

    def _unpin_page(self, request_id: str, state: _HiSparseRequestState, page_idx: int) -> bool:
        if page_idx in state.pending_pages or page_idx not in state.valid_pages:
            return False
        blocks = self._releasable_page_blocks(request_id, page_idx)
        if blocks is None:
            return False
        for manager, block in zip(self.resident_managers, blocks):
            self._owners.setdefault(block.block_id, set()).add((request_id, page_idx))
            manager.block_pool.unpin_blocks([block], self._on_block_reused)
        state.pinned_clean.discard(page_idx)
        state.unpinned_pages.add(page_idx)
        return True

    def _unpin_clean_pages(self, request_id: str, state: _HiSparseRequestState) -> None:
        # Newest first: the free queue then hands out a prefix's tail before its head, keeping the
        # longest reusable prefix of copies alive.
        for page_idx in sorted(state.pinned_clean, reverse=True):
            self._unpin_page(request_id, state, page_idx)

    def _page_became_clean(self, request_id: str, state: _HiSparseRequestState, page_idx: int) -> None:
        state.pinned_clean.add(page_idx)
        if self._can_read_from_host(request_id):
            self._unpin_page(request_id, state, page_idx)

    def _on_block_reused(self, block: KVCacheBlock) -> None:
        """The device pool handed out an unpinned block: every page read from it becomes host-only."""
        key = self._copy_by_block.get(block.block_id)
        if key is not None:
            self._drop_copy(key)
        for request_id, page_idx in self._owners.pop(block.block_id, ()):
            self._lose_page(request_id, page_idx)

    def _lose_page(self, request_id: str, page_idx: int) -> None:
        self._resident_requests.discard(request_id)
        state = self.request_states.get(request_id)
        if state is None:
            return
        for manager in self.resident_managers:
            block = manager.drop_resident_page(request_id, page_idx)
            if block is not None:
                owners = self._owners.get(block.block_id)
                if owners is not None:
                    owners.discard((request_id, page_idx))
        state.unpinned_pages.discard(page_idx)
        if page_idx < state.synced_pages:
            state.stale_pages.add(page_idx)
        # The request now has host-only history and needs its hot region to read it.
        for hot in self.hot_managers:
            hot.require_hot(request_id)

    def update_residency(self, request_id: str) -> None:
        """Per-step residency policy for one scheduled request.

        A request that can read from the host releases every clean page (but the in-flight tail). One that
        cannot keeps its pages pinned until the device pool runs low or it fills its admission window, and
        then asks for its hot region; its pages are released on a later pass, once the region is held.
        """
        if not self.resident_managers:
            return
        state = self._get_request_state(request_id)
        if state.pages_to_adopt:
            host_blocks = self.host_manager.req_to_blocks.get(request_id, [])
            self._adopt_copies(request_id, state, host_blocks[:state.pages_to_adopt])
            state.pages_to_adopt = 0
        if self._can_read_from_host(request_id):
            self._unpin_clean_pages(request_id, state)
            return
        if (self.gpu_pool.get_num_free_blocks() < self.transition_watermark
                or self._fills_admission_window(request_id)):
            for hot in self.hot_managers:
                hot.require_hot(request_id)

    # ------------------------------------------------------------------------- write-back and publication
    def advance_scheduled(self, requests: Iterable[tuple[str, int]]) -> None:
        """The per-step work for each scheduled `(request_id, num_tokens computed after the step)`: plan
        write-backs of newly sealed pages, then apply the residency policy. The last
        `num_reprefillable_tokens` tokens are recomputed by the next step, so they are not written back."""
        if not self.resident_managers:
            return
        for request_id, num_tokens in requests:
            self.plan_prefix_materialization(request_id, max(0, num_tokens - self.num_reprefillable_tokens))
            self.update_residency(request_id)

    def plan_prefix_materialization(self, request_id: str, num_computed_tokens: int) -> None:
        """Plan a write-back for every sealed page below `num_computed_tokens` that has no host copy yet
        (nor one in flight, nor an import filling it), within the per-step spill budget."""
        if not self.resident_managers:
            return
        block_size = self.host_manager.block_size
        state = self._get_request_state(request_id)
        budget = self.max_spill_pages - len(self.spills_to_send)
        first = max(state.ready_prefix_pages, cdiv(self._pending_imports.get(request_id, 0), block_size))
        for page_idx in range(first, num_computed_tokens // block_size):
            if budget <= 0:
                break
            if page_idx in state.pending_pages or page_idx in state.valid_pages:
                continue
            if self._device_pages(request_id, page_idx) is None:
                continue
            if self._plan_page_transfer(request_id, page_idx, after_forward=True):
                budget -= 1

    def _plan_page_transfer(self, request_id: str, page_idx: int, *, after_forward: bool,
                            restore: bool = False) -> bool:
        """Queue one page transfer; its host and device blocks stay referenced until it completes."""
        state = self._get_request_state(request_id)
        if page_idx in state.pending_pages:
            return False
        host_blocks = self.host_manager.req_to_blocks.get(request_id)
        if host_blocks is None or page_idx >= len(host_blocks) or host_blocks[page_idx].is_null:
            return False
        host_block = host_blocks[page_idx]
        device_blocks = self._device_pages(request_id, page_idx)
        if device_blocks is None:
            return False
        self.host_manager.block_pool.touch([host_block])
        for manager, block in zip(self.resident_managers, device_blocks):
            manager.block_pool.touch([block])
        transfer_id = self.next_spill_id
        self.next_spill_id += 1
        self.spills_to_send.append(SparseKVPageTransfer(
            transfer_id=transfer_id, host_block_id=host_block.block_id,
            resident_block_ids=tuple(b.block_id for b in device_blocks), after_forward=after_forward,
            restore=restore))
        self.pending_spills[transfer_id] = _PendingSpill(
            transfer_id=transfer_id, page=(request_id, page_idx), request_state=state, host_block=host_block,
            resident_blocks=tuple(device_blocks), restore=restore)
        state.pending_pages[page_idx] = transfer_id
        return True

    def publish_when_ready(self, request, num_computed_tokens: int, retention_interval: int | None, *,
                           replay_boundaries: Sequence[int] = ()) -> None:
        """The source group's `cache_blocks`: publish the durable part of the first `num_computed_tokens`
        tokens now and the rest as its host copies complete."""
        if self.host_manager is None:
            return
        self._get_request_state(request.request_id).publication = _PendingPublication(
            request=request, num_computed_tokens=num_computed_tokens,
            num_pages=num_computed_tokens // self.host_manager.block_size,
            retention_interval=retention_interval, replay_boundaries=replay_boundaries)
        self._publish_host_blocks_if_ready(request.request_id)

    def _publish_host_blocks_if_ready(self, request_id: str) -> None:
        # Publishes the durable prefix at once rather than waiting for the whole computation: host
        # writes trail a long prefill by a chunk, and a prefill preempted before its end should not
        # have to recompute from scratch.
        state = self.request_states.get(request_id)
        if state is None or state.publication is None:
            return
        publication = state.publication
        num_tokens = min(publication.num_computed_tokens,
                         state.ready_prefix_pages * self.host_manager.block_size)
        self.host_manager.publish_blocks(publication.request, num_tokens,
                                         retention_interval=publication.retention_interval,
                                         replay_boundaries=publication.replay_boundaries)
        self._record_copies(request_id, num_tokens)
        if state.ready_prefix_pages >= publication.num_pages:
            state.publication = None

    def _publish_detached_blocks(self, state: _HiSparseRequestState) -> None:
        """Publish the durable prefix of a freed request once its last copy finished, then drop the host
        references taken at free."""
        publication = state.publication
        if publication is None or state.pending_pages or publication.detached_blocks is None:
            return
        while state.ready_prefix_pages in state.valid_pages:
            state.ready_prefix_pages += 1
        blocks = publication.detached_blocks
        host = self.host_manager
        host.block_pool.cache_full_blocks(
            publication.request, blocks, publication.num_cached_blocks,
            min(state.ready_prefix_pages, publication.num_pages), host.block_size, host.kv_cache_group_id)
        host.block_pool.free_blocks(list(reversed(blocks)))
        state.publication = None

    # ------------------------------------------------------------------------------ worker completions
    def update_spills(self, enqueued_counts: Mapping[int, int], completed_counts: Mapping[int, int]) -> None:
        """Worker feedback: how many workers took each transfer (`enqueued_counts`, first report wins)
        and how many finished it (`completed_counts`, accumulated). A transfer every worker finished
        releases its blocks and makes its page clean."""
        for transfer_id, count in enqueued_counts.items():
            pending = self.pending_spills.get(transfer_id)
            if pending is not None and not pending.expected_worker_completions:
                pending.expected_worker_completions = count
        for transfer_id, count in completed_counts.items():
            pending = self.pending_spills.get(transfer_id)
            if pending is not None:
                pending.worker_completions += count
        self._apply_enqueued_spills()
        self._complete_host_writes()

    @staticmethod
    def _all_workers_done(pending: _PendingSpill) -> bool:
        return bool(pending.expected_worker_completions) and \
            pending.worker_completions >= pending.expected_worker_completions

    def _apply_enqueued_spills(self) -> None:
        """Drop the device references of transfers every worker has finished."""
        for pending in self.pending_spills.values():
            if pending.enqueue_applied or not self._all_workers_done(pending):
                continue
            for manager, block in zip(self.resident_managers, pending.resident_blocks):
                manager.block_pool.free_blocks([block])
            pending.enqueue_applied = True

    def _complete_host_writes(self) -> None:
        done = [p for p in self.pending_spills.values() if p.enqueue_applied and self._all_workers_done(p)]
        touched: set[str] = set()
        for pending in done:
            del self.pending_spills[pending.transfer_id]
            request_id, page_idx = pending.page
            state = pending.request_state
            state.pending_pages.pop(page_idx, None)
            if self.request_states.get(request_id) is state:
                # A restore copies host -> device: it proves nothing new about the host copy.
                if not pending.restore:
                    state.valid_pages.add(page_idx)
                if page_idx in state.valid_pages:
                    self._page_became_clean(request_id, state, page_idx)
                    if pending.restore:
                        self._record_copy(request_id, page_idx, pending.host_block)
                touched.add(request_id)
            elif state.publication is not None:
                if not pending.restore:
                    state.valid_pages.add(page_idx)
                self._publish_detached_blocks(state)
            self.host_manager.block_pool.free_blocks([pending.host_block])
        for request_id in touched:
            state = self.request_states[request_id]
            while state.ready_prefix_pages in state.valid_pages:
                state.ready_prefix_pages += 1
            self._publish_host_blocks_if_ready(request_id)

    def has_pending_reclamation(self) -> bool:
        """Whether some transfer in flight will free device or host blocks when it completes."""
        for pending in self.pending_spills.values():
            if pending.host_block.ref_cnt == 1:
                return True
            request_id = pending.page[0]
            if request_id in self.request_states and self._can_read_from_host(request_id):
                return True
        return False

    def has_pending_work(self) -> bool:
        """Whether transfers or host copies are still queued or in flight."""
        return bool(self.spills_to_send or self.pending_spills or self._retained_copies)

    # ------------------------------------------------------------------------------- worker-facing views
    def build_offload_command(self) -> SparseKVOffloadCommand | None:
        """Drain the planned transfers into one step's command (None without resident groups)."""
        if not self.resident_managers:
            return None
        command = SparseKVOffloadCommand(page_transfers=self.spills_to_send)
        self.spills_to_send = []
        return command

    def build_row_mirrors(self, requests: Iterable[tuple[str, int, int]]) -> tuple[SparseKVRowMirror, ...]:
        """For each scheduled `(request_id, num_computed_tokens, num_scheduled_tokens)`, the spans of rows
        the step writes on the device and their host destination. A page lacking a device copy or a host
        block is skipped alone: the window only moves forward, so its neighbours must still be mirrored."""
        if not self.resident_managers or self.host_manager is None:
            return ()
        block_size = self.resident_managers[0].block_size
        mirrors: list[SparseKVRowMirror] = []
        for request_id, num_computed, num_scheduled in requests:
            host_blocks = self.host_manager.req_to_blocks.get(request_id)
            if host_blocks is None or any(request_id not in m.req_to_blocks for m in self.resident_managers):
                continue
            pos, end = num_computed, num_computed + num_scheduled
            while pos < end:
                page_idx, offset = divmod(pos, block_size)
                num_rows = min(block_size - offset, end - pos)
                device_blocks = self._device_pages(request_id, page_idx)
                if device_blocks is not None and page_idx < len(host_blocks) and \
                        not host_blocks[page_idx].is_null:
                    mirrors.append(SparseKVRowMirror(
                        source_starts=tuple(b.block_id * block_size + offset for b in device_blocks),
                        destination_start=host_blocks[page_idx].block_id * block_size + offset,
                        num_rows=num_rows))
                pos += num_rows
        return tuple(mirrors)

    def all_context_pages_resident(self, requests: Iterable[tuple[str, int, int]]) -> bool:
        """Whether every scheduled request can read its whole context from device pages alone."""
        if not self.resident_managers:
            return False
        first = self.resident_managers[0]
        for request_id, num_computed, num_scheduled in requests:
            if len(first.req_to_blocks.get(request_id, ())) < cdiv(num_computed + num_scheduled,
                                                                   first.block_size):
                return False
            if request_id in self._resident_requests:
                continue
            if any(b.is_null for m in self.resident_managers for b in m.get_residency_row(request_id)):
                return False
            self._resident_requests.add(request_id)
        return True

    def take_residency_updates(self, request_ids: Iterable[str]) -> dict[str, SparseKVResidencyUpdate]:
        """For each scheduled request, the resident block ids the worker does not know yet: stale pages
        first, then pages appended since the last update. Unscheduled requests keep theirs for later."""
        updates: dict[str, SparseKVResidencyUpdate] = {}
        if not self.resident_managers:
            return updates
        first = self.resident_managers[0]
        for request_id in request_ids:
            state = self._get_request_state(request_id)
            num_pages = len(first.req_to_blocks.get(request_id, ()))
            start = state.synced_pages
            if not state.stale_pages and start >= num_pages:
                continue
            stale = sorted(state.stale_pages)
            block_ids: list[list[int]] = []
            for manager in self.resident_managers:
                null_id = manager.block_pool.null_block.block_id
                ids = []
                for page_idx in stale:
                    block = manager.get_resident_page(request_id, page_idx)
                    ids.append(null_id if block is None else block.block_id)
                ids.extend(b.block_id for b in manager.get_residency_row(request_id, start))
                block_ids.append(ids)
            updates[request_id] = SparseKVResidencyUpdate(pages=[*stale, *range(start, num_pages)],
                                                          block_ids=tuple(block_ids))
            state.stale_pages.clear()
            state.synced_pages = num_pages
        return updates

    # -------------------------------------------------------------------------------------------- free
    def free(self, request_id: str) -> None:
        """Detach a finished or preempted request. Its clean pages stay in the device pool as readable
        copies (unpinned); a finished request's still-running write-backs keep its host blocks until they
        complete, so the durable prefix can still be published."""
        self._resident_requests.discard(request_id)
        self._pending_imports.pop(request_id, None)
        self._import_pages.pop(request_id, None)
        self._set_import_reservation(request_id, 0)
        state = self.request_states.pop(request_id, None)
        if state is None:
            return
        publication = state.publication
        if publication is not None and publication.request.is_finished() and state.pending_pages:
            host = self.host_manager
            publication.detached_blocks = list(host.req_to_blocks[request_id][:publication.num_pages])
            publication.num_cached_blocks = host.num_cached_block.get(request_id, 0)
            # Pages already durable need references too: an allocation could evict them before the
            # remaining copies land and the prefix is published.
            host.block_pool.touch(publication.detached_blocks)
        else:
            # A preempted request's planned copies may belong to a forward pass that never ran, so they
            # do not prove the KV exists.
            state.publication = None
        for manager in self.resident_managers:
            row = manager.get_residency_row(request_id)
            for page_idx in range(len(row) - 1, -1, -1):  # tail first, as in _unpin_clean_pages
                block = row[page_idx]
                if block.is_null:
                    continue
                if page_idx in state.unpinned_pages:
                    owners = self._owners.get(block.block_id)
                    if owners is not None:
                        owners.discard((request_id, page_idx))
                elif page_idx in state.valid_pages and page_idx not in state.pending_pages:
                    manager.block_pool.unpin_blocks([block], self._on_block_reused)
                else:
                    continue
                manager.drop_resident_page(request_id, page_idx)


def get_hisparse_coordinator(kv_cache_manager: KVCacheManager, *,
                             import_step_tokens: int | None = None) -> HiSparseCoordinator:
    """The HiSparse coordinator of a KV cache manager, built on first use (before any admission) and
    remembered on the HiSparse managers it binds to. `import_step_tokens` (None: 0, or whatever the bound
    coordinator has) is the spec-decode step an imported request needs beyond its sequence (HiSparse's
    connector passes it). ValueError when the manager has no HiSparse group, or when a bound coordinator
    was built with another `import_step_tokens`."""
    managers = tuple(kv_cache_manager.coordinator.single_type_managers)
    for manager in managers:
        bound = getattr(manager, "coordinator", None)
        if isinstance(bound, HiSparseCoordinator):
            if import_step_tokens is not None and import_step_tokens != bound.import_step_tokens:
                raise ValueError(f"import_step_tokens: {import_step_tokens} differs from the "
                                 f"{bound.import_step_tokens} the bound HiSparse coordinator was built with "
                                 "(accepted: None or the same value)")
            return bound
    coordinator = HiSparseCoordinator(
        kv_cache_manager.kv_cache_config, managers, kv_cache_manager.max_model_len,
        num_reprefillable_tokens=getattr(kv_cache_manager.coordinator, "num_reprefillable_tokens", 0),
        import_step_tokens=import_step_tokens or 0)
    if coordinator.host_manager is None:
        raise ValueError("No HiSparse cache group is configured.")
    return coordinator
