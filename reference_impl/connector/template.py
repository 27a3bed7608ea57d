"""A minimal HMA connector to copy: the smallest connector in kvconform that passes the vendor suite.

Copy this file and its declaration (`harness/targets/connector/template_declaration.py`: what the suite is told
about it, and its optional backdoors), rename the classes, put your backend where `_STORE` is, and run the suite on
the declaration (docs/vendor.md, "Your first hour"):

    pytest --pyargs suites.connector --kv-connector mypkg.declare:MyConnectorUnderTest -n 2

The class carries only what vLLM calls: the suite's white-box hooks (`kvconform_*`) live on the declaration, which
reaches into this connector's state (`store`, `_hashes`, `_key`, `_requests`) the way a test reaches into the code it
tests.

How it works. A prompt is cut into `chunk_size`-token chunks, each keyed by a SHA-256 chain over the tokens
(`hashing.chunk_hashes`: stable across processes, salted by cache salt and LoRA). For every (chunk, KV cache
group, TP rank) one object holds that group's blocks of the chunk: copied out of the paged KV tensors at the
end of the step that computed them, copied back before the forward of a request that hits. The hit is the
longest run of chunks that *every* group can serve (`groups.fold_hit_chunks`). Each rule below names the check
(`kvconform checks`, C01-C36) that fails without it.

What it leaves out, on purpose (the full example, `lmcache_like.py`, has each): a bounded store with eviction
and pins that keep looked-up objects until they are loaded (`store.ChunkStore`), a disk tier, lookups that
answer later (`None`), statistics, KV events, batched copies. `_STORE` is a dict in this process that never
evicts, so the suite's capacity probes (C04, C31, C35) never fill it.

In vLLM, import `KVConnectorBase_V1`, `KVConnectorMetadata`, `KVConnectorRole`, `KVConnectorTransferResults`
and `SupportsHMA` from `vllm.distributed.kv_transfer.kv_connector.v1.base` instead (vLLM 0.33); the helpers
from `reference_impl.connector.groups` and `.hashing` are plain Python.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from reference_impl.connector.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
    KVConnectorTransferResults,
    SupportsHMA,
)
from reference_impl.connector.groups import (MAMBA, GroupInfo, drafter_reads_last_block, fold_hit_chunks,
                                             transfer_groups)
from reference_impl.connector.hashing import chunk_hashes, object_key

NULL = 0  # vLLM's null block: padding in block tables, never read nor written (C15)
OPTIONS = {"chunk_size": 256, "load_async": False}  # kv_connector_extra_config keys, with their defaults

# store key -> the object: one tensor per (layer, state tensor) of the group, each [rows of its blocks, ...].
# One dict for the whole process: the scheduler-role and worker-role instances share it (in vLLM they live in
# different processes, so a real connector puts a server or shared memory here).
_STORE: dict[str, list[torch.Tensor]] = {}


@dataclass
class Transfer:
    """Copy one (chunk, group) object from or to `block_ids`, one id per block of the object (NULL: skip it)."""

    req_id: str
    group_id: int
    chunk_hash: bytes
    block_ids: list[int]


@dataclass
class TemplateMetadata(KVConnectorMetadata):
    """One step's work for the workers. It crosses a process boundary in vLLM, so it must pickle (C12)."""

    loads: dict[str, list[Transfer]] = field(default_factory=dict)  # req_id -> every object of its hit
    saves: list[Transfer] = field(default_factory=list)


@dataclass
class _Request:
    """Scheduler-side state of one admitted request."""

    request: object
    tables: tuple[list[int], ...] = ()  # block ids per KV cache group, as the scheduler announced them
    saved_chunks: int = 0  # chunks [0, saved_chunks) were considered for storing
    load: tuple[int, int, tuple] | None = None  # (first token, end token, block tables) to load this step


