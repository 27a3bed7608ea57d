"""Deliberately buggy connectors, one known HMA mistake each (connector spec section 2.4).

Each is the reference LMCache-like connector with one behaviour broken, so the check named for the bug
is the one expected to fail.
"""

from __future__ import annotations

import dataclasses


from reference_impl.connector.lmcache_like import LMCacheLikeConnector
from reference_impl.connector.groups import FULL, GroupInfo


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
    """Keys its objects by its own class name: vendor targets share one in-process store, and objects laid
    out by a bug (other groups, other row counts) must not reach the other connectors of the same run."""

    def __init__(self, vllm_config, role, kv_cache_config=None):
        super().__init__(vllm_config, role, kv_cache_config)
        self.model_name = f"{self.model_name}/{type(self).__name__}"


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


class MissingHooksConnector:
    """Not a connector at all (no hooks)."""

    def __init__(self, vllm_config, role, kv_cache_config):
        self.role = role


