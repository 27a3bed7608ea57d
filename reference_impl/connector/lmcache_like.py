"""An LMCache-like HMA connector: chunked prefix-hash objects per KV cache group in a CPU (+disk) store.

Design (after LMCache's multi-process HMA path, written in-process):

* tokens are cut into `chunk_size`-token chunks (256 by default); chunk hashes are prefix-chained and
  salted by cache salt and LoRA (`hashing.chunk_hashes`); a trailing partial chunk is never stored;
* one object per (chunk, group, TP rank): full attention stores every block of the chunk, a sliding
  window group only the blocks of the chunk's last `window - 1` tokens (what a hit ending at a chunk
  boundary needs), Mamba only the state at the chunk boundary;
* the hit is the largest chunk count that every group can serve (`groups.fold_hit_chunks`), capped at
  `num_tokens - 1`; looked-up objects are pinned until the load is done or the request finishes;
* per-group block tables per request: full table on admission (deduplicated), appends for running
  requests, replacement on resume; block 0 (the null block) is never read or written;
* stores copy in `wait_for_save` (the step the KV was computed in), so no source block can be reused
  before the copy; loads copy in `start_load_kv` (before the forward for sync loads);
* a load whose objects are missing writes nothing and is reported per request (`failed_recving`).

Options (`kv_transfer_config.kv_connector_extra_config`): chunk_size, store_name, cpu_bytes, disk_path,
disk_bytes, load_async, store_window_only, model_name, lookup_latency_steps (a simulated remote backend: a
request's first lookup starts a backend query that answers after that many scheduler steps; until then
the lookup returns None, "ask again next step"), load_delay_steps (a consumer-side asynchronous load that
lands later: with load_async, a load writes its blocks and is reported in finished_recving that many worker
steps after the step that started it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from reference_impl.connector.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
    KVConnectorStats,
    KVConnectorTransferResults,
    SupportsHMA,
)
from reference_impl.connector.groups import (
    MAMBA,
    drafter_reads_last_block,
    SLIDING,
    GroupInfo,
    fold_hit_chunks,
    spec_dtype,
    transfer_groups,
)
from reference_impl.connector.hashing import chunk_hashes, object_key
from reference_impl.connector.store import ChunkStore, shared_store

NULL_BLOCK_ID = 0
SKIP = -1  # a position of an object that a load must not write (null, or inside the local prefix hit)

DEFAULTS = {
    "chunk_size": 256,
    "store_name": "default",
    "cpu_bytes": 1 << 30,
    "disk_path": None,
    "disk_bytes": 4 << 30,
    "load_async": False,
    "store_window_only": True,
    "lookup_latency_steps": 0,
    "load_delay_steps": 0,
}


def extra_config(vllm_config) -> dict:
    """The connector's options: DEFAULTS overridden by `kv_connector_extra_config`."""
    ktc = getattr(vllm_config, "kv_transfer_config", None)
    options = dict(DEFAULTS)
    options.update(getattr(ktc, "kv_connector_extra_config", None) or {})
    return options


@dataclass
class TransferOp:
    """Copy one (chunk, group) object: `block_ids[i]` is the block of the object's i-th slot (SKIP: leave).

    The worker derives the store key from `chunk_hash`, the group and its own TP rank.
    """

    req_id: str
    group_id: int
    chunk_hash: bytes
    block_ids: list[int]


@dataclass
class LMCacheLikeMetadata(KVConnectorMetadata):
    """One step's work for the workers: loads per request, stores, and which loads are asynchronous."""

    loads: dict[str, list[TransferOp]] = field(default_factory=dict)
    saves: list[TransferOp] = field(default_factory=list)
    async_load_ids: set[str] = field(default_factory=set)


@dataclass
class _Tracker:
    """Scheduler-side state of one admitted request."""

    request: object
    block_ids: dict[int, list[int]]
    saved_chunks: int = 0
    hashes: list[bytes] = field(default_factory=list)
    load: tuple[int, int, bool] | None = None  # (start token, end token, async) waiting to be issued