class TemplateConnector(KVConnectorBase_V1, SupportsHMA):
    """A prefix cache for hybrid models: full attention, sliding window and Mamba groups (see the module doc).

    Declaring `SupportsHMA` is what lets vLLM run it on models with several KV cache groups (C01); the finish
    hook is then `request_finished_all_groups`. Inherited from `KVConnectorBase_V1` as they are:
    `bind_connector_metadata` / `clear_connector_metadata` (hold the step's metadata) and the optional hooks.
    """

    def __init__(self, vllm_config, role: KVConnectorRole, kv_cache_config):
        super().__init__(vllm_config, role, kv_cache_config)
        options = dict(OPTIONS, **(getattr(vllm_config.kv_transfer_config, "kv_connector_extra_config", None) or {}))
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise ValueError(f"kv_connector_extra_config has unknown keys {unknown}; accepted: {sorted(OPTIONS)}")
        self.chunk_size = options["chunk_size"]
        self.load_async = bool(options["load_async"])
        if not isinstance(self.chunk_size, int) or self.chunk_size <= 0:
            raise ValueError(f"kv_connector_extra_config.chunk_size is {self.chunk_size!r}; "
                             "accepted: a positive integer")
        # C03: only groups that are prefix-cached and transferable; a spec it cannot serve (cross-attention,
        # Mamba without per-boundary states) raises ValueError here, at start, naming the group.
        self.groups: dict[int, GroupInfo] = {g.group_id: g for g in transfer_groups(kv_cache_config)}
        self.use_eagle = drafter_reads_last_block(vllm_config)  # C41: EAGLE / MTP speculative decoding
        for g in self.groups.values():
            # C06/C18: a hit ends on a chunk boundary, which must be a block boundary of every attention group.
            if g.kind != MAMBA and self.chunk_size % g.block_size:
                raise ValueError(f"kv_connector_extra_config.chunk_size is {self.chunk_size}; accepted: a multiple of "
                                 f"every attention block size (group {g.group_id}: {g.block_size})")
        # C30/C34: keys name the model, the TP size and rank, the group and its dtype, so deployments that share a
        # store never read each other's objects.
        self.model = str(vllm_config.model_config.model)
        self.world_size = int(vllm_config.parallel_config.tensor_parallel_size)
        self.rank = int(vllm_config.parallel_config.rank)
        self.num_blocks = int(kv_cache_config.num_blocks)
        # The backend: every instance of the process reads and writes the one dict (a real connector: its client).
        self.store = _STORE
        # scheduler side
        self._lookups: dict[str, int] = {}  # req_id -> num_computed_tokens of its last lookup
        self._requests: dict[str, _Request] = {}
        self._failed: set[str] = set()  # requests whose load failed
        # worker side
        self._kv: dict[str, list[torch.Tensor]] = {}
        self._kernel_ratio = 1
        self._finished_loads: set[str] = set()
        self._failed_loads: set[str] = set()

    # ---- keys --------------------------------------------------------------------------------------------------
    def _key(self, group_id: int, chunk_hash: bytes, rank: int | None = None) -> str:
        rank = self.rank if rank is None else rank
        return object_key(self.model, self.world_size, rank, group_id, chunk_hash, self.groups[group_id].dtype)

    def _hashes(self, request, num_tokens: int) -> list[bytes]:
        # C30: cache salt and LoRA enter the hash; C36: SHA-256, never Python's per-process salted hash().
        lora = getattr(getattr(request, "lora_request", None), "lora_name", None)
        return chunk_hashes(request.all_token_ids[:num_tokens], self.chunk_size,
                            cache_salt=getattr(request, "cache_salt", None), lora_name=lora)

    def _stored(self, group: GroupInfo, chunk_hash: bytes) -> bool:
        # C34: offer only what every TP rank can load.
        return all(self._key(group.group_id, chunk_hash, r) in self.store for r in range(self.world_size))

    def _positions(self, group: GroupInfo, chunk: int) -> list[int]:
        """Block-table positions the (chunk, group) object holds."""
        end = (chunk + 1) * self.chunk_size
        if group.kind == MAMBA:
            return [end // group.block_size - 1]  # C09: one state, the one after the chunk's last token
        # Full attention: the whole chunk. Sliding window: only the chunk's last `window - 1` tokens, all a hit
        # ending there reads; earlier blocks may already be null (freed) when the chunk completes (C24).
        first = (end - group.chunk_tail_tokens(self.chunk_size)) // group.block_size
        return list(range(first, end // group.block_size))

    # ---- scheduler role ----------------------------------------------------------------------------------------
    def get_num_new_matched_tokens(self, request, num_computed_tokens: int) -> tuple[int, bool]:
        """The tokens beyond vLLM's local hit that every group can load; no side effect but the recorded start,
        since vLLM may ask several times for one request (C04)."""
        if request.request_id in self._failed or getattr(request, "skip_reading_prefix_cache", False):
            return 0, False  # C23: a request whose load failed is recomputed, never offered the same load again
        # C06: never the whole prompt; the last token is computed for its logits.
        max_chunks = (request.num_tokens - 1) // self.chunk_size
        hashes = self._hashes(request, max_chunks * self.chunk_size)
        present = {gid: [self._stored(g, h) for h in hashes] for gid, g in self.groups.items()}
        # C07: per group, a hit of m chunks needs every chunk before m (full attention), the chunks of the window
        # ending at m (sliding window), the state exactly at m (Mamba); the largest m every group serves wins.
        windows = {gid: g.window_chunks(self.chunk_size) for gid, g in self.groups.items()}
        hit = fold_hit_chunks(present, windows, len(hashes))
        if self.use_eagle and hit:
            # C41: an EAGLE-style drafter needs the hidden states of the hit's last block: leave it to recompute.
            hit = fold_hit_chunks(present, windows, hit - 1)
        hit *= self.chunk_size
        if hit <= num_computed_tokens:
            return 0, False  # C05: never (0, True)
        self._lookups[request.request_id] = num_computed_tokens
        return hit - num_computed_tokens, self.load_async

    def update_state_after_alloc(self, request, blocks, num_external_tokens: int) -> None:
        """Plan the load of the hit. vLLM calls this for every admitted request with ALL its blocks, and again with
        0 external tokens when an async load's request is re-admitted: decide from `num_external_tokens` (C10)."""
        state = self._requests.setdefault(request.request_id, _Request(request))
        start = self._lookups.pop(request.request_id, 0)
        if num_external_tokens > 0:
            state.load = (start, start + num_external_tokens, blocks.get_block_ids())

    def build_connector_meta(self, scheduler_output) -> TemplateMetadata:
        """This step's loads and stores; reads the SchedulerOutput, never changes it (C12)."""
        meta = TemplateMetadata()
        computed: dict[str, int] = {}
        # C11: follow each request's block tables: a new request brings its whole table, a running one appends
        # blocks, a resumed one (after preemption) brings a whole new table that replaces the old one.
        for new in scheduler_output.scheduled_new_reqs:
            if new.req_id in self._requests:
                state = self._requests[new.req_id]
                state.tables = tuple(list(ids) for ids in new.block_ids)
                computed[new.req_id] = new.num_computed_tokens
        cached = scheduler_output.scheduled_cached_reqs
        for i, req_id in enumerate(cached.req_ids):
            state = self._requests.get(req_id)
            if state is None:
                continue
            added = cached.new_block_ids[i]
            if req_id in cached.resumed_req_ids:
                state.tables, state.saved_chunks = tuple(list(ids) for ids in added), 0
            elif added is not None:
                for table, ids in zip(state.tables, added):
                    table.extend(ids)
            computed[req_id] = cached.num_computed_tokens[i]
        for req_id, state in self._requests.items():
            if state.load is not None:
                meta.loads[req_id] = self._load_transfers(req_id, state)
                state.load = None
        for req_id, num_tokens in scheduler_output.num_scheduled_tokens.items():
            if req_id in computed and num_tokens > 0:
                meta.saves += self._save_transfers(req_id, self._requests[req_id], computed[req_id] + num_tokens)
        return meta

    def _load_transfers(self, req_id: str, state: _Request) -> list[Transfer]:
        start, end, tables = state.load
        hashes = self._hashes(state.request, end)
        last = end // self.chunk_size
        transfers = []
        for gid, g in self.groups.items():
            # Full attention reads every chunk, a sliding window the window's, chunked local attention its chunk's.
            first = max(start // self.chunk_size, g.first_chunk(last, self.chunk_size))
            for chunk in range(first, last):
                # C16/C19: write only blocks the request owns beyond vLLM's local hit (local blocks may be shared
                # with running requests); null positions, out of the sliding window, stay null (C15).
                ids = [tables[gid][p] if p < len(tables[gid]) and p >= start // g.block_size else NULL
                       for p in self._positions(g, chunk)]
                transfers.append(Transfer(req_id, gid, hashes[chunk], ids))
        return transfers

    def _save_transfers(self, req_id: str, state: _Request, computed_end: int) -> list[Transfer]:
        """Stores of every chunk that becomes complete in this step (its KV is written by this step's forward)."""
        complete = computed_end // self.chunk_size
        if complete <= state.saved_chunks:
            return []
        hashes = self._hashes(state.request, complete * self.chunk_size)
        transfers = []
        for chunk in range(state.saved_chunks, complete):
            chunk_end = (chunk + 1) * self.chunk_size
            for gid, g in self.groups.items():
                # C09: a Mamba state exists only at a block boundary, and only at the end of the step computing it.
                if g.kind == MAMBA and (chunk_end != computed_end or chunk_end % g.block_size):
                    continue
                table = state.tables[gid]
                ids = [table[p] if p < len(table) else NULL for p in self._positions(g, chunk)]
                # C15: a null block holds no KV (it left the window), so the object cannot be stored whole.
                # C26: an object already stored is not stored again (a resumed request recomputes its chunks).
                if NULL not in ids and not self._stored(g, hashes[chunk]):
                    transfers.append(Transfer(req_id, gid, hashes[chunk], ids))
        state.saved_chunks = complete
        return transfers

    def update_connector_output(self, connector_output) -> None:
        """C22/C23: remember failed loads; vLLM recomputes those requests, and the next lookup must not offer the
        same load again (it would fail again, for ever)."""
        self._failed |= set(connector_output.failed_recving or ())

    def get_loaded_kv_cache_group_ids(self, request) -> tuple[int, ...]:
        """C20: the groups a load writes; vLLM does not zero their new blocks before an async load, so every
        non-null block of the hit in these groups is written. A scratch group is not among them (C03)."""
        return tuple(self.groups)

    def request_finished_all_groups(self, request, block_ids: tuple[list[int], ...]) -> tuple[bool, None]:
        """Drop the request's state (C31). Stores were copied in `wait_for_save` of the step that computed them, so
        the blocks are not needed any more: no delayed free (C25). Called for aborted requests too (C27)."""
        self._lookups.pop(request.request_id, None)
        self._requests.pop(request.request_id, None)
        self._failed.discard(request.request_id)
        return False, None

    # ---- worker role -------------------------------------------------------------------------------------------
    def register_kv_caches(self, kv_caches: dict) -> None:
        """Keep the paged tensors: attention layers `[blocks, block_size, heads, 2*head_size]`, Mamba layers a list
        of state tensors `[blocks, *shape]`."""
        self._kv = {name: list(t) if isinstance(t, (list, tuple)) else [t] for name, t in kv_caches.items()}
        # C18: an attention backend may split each block into kernel blocks: num_blocks x ratio rows.
        attention = [self._kv[n][0] for g in self.groups.values() if g.kind != MAMBA for n in g.layer_names]
        self._kernel_ratio = attention[0].shape[0] // self.num_blocks if attention else 1

    def _tensors(self, group: GroupInfo) -> list[torch.Tensor]:
        # C17: a group's blocks are read and written through that group's layers only (groups overlay one buffer).
        return [t for name in group.layer_names for t in self._kv[name]]

    def _rows(self, group: GroupInfo, blocks: list[int]) -> torch.Tensor:
        """Tensor rows of `blocks` (kernel blocks for attention; a Mamba state is never split)."""
        ratio = 1 if group.kind == MAMBA else self._kernel_ratio
        return torch.tensor([b * ratio + k for b in blocks for k in range(ratio)], dtype=torch.long)

    def start_load_kv(self, forward_context, **kwargs) -> None:
        """Copy each hit into the request's blocks, before the forward reads them (sync loads). Every object is
        fetched first: when one is missing, nothing is written and the request's load fails as a whole (C22)."""
        meta = self._connector_metadata
        if not isinstance(meta, TemplateMetadata):
            return
        for req_id, transfers in meta.loads.items():
            objects = [self.store.get(self._key(t.group_id, t.chunk_hash)) for t in transfers]
            if any(obj is None for obj in objects):
                # C22: reported per request, never as block ids (vLLM raises on those with several groups); a
                # failed load is a finished one too.
                self._failed_loads.add(req_id)
                self._finished_loads.add(req_id)
                continue
            for t, obj in zip(transfers, objects):
                group = self.groups[t.group_id]
                slots = [i for i, b in enumerate(t.block_ids) if b != NULL]
                if slots:
                    dst, src = self._rows(group, [t.block_ids[i] for i in slots]), self._rows(group, slots)
                    for tensor, saved in zip(self._tensors(group), obj):
                        tensor.index_copy_(0, dst, saved.index_select(0, src))
            if self.load_async:
                self._finished_loads.add(req_id)  # C21: every async load is reported finished, once

    def wait_for_layer_load(self, layer_name: str) -> None:
        """Nothing: loads are whole in `start_load_kv`. Mamba layers never call layer hooks (C28)."""

    def save_kv_layer(self, layer_name: str, kv_layer, attn_metadata, **kwargs) -> None:
        """Nothing: stores run in `wait_for_save`, which also sees the Mamba states (C28)."""

    def wait_for_save(self) -> None:
        """Copy this step's completed chunks into the store now, while the request still owns the blocks: after
        this step they may go to another request (sliding window, finish, preemption: C24, C25, C26)."""
        meta = self._connector_metadata
        if not isinstance(meta, TemplateMetadata):
            return
        for save in meta.saves:
            group = self.groups[save.group_id]
            rows = self._rows(group, save.block_ids)
            # index_select copies: the object owns its bytes, whatever happens to the blocks next.
            key = self._key(save.group_id, save.chunk_hash)
            self.store[key] = [kv.index_select(0, rows) for kv in self._tensors(group)]

    def get_transfer_results(self, finished_req_ids: set[str]) -> KVConnectorTransferResults:
        """Loads finished (async, or failed) since the last call. No stores are pending, so nothing is sending."""
        results = KVConnectorTransferResults(finished_recving=self._finished_loads, failed_recving=self._failed_loads)
        self._finished_loads, self._failed_loads = set(), set()
        return results
