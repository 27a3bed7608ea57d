"""`MultiConnector`: fans every hook out to child connectors (vLLM's composition rules).

* HMA-capable only when every child is; with more than one KV cache group a non-HMA child is rejected.
* Lookups ask the children in order; the first with a non-zero hit owns that request's load.
* `request_finished_all_groups` reaches every HMA child (a child without SupportsHMA, on a single-group model,
  gets `request_finished`); the free is delayed while any child delays it,
  and a finished send is passed on only after every delaying child reported it.
* `kv_transfer_params` of the children are merged; the same key from two children is an error.

Children come from `kv_connector_extra_config["connectors"]`: a list of dicts with `kv_connector`
(a built-in name or `module:Class`) and optional `kv_connector_module_path`, `kv_connector_extra_config`.
"""

from __future__ import annotations

from dataclasses import dataclass

from reference_impl.connector.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorOutput,
    KVConnectorRole,
    KVConnectorTransferResults,
    KVConnectorWorkerMetadata,
    SupportsHMA,
    supports_hma,
)
from reference_impl.connector.factory import check_constructor, child_configs, load_connector_class


@dataclass
class MultiKVConnectorMetadata(KVConnectorMetadata):
    """One metadata object per child, in child order."""

    metadata: tuple


@dataclass
class MultiKVConnectorWorkerMetadata(KVConnectorWorkerMetadata):
    """One worker metadata object (or None) per child, in child order; aggregated child by child across workers."""

    metadata: tuple

    def aggregate(self, other: "MultiKVConnectorWorkerMetadata") -> "MultiKVConnectorWorkerMetadata":
        return MultiKVConnectorWorkerMetadata(tuple(
            b if a is None else a if b is None else a.aggregate(b) for a, b in zip(self.metadata, other.metadata)))


