"""Allocator target wrapping the installed vLLM release's own `v1/core` (`--kv-allocator vllm`), any release
from 0.13.0 to the newest.

Needs vLLM importable (e.g. the venv built by scripts/install-vllm.sh). Only public constructors are used;
the backdoors read the pool's prefix-cache map and block hash fields. What the release offers is its
capability table (`allocator_capabilities`, probed from the release's code): a scenario asking for an
option the release lacks (lookahead hashing, a retention interval, mixed block sizes before
`scheduler_block_size`, ...) is "N/A on X.Y.Z: reason", never a failure. API shapes that changed without
changing behaviour are met here: a KVCacheTensor's `shared_by` before `layers`, the manager's keyword
arguments by name, Request's `eos_token_id` of 0.13, and `get_computed_blocks`' pair before the
shared-prefix boundary was added (the boundary is then 0: nothing is reported).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.targets.allocator_capabilities import CAPABILITIES, not_applicable, probe_capabilities
from harness.targets.allocator_target import REFERENCE_MODULES, build_kv_cache_config

__all__ = ["VllmAllocatorTarget", "make_target"]


@dataclass
class VllmAllocatorTarget:
    """vLLM's `KVCacheManager` / `BlockPool` behind the allocator target protocol."""

    name: str = "vllm"
    capabilities: frozenset[str] = field(default_factory=frozenset)
    # vLLM keeps each module under its own name
    modules: Mapping[str, str] = field(default_factory=lambda: {name: f"vllm.{name}" for name in REFERENCE_MODULES})

    def __post_init__(self) -> None:
        import torch
        import vllm
        from vllm.sampling_params import SamplingParams
        from vllm.v1 import kv_cache_interface
        from vllm.v1.core import block_pool, kv_cache_coordinator, kv_cache_manager, kv_cache_utils
        from vllm.v1.request import Request

        try:
            from vllm.utils.hashing import sha256
        except ImportError:  # before vllm.utils became a package
            from vllm.utils import sha256
        try:
            from vllm.distributed import kv_events
        except Exception:
            kv_events = None

        self.version = vllm.__version__
        self._iface = kv_cache_interface
        self._block_pool = block_pool
        self._manager = kv_cache_manager
        self._utils = kv_cache_utils
        self._Request = Request
        self._request_params = frozenset(inspect.signature(Request).parameters)
        self._sampling = SamplingParams(max_tokens=1 << 20)
        self._sha256 = sha256
        self._dtype = torch.float16
        self._hashers: dict[int, Any] = {}
        kv_cache_utils.init_none_hash(sha256)
        self.name = f"vllm-{self.version}"
        mods = {"iface": kv_cache_interface, "pool": block_pool, "manager": kv_cache_manager,
                "coordinator": kv_cache_coordinator, "utils": kv_cache_utils, "events": kv_events}
        self.release_capabilities, self.lacks = probe_capabilities(mods)
        self._manager_params = frozenset(inspect.signature(kv_cache_manager.KVCacheManager).parameters)
        self._manager_class = _boundary_manager(kv_cache_manager.KVCacheManager) \
            if "shared_prefix_boundary" in self.lacks else kv_cache_manager.KVCacheManager

    def require(self, capability: str) -> None:
        """Skip the running check (N/A on this release) unless the release has `capability`."""
        if capability not in CAPABILITIES:
            raise ValueError(f"capability: {capability!r} is not one of {', '.join(CAPABILITIES)}")
        if capability in self.lacks:
            not_applicable(self.version, self.lacks[capability])

    def make_block_pool(self, num_gpu_blocks, enable_caching, hash_block_size=16, enable_kv_cache_events=False):
        return self._block_pool.BlockPool(num_gpu_blocks, enable_caching, hash_block_size,
                                          enable_kv_cache_events=enable_kv_cache_events)

    def make_manager(self, groups, num_blocks, max_model_len, *, enable_caching=True, retention_interval=None,
                     hash_block_size=None, scheduler_block_size=None, max_in_flight_tokens=None,
                     use_eagle=False, dcp_world_size=1, enable_kv_cache_events=False, num_hash_lookahead_tokens=0):
        sizes = [g.block_size for g in groups]
        sbs = scheduler_block_size or math.lcm(*sizes)
        hbs = hash_block_size or (math.gcd(*sizes) if enable_caching else sbs)
        # What the scenario asks for, against what the release offers.
        if retention_interval is not None:
            self.require("retention_interval")
        if num_hash_lookahead_tokens:
            self.require("hash_lookahead")
        if max_in_flight_tokens is not None:
            self.require("max_in_flight_tokens")
        if dcp_world_size != 1:
            self.require("dcp")
        if sbs != hbs or len(set(sizes)) > 1:
            self.require("scheduler_block_size")
        for kind, capability in (("rswa", "rswa"), ("mamba", "mamba_align")):
            if any(g.kind == kind for g in groups):
                self.require(capability)
        if any(g.num_prefill_checkpoint_blocks or g.prefill_checkpoint_alignment for g in groups):
            self.require("mamba_checkpoints")
        other_types = {(g.kind, g.sliding_window, g.attention_chunk_size, g.rswa_window)
                       for g in groups if g.kind != "full"}
        if len(other_types) > 1:
            self.require("several_group_types")
        config = build_kv_cache_config(self._iface, groups, num_blocks, retention_interval, self._dtype)
        kwargs = dict(scheduler_block_size=sbs, hash_block_size=hbs, max_in_flight_tokens=max_in_flight_tokens,
                      enable_caching=enable_caching, use_eagle=use_eagle, dcp_world_size=dcp_world_size,
                      enable_kv_cache_events=enable_kv_cache_events,
                      num_hash_lookahead_tokens=num_hash_lookahead_tokens)
        kwargs = {k: v for k, v in kwargs.items() if k in self._manager_params}
        return self._manager_class(config, max_model_len, **kwargs)

    def make_request(self, request_id, prompt_token_ids, hash_block_size, *, lora=None, cache_salt=None):
        hasher = self._hashers.get(hash_block_size)
        if hasher is None:
            hasher = self._hashers[hash_block_size] = self._utils.get_request_block_hasher(
                hash_block_size, self._sha256)
        lora_request = None
        if lora:
            from vllm.lora.request import LoRARequest

            lora_request = LoRARequest(lora[0], lora[1], lora[2])
        extra = {"eos_token_id": None} if "eos_token_id" in self._request_params else {}
        return self._Request(request_id, list(prompt_token_ids), self._sampling, None, block_hasher=hasher,
                             lora_request=lora_request, cache_salt=cache_salt, **extra)

    def cache_entries(self, block_pool):
        cache_map = block_pool.cached_block_hash_to_block
        dups = getattr(cache_map, "_dup_ids", None)
        out = {}
        for key, entry in cache_map._cache.items():
            if isinstance(entry, int):  # 0.34: block ids, the shared keys' ids in _dup_ids
                out[key] = list(dups[key]) if dups and key in dups else [entry]
            else:
                out[key] = [entry.block_id] if hasattr(entry, "block_id") else [b.block_id for b in entry.values()]
        return out

    def block_key(self, block):
        return block.block_hash

    def sha256(self, obj):
        return self._sha256(obj)


def _boundary_manager(manager_class):
    """A subclass of a release's KVCacheManager whose get_computed_blocks also returns the shared-prefix
    boundary, 0, as the releases that added it report "no uncached shared prefix" (releases before it
    return the pair (blocks, hit tokens))."""

    class KVCacheManager(manager_class):
        def get_computed_blocks(self, request, *args, **kwargs):
            blocks, hit = super().get_computed_blocks(request, *args, **kwargs)
            return blocks, hit, 0

    KVCacheManager.__qualname__ = f"{manager_class.__qualname__}+boundary"
    return KVCacheManager


def make_target() -> VllmAllocatorTarget:
    """Factory for `--kv-allocator harness.targets.vllm_allocator:make_target` (alias `vllm`)."""
    return VllmAllocatorTarget()
