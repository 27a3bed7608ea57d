"""Deliberately buggy connectors, one known HMA mistake each (connector spec section 2.4).

Each is the reference LMCache-like connector with one behaviour broken, so the check named for the bug
is the one expected to fail.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile

import torch

from reference_impl.connector.base import KVConnectorTransferResults
from reference_impl.connector.groups import CHUNKED, FULL, MAMBA, SLIDING, GroupInfo
from reference_impl.connector.lmcache_like import NULL_BLOCK_ID, LMCacheLikeConnector, TransferOp, extra_config
from reference_impl.connector.hashing import chunk_hashes, object_key
from reference_impl.connector.store import shared_store


class BlockIdsZeroConnector(LMCacheLikeConnector):
    """Uses `block_ids[0]` (the first group's table) for every layer: caught by C17 layer-group-routing."""

    def _as_group_zero(self, tracker):
        first = tracker.block_ids[self.groups[0].group_id]
        return dataclasses.replace(tracker, block_ids={g: first for g in tracker.block_ids})

    def _load_ops(self, req_id, tracker, start, end):
        return super()._load_ops(req_id, self._as_group_zero(tracker), start, end)

    def _save_ops(self, req_id, tracker, computed_end):
        view = self._as_group_zero(tracker)
        ops = super()._save_ops(req_id, view, computed_end)
        tracker.saved_chunks, tracker.hashes = view.saved_chunks, view.hashes
        return ops


class NullBlockWriterConnector(LMCacheLikeConnector):
    """Loads also write into block 0 (the null block): caught by C15 null-block-untouched."""

    def _load_request(self, ops):
        ok = super()._load_request(ops)
        for tensors in self._layers.values():
            for tensor in tensors:
                tensor[0] = tensor[0] + 1
        return ok


class FullAttentionHitConnector(LMCacheLikeConnector):
    """Computes the hit from full-attention groups only: caught by C07 hit-min-over-groups."""

    def _all_ranks_have(self, group_id, chunk_hash):
        group = next(g for g in self.groups if g.group_id == group_id)
        return super()._all_ranks_have(group_id, chunk_hash) if group.kind == FULL else True


class OutOfWindowStoreConnector(LMCacheLikeConnector):
    """Copies each store one step late, from blocks that may have left the window and been reused:
    caught by C24 swa-reuse-race."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._late = None

    def wait_for_save(self):
        current, late = self._connector_metadata, self._late
        self._late = current
        if late is not None:
            self._connector_metadata = late
            try:
                super().wait_for_save()
            finally:
                self._connector_metadata = current


class PerBlockLoadErrorConnector(LMCacheLikeConnector):
    """Reports failed loads as block ids even on multi-group models: caught by C22 failure-by-request."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._invalid: set[int] = set()

    def start_load_kv(self, forward_context, **kwargs):
        super().start_load_kv(forward_context, **kwargs)
        meta = self._connector_metadata
        for req_id in list(self._failed_recving):
            self._failed_recving.discard(req_id)
            self._finished_recving.discard(req_id)
            for op in meta.loads.get(req_id, ()):
                self._invalid.update(b for b in op.block_ids if b > 0)

    def get_block_ids_with_load_errors(self):
        invalid, self._invalid = self._invalid, set()
        return invalid


class _OwnKeysConnector(LMCacheLikeConnector):
    """Keys its objects by its own class name, in a store of its own: vendor targets of one run share the
    process, and what a bug stores or pins must not reach the other connectors of the same run."""

    default_disk_path: str | None = None

    def __init__(self, vllm_config, role, kv_cache_config=None):
        super().__init__(vllm_config, role, kv_cache_config)
        self.model_name = f"{self.model_name}/{type(self).__name__}"
        options = extra_config(vllm_config)
        disk = options["disk_path"] or self.default_disk_path
        self.store = shared_store(f"{options['store_name']}/{type(self).__name__}/{disk}", int(options["cpu_bytes"]),
                                  disk, int(options["disk_bytes"]))


class ScratchServingConnector(_OwnKeysConnector):
    """Ignores `prefix_cacheable=False` and serves scratch groups as full attention: caught by C03
    group-discovery."""

    def _select_groups(self, groups):
        served = {g.group_id for g in groups}
        for gid, group in enumerate(self._kv_cache_config.kv_cache_groups):
            if gid not in served and group.enable_kv_transfer:
                groups.append(GroupInfo(gid, FULL, int(group.kv_cache_spec.block_size), tuple(group.layer_names)))
        return sorted(groups, key=lambda g: g.group_id)


class NoneAsZeroConnector(_OwnKeysConnector):
    """Its backend answers lookups a step late, but it reports "not ready" as a miss (0) instead of None,
    so the scheduler never asks again and the stored prefix is never loaded: caught by C05
    lookup-none-then-value."""

    def __init__(self, vllm_config, role, kv_cache_config=None):
        super().__init__(vllm_config, role, kv_cache_config)
        self.lookup_latency_steps = max(self.lookup_latency_steps, 1)

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        hit, load_async = super().get_num_new_matched_tokens(request, num_computed_tokens)
        return (0, load_async) if hit is None else (hit, load_async)


class KernelRatioIgnoringConnector(_OwnKeysConnector):
    """Indexes registered tensors by manager block id even when they hold kernel blocks
    (B = num_blocks x ratio): caught by C18 per-group-block-size."""

    def register_kv_caches(self, kv_caches):
        super().register_kv_caches(kv_caches)
        self._kernel_ratio = 1


class GroupSwapConnector(_OwnKeysConnector):
    """Moves each group's KV through the next group's block table (a wrong-group bug that is not
    `block_ids[0]`): caught by C17 layer-group-routing."""

    def _other_groups(self, tracker):
        ids = [g.group_id for g in self.groups]
        rotated = {g: tracker.block_ids[ids[(i + 1) % len(ids)]] for i, g in enumerate(ids)}
        return dataclasses.replace(tracker, block_ids=rotated)

    def _load_ops(self, req_id, tracker, start, end):
        return super()._load_ops(req_id, self._other_groups(tracker), start, end)


class MambaBlindHitConnector(_OwnKeysConnector):
    """Its hit rule ignores the Mamba state (any chunk end counts, stored state or not): caught by C07
    hit-min-over-groups."""

    def _all_ranks_have(self, group_id, chunk_hash):
        group = next(g for g in self.groups if g.group_id == group_id)
        return True if group.kind == MAMBA else super()._all_ranks_have(group_id, chunk_hash)


class PinLeakConnector(_OwnKeysConnector):
    """Never releases the pins a lookup took when the request finishes or is aborted (only a later lookup of
    the same request would): its store fills with pinned objects and stops storing. Caught by C04
    lookup-idempotent (and C31, C35)."""

    def request_finished_all_groups(self, request, block_ids):
        req_id = request.request_id
        self._trackers.pop(req_id, None)
        self._lookups.pop(req_id, None)
        self._lookup_ready.pop(req_id, None)
        self._bypass.discard(req_id)
        return False, None

    def update_connector_output(self, connector_output):
        self._bypass.update(connector_output.failed_recving or ())


class SaltBlindConnector(_OwnKeysConnector):
    """Keys ignore the request's cache salt: caught by C30 key-isolation."""

    def _hashes(self, request, num_tokens=None):
        tokens = request.all_token_ids if num_tokens is None else request.all_token_ids[:num_tokens]
        lora = getattr(getattr(request, "lora_request", None), "lora_name", None)
        return chunk_hashes(tokens, self.chunk_size, lora_name=lora)


class LoRABlindConnector(_OwnKeysConnector):
    """Keys ignore the request's LoRA adapter: caught by C30 key-isolation."""

    def _hashes(self, request, num_tokens=None):
        tokens = request.all_token_ids if num_tokens is None else request.all_token_ids[:num_tokens]
        return chunk_hashes(tokens, self.chunk_size, cache_salt=getattr(request, "cache_salt", None))


class ProcessSaltedKeysConnector(_OwnKeysConnector):
    """Mixes Python's per-process `hash()` into its keys; its store is a local disk cache that other processes
    read: caught by C36 determinism-across-processes."""

    default_disk_path = os.path.join(tempfile.gettempdir(), "kvconform-buggy-salted-keys")

    def _hashes(self, request, num_tokens=None):
        return [h + (hash(h) & (2**63 - 1)).to_bytes(8, "little") for h in super()._hashes(request, num_tokens)]


_PROCESS_TOKEN = os.urandom(8)


class ProcessRandomKeysConnector(_OwnKeysConnector):
    """Mixes a token drawn once per process into its keys (as a key salted with a random nonce, a pid or an id()
    would): same PYTHONHASHSEED or not, a new process never finds what another stored, although the disk tier holds
    it: caught by C36 determinism-across-processes from the files the storing process left behind."""

    def _hashes(self, request, num_tokens=None):
        return [h + _PROCESS_TOKEN for h in super()._hashes(request, num_tokens)]


class _StoreAtFinishConnector(_OwnKeysConnector):
    """A write-back cache: it stores each request once, when it finishes. The finish hook plans the copies
    from the block table it is given; the next step's `wait_for_save` runs them, and the request's blocks
    stay allocated (delay=True) until `finished_sending` reports them. Correct as written; the subclasses
    each break one thing."""

    delay_hma = True  # False: the HMA finish hook lets the blocks go while the copy is still pending
    delay_single = True
    skip_null = True  # False: a null id (a block out of the window) is copied as if it were data

    def __init__(self, vllm_config, role, kv_cache_config=None):
        super().__init__(vllm_config, role, kv_cache_config)
        self._finish_saves: list[TransferOp] = []
        self._finish_ids: set[str] = set()
        self._sent: set[str] = set()

    def _save_ops(self, req_id, tracker, computed_end):
        return []

    def _finish_ops(self, request, block_ids) -> list[TransferOp]:
        hashes = self._hashes(request, request.num_computed_tokens)
        ops = []
        for chunk, chunk_hash in enumerate(hashes):
            for group in self.groups:
                if group.kind == MAMBA and not self._mamba_chunk_has_state(group, chunk):
                    continue
                table = block_ids[group.group_id] if group.group_id < len(block_ids) else []
                ids = [table[p] if p < len(table) else NULL_BLOCK_ID for p in self._group_slots(group, chunk)]
                if self.skip_null and NULL_BLOCK_ID in ids:
                    continue
                ops.append(TransferOp(request.request_id, group.group_id, chunk_hash, ids))
        return ops

    def _finish(self, request, block_ids, delay: bool):
        ops = self._finish_ops(request, block_ids)
        self._finish_saves.extend(ops)
        if delay and ops:
            self._finish_ids.add(request.request_id)
        LMCacheLikeConnector.request_finished_all_groups(self, request, block_ids)
        return bool(delay and ops), None

    def request_finished_all_groups(self, request, block_ids):
        return self._finish(request, block_ids, self.delay_hma)

    def request_finished(self, request, block_ids):
        return self._finish(request, (block_ids,), self.delay_single)

    def build_connector_meta(self, scheduler_output):
        meta = super().build_connector_meta(scheduler_output)
        meta.saves.extend(self._finish_saves)
        meta.finish_sending = set(self._finish_ids)
        self._finish_saves, self._finish_ids = [], set()
        return meta

    def wait_for_save(self):
        super().wait_for_save()
        self._sent |= getattr(self._connector_metadata, "finish_sending", set())

    def get_transfer_results(self, finished_req_ids):
        results = super().get_transfer_results(finished_req_ids)
        sent, self._sent = self._sent, set()
        return KVConnectorTransferResults(finished_sending=sent, finished_recving=results.finished_recving,
                                          failed_recving=results.failed_recving)


class NullBlockStoringConnector(_StoreAtFinishConnector):
    """Stores at finish from the finish hook's table, where blocks that left the sliding window are null
    (id 0), and copies block 0 as if it were their data: caught by C15 null-block-untouched."""

    skip_null = False


class FinishNoDelayConnector(_StoreAtFinishConnector):
    """Stores at finish but returns delay=False from both finish hooks: the copy runs one step later, after
    the blocks went to the next request. Caught by C25 finish-reuse-race."""

    delay_hma = delay_single = False


class HMAStubFinishConnector(_StoreAtFinishConnector):
    """Declares SupportsHMA, but only its single-group `request_finished` delays the free for the pending
    copy; `request_finished_all_groups` lets every group's blocks go at once: caught by C01 declares-hma."""

    delay_hma = False


class RaisingConnector(LMCacheLikeConnector):
    """Raises inside a hook: every check that reaches the hook fails with the hook named."""

    def build_connector_meta(self, scheduler_output):
        raise RuntimeError("boom in build_connector_meta")


class HangingConnector(LMCacheLikeConnector):
    """Never returns from a hook: the check fails after the per-check timeout, naming the hook."""

    def wait_for_save(self):
        import time

        while True:
            time.sleep(0.05)


class OldConstructorConnector(LMCacheLikeConnector):
    """The pre-0.11 constructor without kv_cache_config: rejected with a clear error."""

    def __init__(self, vllm_config, role):
        super().__init__(vllm_config, role, None)


class UnreachableBackendConnector(LMCacheLikeConnector):
    """The first run against a backend that is not there: the constructor raises (one load error, not a
    failure per check)."""

    def __init__(self, vllm_config, role, kv_cache_config):
        raise ConnectionError("cannot reach the cache server at 10.0.0.7:65432")


class ExtraArgumentConnector(LMCacheLikeConnector):
    """A constructor that needs an argument vLLM never passes (a wrong signature)."""

    def __init__(self, vllm_config, role, kv_cache_config, backend_url):
        super().__init__(vllm_config, role, kv_cache_config)


# ---- blind spots of issue 19: dtypes, window geometry, completion reports, shared stores, async loads ----------
class _TypedStore:
    """A store proxy that keeps every object as `dtype` values (a typed copy), converting back on the way out."""

    def __init__(self, store, layer_dtype: torch.dtype, dtype: torch.dtype):
        self._store, self._layer_dtype, self._dtype = store, layer_dtype, dtype

    def put(self, key, value):
        return self._store.put(key, value.view(self._layer_dtype).to(self._dtype).view(torch.uint8))

    def get(self, key):
        value = self._store.get(key)
        return None if value is None else value.view(self._dtype).to(self._layer_dtype).view(torch.uint8)

    def __getattr__(self, name):
        return getattr(self._store, name)


class _TypedStoreConnector(_OwnKeysConnector):
    stored_dtype: torch.dtype = torch.float16

    def __init__(self, vllm_config, role, kv_cache_config=None):
        super().__init__(vllm_config, role, kv_cache_config)
        layer_dtype = kv_cache_config.kv_cache_groups[0].kv_cache_spec.dtype
        self.store = _TypedStore(self.store, layer_dtype, self.stored_dtype)


class HalfPrecisionStoreConnector(_TypedStoreConnector):
    """Keeps every object in float16 whatever the KV dtype (exact for float16 models only): caught by C14
    round-trip-bytes on the bfloat16 and float32 presets."""

    stored_dtype = torch.float16


class BFloat16StoreConnector(_TypedStoreConnector):
    """Keeps every object in bfloat16 (it drops float16's low mantissa bits): caught by C14 round-trip-bytes."""

    stored_dtype = torch.bfloat16


class WindowWithinOneChunkConnector(_OwnKeysConnector):
    """Assumes a sliding window never spans more than one chunk (true for window 128 and chunk 256): with a
    600-token window it needs, stores and loads only the last chunk of the window: caught by C14 round-trip-bytes
    on fa+swa600."""

    def _select_groups(self, groups):
        return [dataclasses.replace(g, sliding_window=min(g.sliding_window, self.chunk_size))
                if g.kind == SLIDING else g for g in groups]


class WindowInWholeBlocksConnector(_OwnKeysConnector):
    """Counts a sliding window in whole blocks, rounded down (window // block_size): a window that is no
    multiple of the block loses its oldest block, one shorter than a block needs none: caught by C14
    round-trip-bytes on fa+swa600 and fa+swa8."""

    def _group_slots(self, group, chunk):
        if group.kind != SLIDING:
            return super()._group_slots(group, chunk)
        end = (chunk + 1) * self.chunk_size // group.block_size
        return list(range(max(0, end - group.sliding_window // group.block_size), end))


class DoubleFinishedRecvConnector(_OwnKeysConnector):
    """Reports every finished asynchronous load again in the next step: vLLM's scheduler asserts (the request is
    no longer waiting for a load): caught by C21 async-completion-liveness (with async loads configured)."""

    def __init__(self, vllm_config, role, kv_cache_config=None):
        super().__init__(vllm_config, role, kv_cache_config)
        self._again: set[str] = set()

    def get_transfer_results(self, finished_req_ids):
        results = super().get_transfer_results(finished_req_ids)
        again, self._again = self._again, set(results.finished_recving)
        return KVConnectorTransferResults(results.finished_sending, results.finished_recving | again,
                                          results.failed_recving)


class SyncLoadFinishedRecvConnector(_OwnKeysConnector):
    """Reports synchronous loads in finished_recving too (the request is running, not waiting for a load; vLLM's
    scheduler asserts): caught by C14 round-trip-bytes."""

    def start_load_kv(self, forward_context, **kwargs):
        meta = self._connector_metadata
        super().start_load_kv(forward_context, **kwargs)
        self._finished_recving.update(getattr(meta, "loads", {}) or {})


class PhantomFinishedSendingConnector(_OwnKeysConnector):
    """Reports every finished request in finished_sending although it never delayed a free (their blocks are
    already freed; vLLM's scheduler asserts on the id): caught by C21 async-completion-liveness."""

    def get_transfer_results(self, finished_req_ids):
        results = super().get_transfer_results(finished_req_ids)
        return KVConnectorTransferResults(set(finished_req_ids), results.finished_recving, results.failed_recving)


class ModelBlindKeysConnector(_OwnKeysConnector):
    """Keys ignore the model name (one store serves several models): caught by C30 key-isolation."""

    def _key(self, group_id, chunk_hash, rank=None):
        return object_key(type(self).__name__, self.world_size, self.rank if rank is None else rank, group_id,
                          chunk_hash, self._dtypes.get(group_id, ""))


class DtypeBlindKeysConnector(_OwnKeysConnector):
    """Keys ignore the KV dtype (a bfloat16 deployment reads float16 objects as its own): caught by C30."""

    def _key(self, group_id, chunk_hash, rank=None):
        return object_key(self.model_name, self.world_size, self.rank if rank is None else rank, group_id, chunk_hash)


class TPSizeBlindKeysConnector(_OwnKeysConnector):
    """Keys carry the TP rank but not the TP size (rank 0 of TP=2 holds half the heads of rank 0 of TP=1):
    caught by C30."""

    def _key(self, group_id, chunk_hash, rank=None):
        return object_key(self.model_name, 1, self.rank if rank is None else rank, group_id, chunk_hash,
                          self._dtypes.get(group_id, ""))


class TPBlindKeysConnector(_OwnKeysConnector):
    """Keys carry neither the TP rank nor the TP size (the ranks of TP=2 write and read one object, so one rank
    loads the other's heads): caught by C34 tp-rank-shards."""

    def _key(self, group_id, chunk_hash, rank=None):
        return object_key(self.model_name, 1, 0, group_id, chunk_hash, self._dtypes.get(group_id, ""))


class AsyncEarlyReportConnector(_OwnKeysConnector):
    """With asynchronous loads, reports a load finished in the step it is issued but copies the KV only in the
    next step: caught by C20 loaded-groups-complete, once async loads are configured (`"kvconform":
    {"async_load_config": {"load_async": true}}`); with its default synchronous loads it is correct."""

    def __init__(self, vllm_config, role, kv_cache_config=None):
        super().__init__(vllm_config, role, kv_cache_config)
        self._deferred: list = []

    def start_load_kv(self, forward_context, **kwargs):
        deferred, self._deferred = self._deferred, []
        for ops in deferred:
            self._load_request(ops)
        meta = self._connector_metadata
        if getattr(meta, "async_load_ids", None):
            loads = dict(meta.loads)
            for req_id in meta.async_load_ids:
                self._deferred.append(loads.pop(req_id))
                self._finished_recving.add(req_id)
            self._connector_metadata = dataclasses.replace(meta, loads=loads, async_load_ids=set())
            try:
                return super().start_load_kv(forward_context, **kwargs)
            finally:
                self._connector_metadata = meta
        return super().start_load_kv(forward_context, **kwargs)


class MissingHooksConnector:
    """Not a connector at all (no hooks)."""

    def __init__(self, vllm_config, role, kv_cache_config):
        self.role = role




class AllocTableOnlyConnector(_OwnKeysConnector):
    """Takes a new request's block table only from update_state_after_alloc, never from the scheduler output. Alone
    it stores (the engine hands it the whole table there); inside a MultiConnector, which hands every child but the
    one that loads an empty table, it stores nothing for a cold request: caught by C37
    multiconnector-stores-every-child."""

    def build_connector_meta(self, scheduler_output):
        own = []
        for new in scheduler_output.scheduled_new_reqs:
            tracker = self._trackers.get(new.req_id)
            table = tuple(list(tracker.block_ids.get(g, ())) for g in range(len(new.block_ids))) if tracker else ()
            own.append(dataclasses.replace(new, block_ids=table or new.block_ids))
        return super().build_connector_meta(dataclasses.replace(scheduler_output, scheduled_new_reqs=own))


class LocalHitBlindConnector(_OwnKeysConnector):
    """Answers a lookup with its whole hit whatever the local hit is (the tokens already computed counted twice):
    caught by C38 lookup-at-local-hits."""

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        hit, load_async = super().get_num_new_matched_tokens(request, 0)
        if hit is None or hit <= num_computed_tokens:
            return (hit, load_async) if hit is None else (0, False)
        self._lookups[request.request_id] = (num_computed_tokens, num_computed_tokens + hit)
        return hit, load_async


class LastPromptTokenUnstoredConnector(_OwnKeysConnector):
    """Stores only chunks that end before the prompt's last token (as if that token were always recomputed), so a
    prompt whose length is an exact multiple of the chunk loses its last chunk: caught by C39
    exact-multiple-reload."""

    def _save_ops(self, req_id, tracker, computed_end):
        return super()._save_ops(req_id, tracker, min(computed_end, tracker.request.num_prompt_tokens - 1))


class DefaultChunkHitConnector(_OwnKeysConnector):
    """Counts its hit in chunks of the default 256 tokens whatever chunk_size is configured (the offloaded block
    taken for its default): with a smaller stored block it offers the partial block at a prompt's end, and more,
    which it never stored; at the default it is the reference connector. Caught by C40 offloaded-block-multiple."""

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        hit, load_async = super().get_num_new_matched_tokens(request, num_computed_tokens)
        if not hit:
            return hit, load_async
        chunks = (num_computed_tokens + hit) // self.chunk_size
        end = min(chunks * 256, request.num_tokens - 1)
        self._lookups[request.request_id] = (num_computed_tokens, end)
        return end - num_computed_tokens, load_async


class ChunkedLocalBlindConnector(_OwnKeysConnector):
    """Knows full attention, sliding windows and Mamba, and leaves any other group kind alone (a chunked local
    attention group is neither stored nor loaded), while its hit still counts the groups it serves: a reload on a
    chunked-local model reads stale KV of the hit's attention chunk. Caught by C14 round-trip-bytes on the
    fa+chunked320 preset."""

    def _select_groups(self, groups):
        return [g for g in super()._select_groups(groups) if g.kind != CHUNKED]


class EagleBlindConnector(_OwnKeysConnector):
    """Ignores the engine's speculative config: under EAGLE / MTP it still offers a hit's last block, whose hidden
    states the drafter needs: caught by C41 eagle-drops-last-block."""

    def __init__(self, vllm_config, role, kv_cache_config=None):
        super().__init__(vllm_config, role, kv_cache_config)
        self.use_eagle = False


class EagleLoadPastHitConnector(_OwnKeysConnector):
    """Leaves the last block out of its hit under EAGLE / MTP, then loads the chunk it left out anyway, into blocks
    past the hit: caught by C41 eagle-drops-last-block (its canaries on the request's blocks past the hit)."""

    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        super().update_state_after_alloc(request, blocks, num_external_tokens)
        tracker = self._trackers.get(request.request_id)
        if self.use_eagle and tracker is not None and tracker.load is not None:
            start, end, is_async = tracker.load
            tracker.load = (start, end + self.chunk_size, is_async)