class MultiConnector(KVConnectorBase_V1, SupportsHMA):
    """Composes several connectors; see the module docstring."""

    def __init__(self, vllm_config, role: KVConnectorRole, kv_cache_config=None):
        super().__init__(vllm_config, role, kv_cache_config)
        configs = child_configs(vllm_config)
        if not configs:
            raise ValueError("MultiConnector needs kv_connector_extra_config['connectors'], a non-empty list")
        self._connectors = []
        multi_group = len(getattr(kv_cache_config, "kv_cache_groups", ())) > 1
        for config in configs:
            ktc = config.kv_transfer_config
            cls = load_connector_class(ktc.kv_connector, ktc.kv_connector_module_path)
            if multi_group and not supports_hma(cls):
                raise ValueError(f"MultiConnector child {cls.__name__} does not support HMA")
            check_constructor(cls)
            self._connectors.append(cls(config, role, kv_cache_config))
        self._owner: dict[str, int] = {}
        self._extra_async_saves: dict[str, int] = {}
        # vLLM's MultiConnector up to 0.22 hands the children that do not load an empty block table in
        # update_state_after_alloc; from 0.32 it hands them the request's real blocks. kvconform's default is the
        # older rule; `kvconform_others_get_blocks` (a run on a release with the newer rule) takes the newer.
        extra = dict(getattr(vllm_config.kv_transfer_config, "kv_connector_extra_config", None) or {})
        self._others_get_blocks = bool(extra.get("kvconform_others_get_blocks", False))

    @property
    def connectors(self) -> tuple:
        """The child connectors, in order."""
        return tuple(self._connectors)

    # ---- worker side --------------------------------------------------------------------------
    def register_kv_caches(self, kv_caches) -> None:
        for c in self._connectors:
            c.register_kv_caches(kv_caches)

    def handle_preemptions(self, connector_metadata) -> None:
        for c, meta in zip(self._connectors, connector_metadata.metadata):
            if hasattr(c, "handle_preemptions"):
                c.handle_preemptions(meta)

    def bind_connector_metadata(self, connector_metadata) -> None:
        super().bind_connector_metadata(connector_metadata)
        for c, meta in zip(self._connectors, connector_metadata.metadata):
            c.bind_connector_metadata(meta)

    def clear_connector_metadata(self) -> None:
        super().clear_connector_metadata()
        for c in self._connectors:
            c.clear_connector_metadata()

    def start_load_kv(self, forward_context, **kwargs) -> None:
        for c in self._connectors:
            c.start_load_kv(forward_context, **kwargs)

    def wait_for_layer_load(self, layer_name: str) -> None:
        for c in self._connectors:
            c.wait_for_layer_load(layer_name)

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs) -> None:
        for c in self._connectors:
            c.save_kv_layer(layer_name, kv_layer, attn_metadata, **kwargs)

    def wait_for_save(self) -> None:
        for c in self._connectors:
            c.wait_for_save()

    def get_transfer_results(self, finished_req_ids: set[str]) -> KVConnectorTransferResults:
        """Union of the children's results (send completion is reconciled on the scheduler side)."""
        merged = KVConnectorTransferResults()
        for c in self._connectors:
            if hasattr(c, "get_transfer_results"):
                r = c.get_transfer_results(finished_req_ids)
            else:
                sending, recving = c.get_finished(finished_req_ids)
                r = KVConnectorTransferResults(set(sending or ()), set(recving or ()))
            merged.finished_sending |= set(r.finished_sending)
            merged.finished_recving |= set(r.finished_recving)
            merged.failed_recving |= set(r.failed_recving)
        return merged

    def build_connector_worker_meta(self) -> MultiKVConnectorWorkerMetadata | None:
        """Each child's worker metadata for its scheduler side (vLLM's MultiConnector does the same); None when no
        child has any."""
        metas = tuple(c.build_connector_worker_meta() if hasattr(c, "build_connector_worker_meta") else None
                      for c in self._connectors)
        return MultiKVConnectorWorkerMetadata(metas) if any(m is not None for m in metas) else None

    def get_block_ids_with_load_errors(self) -> set[int]:
        errors: set[int] = set()
        for c in self._connectors:
            errors |= set(c.get_block_ids_with_load_errors())
        return errors

    def shutdown(self) -> None:
        for c in self._connectors:
            c.shutdown()

    # ---- scheduler side --------------------------------------------------------------------------
    def bind_kv_cache_manager(self, kv_cache_manager) -> None:
        """Every child that takes the engine's KV cache manager gets it (vLLM's MultiConnector forwards it)."""
        for c in self._connectors:
            hook = getattr(c, "bind_kv_cache_manager", None)
            if hook is not None:
                hook(kv_cache_manager)

    def on_new_request(self, request) -> None:
        """Every child hears of a new request (vLLM's MultiConnector fans it out), before any lookup."""
        for c in self._connectors:
            hook = getattr(c, "on_new_request", None)
            if hook is not None:
                hook(request)

    def get_num_new_matched_tokens(self, request, num_computed_tokens: int):
        """The first child with a non-zero hit owns the load; None while a child earlier in order is unsure."""
        for index, c in enumerate(self._connectors):
            hit, load_async = c.get_num_new_matched_tokens(request, num_computed_tokens)
            if hit is None:
                return None, False
            if hit > 0:
                self._owner[request.request_id] = index
                return hit, load_async
        self._owner.pop(request.request_id, None)
        return 0, False

    def update_state_after_alloc(self, request, blocks, num_external_tokens: int) -> None:
        owner = self._owner.get(request.request_id, -1) if num_external_tokens else -1
        empty = blocks.new_empty() if hasattr(blocks, "new_empty") and not self._others_get_blocks else None
        for index, c in enumerate(self._connectors):
            if index == owner:
                c.update_state_after_alloc(request, blocks, num_external_tokens)
            else:
                c.update_state_after_alloc(request, empty if empty is not None else blocks, 0)

    def build_connector_meta(self, scheduler_output) -> MultiKVConnectorMetadata:
        return MultiKVConnectorMetadata(tuple(c.build_connector_meta(scheduler_output) for c in self._connectors))

    def get_loaded_kv_cache_group_ids(self, request) -> tuple[int, ...]:
        owner = self._owner.get(request.request_id)
        if owner is None:
            return super().get_loaded_kv_cache_group_ids(request)
        return tuple(self._connectors[owner].get_loaded_kv_cache_group_ids(request))

    def update_connector_output(self, connector_output: KVConnectorOutput) -> None:
        """Hold back a finished send until every child that delayed the free reported it."""
        for req_id in list(connector_output.finished_sending or ()):
            left = self._extra_async_saves.get(req_id, 1) - 1
            if left > 0:
                self._extra_async_saves[req_id] = left
                connector_output.finished_sending.discard(req_id)
            else:
                self._extra_async_saves.pop(req_id, None)
        multi_meta = connector_output.kv_connector_worker_meta
        try:
            for index, c in enumerate(self._connectors):
                if isinstance(multi_meta, MultiKVConnectorWorkerMetadata):  # each child reads its own
                    connector_output.kv_connector_worker_meta = multi_meta.metadata[index]
                c.update_connector_output(connector_output)
        finally:
            connector_output.kv_connector_worker_meta = multi_meta

    def _finish(self, request, call) -> tuple[bool, dict | None]:
        delays = 0
        params: dict = {}
        for c in self._connectors:
            delay, child_params = call(c)
            delays += bool(delay)
            for key, value in (child_params or {}).items():
                if key in params:
                    raise ValueError(f"MultiConnector: kv_transfer_params key {key!r} returned by two children")
                params[key] = value
        self._owner.pop(request.request_id, None)
        if delays > 1:
            self._extra_async_saves[request.request_id] = delays
        return delays > 0, (params or None)

    def request_finished_all_groups(self, request, block_ids: tuple[list[int], ...]):
        """Every HMA child gets the HMA finish hook; a child without SupportsHMA (admitted only on a single-group
        model, see __init__) gets the single-group one with that group's list, as the scheduler would call it."""
        return self._finish(
            request,
            lambda c: c.request_finished_all_groups(request, block_ids) if supports_hma(type(c))
            else c.request_finished(request, list(block_ids[0]) if block_ids else []),
        )

    def request_finished(self, request, block_ids: list[int]):
        """Single-group finish: children get the hook they declare."""
        return self._finish(
            request,
            lambda c: c.request_finished_all_groups(request, (block_ids,)) if supports_hma(type(c))
            else c.request_finished(request, block_ids),
        )

    def take_events(self):
        events = []
        for c in self._connectors:
            events.extend(c.take_events() or ())
        return events

    def has_pending_push_work(self) -> bool:
        return any(getattr(c, "has_pending_push_work", lambda: False)() for c in self._connectors)

    def reset_cache(self) -> bool | None:
        results = [c.reset_cache() for c in self._connectors]
        return all(r is not False for r in results)
