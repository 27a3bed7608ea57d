"""Connectors with legal behaviour the suite once judged a bug, and their buggy twins (the check must still fail).

* A store owned by the engine, as vLLM's CPU-offloading connectors keep their CPU tier in the engine's own
  connector instances: a second engine (or process) starts with an empty store, by design.
  `EngineOwnedStoreConnector` is correct; `EngineOwnedFullAttentionHitConnector` carries
  `FullAttentionHitConnector`'s bug (caught by C07), so the checks that re-use the storing engine still fail.
* Hits that end inside a block, as LMCache's (a full-prompt hit lowered by one token) and OffloadingConnector's
  partial tails: vLLM 0.33's scheduler accepts them. `OneTokenShortHitConnector` answers every hit one token
  short; on a Mamba model that is a hit between two Mamba states, which C06 must still catch.
* Stores deferred to the next step, as OffloadingConnector defers them (`prepare_store_kv`): vLLM overwrites a
  block it re-allocated only after the connector's `handle_preemptions` ("BEFORE they are overwritten", its base
  connector), and never a block that stays free. `DeferredStoreConnector` copies a step's stores there and lets a
  finished request's blocks go at once; `tests.connector.buggy.OutOfWindowStoreConnector`, which copies them after
  the next step's forward, is its buggy twin (caught by C24).
* A vendor who implements none of the `kvconform_*` backdoors: `BackdoorlessConnector` (the reference connector
  with all five set to None) is correct; with a disk tier configured C36 must decide black-box across processes.
  `BackdoorlessSaltedKeysConnector` mixes Python's per-process salted `hash()` into its keys (caught by C36).
"""

from __future__ import annotations

from reference_impl.connector.backdoors import BACKDOOR_METHODS
from reference_impl.connector.lmcache_like import LMCacheLikeConnector, extra_config
from reference_impl.connector.store import ChunkStore
from tests.connector.buggy import FullAttentionHitConnector

# id(kv_transfer_config) -> (that config, its engine's store). The roles and ranks of one engine share the
# engine's KVTransferConfig object (EngineCore copies the config shallowly per rank); another engine has its own.
# The config is kept alive with its store, so an id is never reused while its entry exists.
_ENGINE_STORES: dict[int, tuple[object, ChunkStore]] = {}


class _EngineOwnedStore:
    """Replaces the process-wide named store by one that belongs to this engine's connector instances."""

    def __init__(self, vllm_config, role, kv_cache_config=None):
        super().__init__(vllm_config, role, kv_cache_config)
        ktc = vllm_config.kv_transfer_config
        entry = _ENGINE_STORES.get(id(ktc))
        if entry is None:
            entry = _ENGINE_STORES[id(ktc)] = (ktc, ChunkStore(int(extra_config(vllm_config)["cpu_bytes"])))
        self.store = entry[1]


class EngineOwnedStoreConnector(_EngineOwnedStore, LMCacheLikeConnector):
    """The reference connector with a store per engine: correct."""


class EngineOwnedFullAttentionHitConnector(_EngineOwnedStore, FullAttentionHitConnector):
    """A store per engine, hits from full-attention groups only: caught by C07 hit-min-over-groups."""


class OneTokenShortHitConnector(LMCacheLikeConnector):
    """Every hit one token short of the chunk boundary it would end on (a hit inside a block)."""

    def get_num_new_matched_tokens(self, request, num_computed_tokens: int):
        n, load_async = super().get_num_new_matched_tokens(request, num_computed_tokens)
        return (n - 1, load_async) if n and n > 1 else (n, load_async)


class DeferredStoreConnector(LMCacheLikeConnector):
    """Copies each step's stores at the start of the next step, in `handle_preemptions`, before vLLM may
    overwrite a re-allocated block; a finished request's blocks go at once (no delayed free): correct."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._deferred = None

    def wait_for_save(self):
        # The stores of this step wait for the next one (OffloadingConnector: "offloading starts AFTER transfers
        # related to token sampling").
        self._deferred = self._connector_metadata

    def handle_preemptions(self, kv_connector_metadata):
        """Run the previous step's stores: their blocks hold that step's KV until this step's forward."""
        deferred, self._deferred = self._deferred, None
        if deferred is None:
            return
        current, self._connector_metadata = self._connector_metadata, deferred
        try:
            super().wait_for_save()
        finally:
            self._connector_metadata = current


class BackdoorlessConnector(LMCacheLikeConnector):
    """The reference connector as a vendor who implements no backdoor has it: correct."""


for _name in BACKDOOR_METHODS:
    setattr(BackdoorlessConnector, _name, None)


class BackdoorlessSaltedKeysConnector(BackdoorlessConnector):
    """No backdoors, and keys that mix in Python's per-process salted hash(): caught by C36 with a disk tier."""

    def _hashes(self, request, num_tokens=None):
        return [h + (hash(h) & (2**63 - 1)).to_bytes(8, "little") for h in super()._hashes(request, num_tokens)]
