"""Deliberately buggy connectors, one known HMA mistake each (connector spec section 2.4).

Each is the reference LMCache-like connector with one behaviour broken, so the check named for the bug
is the one expected to fail.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile

from reference_impl.connector.base import KVConnectorTransferResults
from reference_impl.connector.groups import FULL, MAMBA, GroupInfo
from reference_impl.connector.lmcache_like import NULL_BLOCK_ID, LMCacheLikeConnector, TransferOp, extra_config
from reference_impl.connector.hashing import chunk_hashes
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


class MissingHooksConnector:
    """Not a connector at all (no hooks)."""

    def __init__(self, vllm_config, role, kv_cache_config):
        self.role = role