class ChunkedPrefixConnector(KVConnectorBase_V1):
    """The chunked prefix-cache data path shared by the HMA connector and the single-group example.

    `_select_groups` says which KV cache groups a subclass transfers.
    """

    def _select_groups(self, groups: list[GroupInfo]) -> list[GroupInfo]:
        return groups

    def __init__(self, vllm_config, role: KVConnectorRole, kv_cache_config=None):
        super().__init__(vllm_config, role, kv_cache_config)
        if kv_cache_config is None:
            raise ValueError(f"{type(self).__name__} needs kv_cache_config (vLLM >= 0.11 constructor)")
        options = extra_config(vllm_config)
        self.chunk_size = int(options["chunk_size"])
        self.load_async = bool(options["load_async"])
        self.store_window_only = bool(options["store_window_only"])
        # EAGLE / MTP: a hit leaves its last block to recompute (the drafter needs its hidden states).
        self.use_eagle = drafter_reads_last_block(vllm_config)
        self.groups: list[GroupInfo] = self._select_groups(transfer_groups(kv_cache_config))
        # Each group's KV dtype goes into its keys: another deployment's objects in another dtype never match.
        self._dtypes = {gid: spec_dtype(g.kv_cache_spec) for gid, g in enumerate(kv_cache_config.kv_cache_groups)}
        for group in self.groups:
            if group.kind != MAMBA and self.chunk_size % group.block_size:
                raise ValueError(
                    f"chunk_size {self.chunk_size} is not a multiple of kv_cache_groups[{group.group_id}] "
                    f"block_size {group.block_size}; accepted: a common multiple of every attention block size"
                )
        model = getattr(getattr(vllm_config, "model_config", None), "model", "model")
        parallel = getattr(vllm_config, "parallel_config", None)
        self.model_name = str(options.get("model_name") or model)
        self.world_size = int(getattr(parallel, "tensor_parallel_size", 1))
        self.rank = int(getattr(parallel, "rank", 0))
        self.store: ChunkStore = shared_store(
            str(options["store_name"]),
            int(options["cpu_bytes"]),
            options["disk_path"],
            int(options["disk_bytes"]),
        )
        self.num_blocks = int(kv_cache_config.num_blocks)
        # scheduler side
        self._trackers: dict[str, _Tracker] = {}
        self._lookups: dict[str, tuple[int, int]] = {}  # req_id -> (local computed, hit end) of the last lookup
        self.lookup_latency_steps = int(options["lookup_latency_steps"])
        self._step = 0  # scheduler steps (build_connector_meta calls), the clock of the simulated backend
        self._lookup_ready: dict[str, int] = {}  # req_id -> step at which its backend query answers
        self._bypass: set[str] = set()  # requests whose load failed: recomputed locally, never offered again
        self._stats: dict[str, float] = {}
        # worker side
        self._layers: dict[str, list[torch.Tensor]] = {}
        self._kernel_ratio = 1
        self._finished_recving: set[str] = set()
        self._failed_recving: set[str] = set()
        self._pending_async: dict[str, list[TransferOp]] = {}
        self.load_delay_steps = options["load_delay_steps"]
        if isinstance(self.load_delay_steps, bool) or not isinstance(self.load_delay_steps, int) \
                or self.load_delay_steps < 0:
            raise ValueError(f"kv_connector_extra_config.load_delay_steps is {self.load_delay_steps!r}; accepted: "
                             "a whole number of steps >= 0")
        self._delayed_loads: list[list] = []  # [steps left, req_id, ops]: asynchronous loads not landed yet

    # ---- keys and presence ---------------------------------------------------------------------
    def _key(self, group_id: int, chunk_hash: bytes, rank: int | None = None) -> str:
        rank = self.rank if rank is None else rank
        return object_key(self.model_name, self.world_size, rank, group_id, chunk_hash, self._dtypes.get(group_id, ""))

    def _hashes(self, request, num_tokens: int | None = None) -> list[bytes]:
        tokens = request.all_token_ids if num_tokens is None else request.all_token_ids[:num_tokens]
        lora = getattr(getattr(request, "lora_request", None), "lora_name", None)
        return chunk_hashes(tokens, self.chunk_size, cache_salt=getattr(request, "cache_salt", None), lora_name=lora)

    def _all_ranks_have(self, group_id: int, chunk_hash: bytes) -> bool:
        # The scheduler must offer only what every TP rank can load.
        return all(self.store.contains(self._key(group_id, chunk_hash, r)) for r in range(self.world_size))

    def _mamba_chunk_has_state(self, group: GroupInfo, chunk_index: int) -> bool:
        return ((chunk_index + 1) * self.chunk_size) % group.block_size == 0

    # ---- scheduler side --------------------------------------------------------------------------
    def get_num_new_matched_tokens(self, request, num_computed_tokens: int) -> tuple[int | None, bool]:
        """External hit beyond the local one: the largest chunk count every group can serve."""
        req_id = request.request_id
        self.store.unpin(req_id)
        self._lookups.pop(req_id, None)
        if getattr(request, "skip_reading_prefix_cache", False) or not self.groups or req_id in self._bypass:
            return 0, False
        if self.lookup_latency_steps > 0:
            ready = self._lookup_ready.setdefault(req_id, self._step + self.lookup_latency_steps)
            if self._step < ready:
                return None, False
        hashes = self._hashes(request)
        max_chunks = min(len(hashes), (request.num_tokens - 1) // self.chunk_size)
        presence = {
            g.group_id: [self._all_ranks_have(g.group_id, h) for h in hashes[:max_chunks]] for g in self.groups
        }
        windows = {g.group_id: g.window_chunks(self.chunk_size) for g in self.groups}
        hit_chunks = fold_hit_chunks(presence, windows, max_chunks)
        if self.use_eagle and hit_chunks:
            hit_chunks = fold_hit_chunks(presence, windows, hit_chunks - 1)  # the last block is the drafter's
        hit_tokens = hit_chunks * self.chunk_size
        if hit_tokens <= num_computed_tokens:
            return 0, False
        keys = [
            self._key(g.group_id, hashes[j], r)
            for g in self.groups
            for j in self._chunks_needed(g, num_computed_tokens, hit_tokens)
            for r in range(self.world_size)
        ]
        self.store.pin(req_id, keys)
        self._lookups[req_id] = (num_computed_tokens, hit_tokens)
        return hit_tokens - num_computed_tokens, self.load_async

    def _chunks_needed(self, group: GroupInfo, start: int, end: int) -> range:
        """Chunks of `group` a load of tokens [start, end) reads (end is a chunk boundary)."""
        last = end // self.chunk_size
        return range(max(group.first_chunk(last, self.chunk_size), start // self.chunk_size), last)

    def update_state_after_alloc(self, request, blocks, num_external_tokens: int) -> None:
        """Track the request's full per-group table (deduplicated) and plan the load if there is one."""
        req_id = request.request_id
        self._lookup_ready.pop(req_id, None)
        table = blocks.get_block_ids() if blocks is not None else ()
        tracker = self._trackers.get(req_id)
        if tracker is None:
            tracker = _Tracker(request=request, block_ids={g.group_id: [] for g in self.groups})
            self._trackers[req_id] = tracker
        for group in self.groups:
            ids = list(table[group.group_id]) if group.group_id < len(table) else []
            tracked = tracker.block_ids[group.group_id]
            # vLLM passes the whole table every time: keep only what is beyond what we track.
            tracked.extend(ids[len(tracked):])
        lookup = self._lookups.pop(req_id, None)
        if num_external_tokens > 0 and lookup is not None:
            start, _hit_end = lookup
            tracker.load = (start, start + num_external_tokens, self.load_async)
        elif num_external_tokens == 0:
            self.store.unpin(req_id)

    def build_connector_meta(self, scheduler_output) -> LMCacheLikeMetadata:
        """Loads issued this step and stores of every chunk that becomes complete this step."""
        meta = LMCacheLikeMetadata()
        self._step += 1
        scheduled = dict(getattr(scheduler_output, "num_scheduled_tokens", {}) or {})
        computed: dict[str, int] = {}
        for new in getattr(scheduler_output, "scheduled_new_reqs", ()):
            tracker = self._trackers.get(new.req_id)
            if tracker is None:
                continue
            for group in self.groups:
                tracked = tracker.block_ids[group.group_id]
                ids = list(new.block_ids[group.group_id])
                tracked.extend(ids[len(tracked):])
            computed[new.req_id] = new.num_computed_tokens
        cached = getattr(scheduler_output, "scheduled_cached_reqs", None)
        if cached is not None:
            resumed = set(getattr(cached, "resumed_req_ids", ()) or ())
            for i, req_id in enumerate(cached.req_ids):
                tracker = self._trackers.get(req_id)
                if tracker is None:
                    continue
                new_ids = cached.new_block_ids[i]
                if new_ids is not None:
                    for group in self.groups:
                        ids = list(new_ids[group.group_id])
                        if req_id in resumed:
                            tracker.block_ids[group.group_id] = ids
                        else:
                            tracker.block_ids[group.group_id].extend(ids)
                if req_id in resumed:
                    tracker.saved_chunks = 0
                computed[req_id] = cached.num_computed_tokens[i]
        for req_id, tracker in self._trackers.items():
            if tracker.load is not None:
                start, end, is_async = tracker.load
                tracker.load = None
                meta.loads[req_id] = self._load_ops(req_id, tracker, start, end)
                if is_async:
                    meta.async_load_ids.add(req_id)
        for req_id, num_tokens in scheduled.items():
            tracker = self._trackers.get(req_id)
            if tracker is None or req_id not in computed or num_tokens <= 0:
                continue
            meta.saves.extend(self._save_ops(req_id, tracker, computed[req_id] + num_tokens))
        return meta

    def _group_slots(self, group: GroupInfo, chunk: int) -> list[int]:
        """Table positions (block indices) the object of (`chunk`, `group`) holds, in order."""
        if group.kind == MAMBA:
            return [(chunk + 1) * self.chunk_size // group.block_size - 1]
        end = (chunk + 1) * self.chunk_size
        tokens = group.chunk_tail_tokens(self.chunk_size) if (group.kind == SLIDING and self.store_window_only) \
            else self.chunk_size
        first = (end - tokens) // group.block_size
        return list(range(first, end // group.block_size))

    def _load_ops(self, req_id: str, tracker: _Tracker, start: int, end: int) -> list[TransferOp]:
        hashes = self._hashes(tracker.request, end)
        ops = []
        for group in self.groups:
            table = tracker.block_ids[group.group_id]
            first_writable = start // group.block_size if group.kind != MAMBA else 0
            for chunk in self._chunks_needed(group, start, end):
                if group.kind == MAMBA and (chunk + 1) * self.chunk_size != end:
                    continue
                slots = self._group_slots(group, chunk)
                ids = []
                for pos in slots:
                    block = table[pos] if pos < len(table) else NULL_BLOCK_ID
                    ids.append(SKIP if block == NULL_BLOCK_ID or pos < first_writable else block)
                ops.append(TransferOp(req_id, group.group_id, hashes[chunk], ids))
        return ops

    def _save_ops(self, req_id: str, tracker: _Tracker, computed_end: int) -> list[TransferOp]:
        complete = computed_end // self.chunk_size
        if complete <= tracker.saved_chunks:
            return []
        if len(tracker.hashes) < complete:
            tracker.hashes = self._hashes(tracker.request, complete * self.chunk_size)
        ops = []
        for chunk in range(tracker.saved_chunks, complete):
            for group in self.groups:
                if group.kind == MAMBA and (
                    (chunk + 1) * self.chunk_size != computed_end or not self._mamba_chunk_has_state(group, chunk)
                ):
                    continue  # a Mamba state exists only at the end of the step that computed it
                table = tracker.block_ids[group.group_id]
                ids = [table[pos] if pos < len(table) else NULL_BLOCK_ID for pos in self._group_slots(group, chunk)]
                if NULL_BLOCK_ID in ids:
                    continue  # a required block is gone (out of window / null): this object cannot be stored
                if self._all_ranks_have(group.group_id, tracker.hashes[chunk]):
                    continue
                ops.append(TransferOp(req_id, group.group_id, tracker.hashes[chunk], ids))
        tracker.saved_chunks = complete
        return ops

    def update_connector_output(self, connector_output) -> None:
        """Release lookup pins of loads that completed (or failed); a failed request is recomputed locally
        (LMCache's bypass), so its restart does not run into the same failure again."""
        # vLLM's KVConnectorOutput before 0.14 has no failed_recving (a failed load is its invalid blocks).
        failed = set(getattr(connector_output, "failed_recving", None) or ())
        for req_id in set(connector_output.finished_recving or ()) | failed:
            self.store.unpin(req_id)
        self._bypass.update(failed)

    def request_finished_all_groups(self, request, block_ids: tuple[list[int], ...]) -> tuple[bool, dict | None]:
        """Drop the request's state; stores already completed in `wait_for_save`, so no delay is needed."""
        req_id = request.request_id
        self._trackers.pop(req_id, None)
        self._lookups.pop(req_id, None)
        self._lookup_ready.pop(req_id, None)
        self._bypass.discard(req_id)
        self.store.unpin(req_id)
        return False, None

    def request_finished(self, request, block_ids: list[int]) -> tuple[bool, dict | None]:
        """Single-group form; the same cleanup."""
        return self.request_finished_all_groups(request, (block_ids,))

    def get_loaded_kv_cache_group_ids(self, request) -> tuple[int, ...]:
        """Every group this connector restores."""
        return tuple(g.group_id for g in self.groups)

    def take_events(self):
        """('stored'|'removed', key) events of the shared store (scheduler side only)."""
        return self.store.take_events() if self.role == KVConnectorRole.SCHEDULER else []

    def reset_cache(self) -> bool:
        """Clear the store."""
        self.store.clear()
        return True

    @property
    def requires_kv_delivery(self) -> bool:
        """A best-effort cache: a preempted request is simply recomputed."""
        return False

    # ---- kvconform backdoor (used by the conformance suite's white-box checks) ---------------------
    def kvconform_chunk_size(self) -> int:
        """Tokens per stored chunk."""
        return self.chunk_size

    def kvconform_evict(self, request, group_id: int, chunk_index: int) -> None:
        """Remove the object of (`chunk_index`, `group_id`) of `request`'s tokens on every rank."""
        hashes = self._hashes(request, (chunk_index + 1) * self.chunk_size)
        for rank in range(self.world_size):
            self.store.remove(self._key(group_id, hashes[chunk_index], rank))

    def kvconform_tracked_block_ids(self, req_id: str) -> tuple[list[int], ...] | None:
        """The per-group table tracked for `req_id` (None when untracked); untransferred groups are empty."""
        tracker = self._trackers.get(req_id)
        if tracker is None:
            return None
        num_groups = len(self._kv_cache_config.kv_cache_groups)
        return tuple(list(tracker.block_ids.get(g, [])) for g in range(num_groups))

    def kvconform_object_keys(self, request) -> list[str]:
        """Store keys of every (chunk, group) object of `request`'s full chunks on this rank."""
        return [self._key(g.group_id, h) for h in self._hashes(request) for g in self.groups]

    def kvconform_open_state(self) -> dict[str, int]:
        """Sizes of per-request maps and pins (all 0 when nothing is in flight)."""
        return {
            "trackers": len(self._trackers),
            "lookups": len(self._lookups),
            "lookups_in_flight": len(self._lookup_ready),
            "bypassed": len(self._bypass),
            "pending_async": len(self._pending_async),
            "finished_recving": len(self._finished_recving),
            "store_pins": self.store.num_pins,
        }

    # ---- worker side --------------------------------------------------------------------------
    def register_kv_caches(self, kv_caches: dict) -> None:
        """Keep the per-layer views (block-major); detect a kernel-block ratio from the first dimension."""
        self._layers = {name: list(t) if isinstance(t, (list, tuple)) else [t] for name, t in kv_caches.items()}
        for group in self.groups:
            for name in group.layer_names:
                if name not in self._layers:
                    raise ValueError(f"register_kv_caches: layer {name!r} of group {group.group_id} is missing")
        # Attention groups laid out as vLLM allocates them (equal layers, evenly spaced in one allocation)
        # are copied through one [layers, rows, words] view: one gather / scatter per object, not per layer.
        self._group_views: dict[int, torch.Tensor] = {}
        for group in self.groups:
            if group.kind != MAMBA and all(len(self._layers[n]) == 1 for n in group.layer_names):
                view = layers_as_one_view([self._layers[n][0] for n in group.layer_names])
                if view is not None:
                    self._group_views[group.group_id] = view
        first = next((self._layers[n][0] for g in self.groups if g.kind != MAMBA for n in g.layer_names), None)
        if first is not None and first.shape[0] % self.num_blocks == 0:
            self._kernel_ratio = first.shape[0] // self.num_blocks

    def _rows(self, ops: list[tuple[GroupInfo, list[int]]]) -> list[torch.Tensor]:
        """Row indices (kernel blocks) of each (group, block ids); one tensor built for all of them."""
        flat = torch.tensor([b for _, ids in ops for b in ids], dtype=torch.long)
        out, start = [], 0
        for group, ids in ops:
            rows = flat[start : start + len(ids)]
            start += len(ids)
            ratio = 1 if group.kind == MAMBA else self._kernel_ratio
            out.append((rows[:, None] * ratio + torch.arange(ratio)).reshape(-1) if ratio > 1 else rows)
        return out

    def start_load_kv(self, forward_context, **kwargs) -> None:
        """Issue this step's loads: all objects of a request are fetched first, so a miss writes nothing. With
        load_delay_steps an asynchronous load lands (writes and is reported) that many steps later."""
        self._land_delayed_loads()
        meta = self._connector_metadata
        if not isinstance(meta, LMCacheLikeMetadata):
            return
        for req_id, ops in meta.loads.items():
            if self.load_delay_steps and req_id in meta.async_load_ids:
                self._delayed_loads.append([self.load_delay_steps, req_id, ops])
                continue
            ok = self._load_request(ops)
            if req_id in meta.async_load_ids or not ok:
                self._finished_recving.add(req_id)
            if not ok:
                self._failed_recving.add(req_id)

    def _land_delayed_loads(self) -> None:
        """One more step for each delayed load; those due write their blocks now and are reported finished."""
        due = []
        for entry in self._delayed_loads:
            entry[0] -= 1
            if entry[0] <= 0:
                due.append(entry)
        for entry in due:
            self._delayed_loads.remove(entry)
            _, req_id, ops = entry
            ok = self._load_request(ops)
            self._finished_recving.add(req_id)
            if not ok:
                self._failed_recving.add(req_id)

    def _load_request(self, ops: list[TransferOp]) -> bool:
        fetched = []
        for op in ops:
            value = self.store.get(self._key(op.group_id, op.chunk_hash))
            if value is None:
                self._count("load_misses", 1)
                return False
            fetched.append((op, value))
        groups = {g.group_id: g for g in self.groups}
        work = []
        for op, value in fetched:
            slots = [i for i, b in enumerate(op.block_ids) if b != SKIP]
            if slots:
                work.append((op, value, slots, groups[op.group_id], [op.block_ids[i] for i in slots]))
        all_rows = self._rows([(group, ids) for _, _, _, group, ids in work]) if work else []
        loaded = 0
        for (op, value, slots, group, _), rows in zip(work, all_rows):
            loaded += value.numel()
            src_rows = None if len(slots) == len(op.block_ids) else self._rows_of_slots(slots, len(rows) // len(slots))
            view = self._group_views.get(op.group_id)
            if view is not None:
                src = value.view(view.dtype)
                view.index_copy_(1, rows, src if src_rows is None else src.index_select(1, src_rows))
                continue
            for layer_index, name in enumerate(group.layer_names):
                offset = 0
                for tensor in self._layers[name]:
                    width = tensor[0].numel() * tensor.element_size()
                    src = value[layer_index, :, offset : offset + width]
                    if src_rows is not None:
                        src = src.index_select(0, src_rows)
                    shape = (len(rows),) + tuple(tensor.shape[1:])
                    tensor.index_copy_(0, rows, src.contiguous().view(tensor.dtype).view(shape))
                    offset += width
        self._count("loaded_bytes", loaded)
        return True

    @staticmethod
    def _rows_of_slots(slots: list[int], ratio: int) -> torch.Tensor:
        ids = torch.tensor(slots, dtype=torch.long)
        return (ids[:, None] * ratio + torch.arange(ratio)).reshape(-1) if ratio > 1 else ids

    def wait_for_layer_load(self, layer_name: str) -> None:
        """Loads are whole-model (in `start_load_kv`), so there is nothing to wait for per layer."""

    def save_kv_layer(self, layer_name: str, kv_layer, attn_metadata, **kwargs) -> None:
        """Stores run in `wait_for_save`, after the whole forward (Mamba layers have no layer hook)."""

    def wait_for_save(self) -> None:
        """Copy every store of this step into the store before the step ends (sources are still owned).

        An object is [layers, rows, bytes per row] uint8, each object its own allocation (the store's byte
        budget is what it holds).
        """
        meta = self._connector_metadata
        if not isinstance(meta, LMCacheLikeMetadata) or not meta.saves:
            return
        groups = {g.group_id: g for g in self.groups}
        stored = rejected = 0
        all_rows = self._rows([(groups[op.group_id], op.block_ids) for op in meta.saves])
        for op, rows in zip(meta.saves, all_rows):
            group = groups[op.group_id]
            view = self._group_views.get(op.group_id)
            if view is not None:
                value = torch.empty((view.shape[0], len(rows), view.shape[2]), dtype=view.dtype)
                torch.index_select(view, 1, rows, out=value)
                value = value.view(torch.uint8)
            else:
                per_layer = []
                for name in group.layer_names:
                    parts = [t.index_select(0, rows).reshape(len(rows), -1).view(torch.uint8) for t in self._layers[name]]
                    per_layer.append(parts[0] if len(parts) == 1 else torch.cat(parts, dim=1))
                value = torch.stack(per_layer)
            if self.store.put(self._key(op.group_id, op.chunk_hash), value):
                stored += value.numel()
            else:
                rejected += 1
        if stored:
            self._count("stored_bytes", stored)
        if rejected:
            self._count("store_rejected", rejected)

    def get_transfer_results(self, finished_req_ids: set[str]) -> KVConnectorTransferResults:
        """Finished (and failed) loads since the last call; stores never outlive their step."""
        results = KVConnectorTransferResults(
            finished_recving=set(self._finished_recving), failed_recving=set(self._failed_recving)
        )
        self._finished_recving.clear()
        self._failed_recving.clear()
        return results

    def get_finished(self, finished_req_ids: set[str]):
        """Older form of `get_transfer_results`."""
        results = self.get_transfer_results(finished_req_ids)
        return set(), results.finished_recving

    def _count(self, name: str, value: float) -> None:
        self._stats[name] = self._stats.get(name, 0) + value

    def get_kv_connector_stats(self) -> KVConnectorStats | None:
        """Bytes loaded and stored, misses and rejected stores since the last call."""
        if not self._stats:
            return None
        stats, self._stats = KVConnectorStats(data=dict(self._stats)), {}
        return stats


def layers_as_one_view(tensors: list[torch.Tensor]) -> torch.Tensor | None:
    """[layers, rows, words] over `tensors` when they are equal, evenly spaced views of one allocation.

    A row is one block of one layer (its first dimension); words are the widest integer that divides the
    row, the strides and the offset, since CPU index copies run per element. None for any other layout.
    """
    first = tensors[0]
    if first.dim() < 2 or first.shape[0] == 0 or not first[0].is_contiguous():
        return None
    storage = first.untyped_storage().data_ptr()
    for t in tensors:
        if (t.dtype, t.shape, t.stride(), t.device) != (first.dtype, first.shape, first.stride(), first.device) \
                or t.untyped_storage().data_ptr() != storage:
            return None
    item = first.element_size()
    offsets = [t.data_ptr() - first.data_ptr() for t in tensors]
    layer_stride = offsets[1] if len(offsets) > 1 else 0
    if any(off != i * layer_stride for i, off in enumerate(offsets)):
        return None
    row_bytes, row_stride = first[0].numel() * item, first.stride(0) * item
    as_bytes = first.view(torch.uint8)
    word = next(w for w in (8, 4, 2, 1)
                if all(x % w == 0 for x in (row_bytes, row_stride, layer_stride, as_bytes.storage_offset())))
    view = torch.as_strided(as_bytes, (len(tensors), first.shape[0], row_bytes), (layer_stride, row_stride, 1),
                            as_bytes.storage_offset())
    return view.view({8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.uint8}[word])


class LMCacheLikeConnector(ChunkedPrefixConnector, SupportsHMA):
    """The reference HMA prefix-cache connector: every transferable group (see the module docstring)."""


class ExampleConnector(ChunkedPrefixConnector):
    """A non-HMA example connector: it transfers KV cache group 0 only and has the single-group finish hook.

    Like vLLM's in-tree examples it is correct on single-group models only; it is not `SupportsHMA`.
    """

    def _select_groups(self, groups: list[GroupInfo]) -> list[GroupInfo]:
        return [g for g in groups if g.group_id == 0]
