"""Allocator target wrapping vLLM 0.33's own `v1/core` (`--kv-allocator vllm`).

Needs vLLM importable (e.g. the venv built by scripts/install-vllm.sh). Only public constructors are
used; the backdoors read the pool's prefix-cache map and block hash fields.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

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
        from vllm.utils.hashing import sha256
        from vllm.v1 import kv_cache_interface
        from vllm.v1.core import block_pool, kv_cache_manager, kv_cache_utils
        from vllm.v1.request import Request

        self.version = vllm.__version__
        self._iface = kv_cache_interface
        self._block_pool = block_pool
        self._manager = kv_cache_manager
        self._utils = kv_cache_utils
        self._Request = Request
        self._sampling = SamplingParams(max_tokens=1 << 20)
        self._sha256 = sha256
        self._dtype = torch.float16
        self._hashers: dict[int, Any] = {}
        kv_cache_utils.init_none_hash(sha256)
        self.name = f"vllm-{self.version}"

    def make_block_pool(self, num_gpu_blocks, enable_caching, hash_block_size=16, enable_kv_cache_events=False):
        return self._block_pool.BlockPool(num_gpu_blocks, enable_caching, hash_block_size,
                                          enable_kv_cache_events=enable_kv_cache_events)

    def make_manager(self, groups, num_blocks, max_model_len, *, enable_caching=True, retention_interval=None,
                     hash_block_size=None, scheduler_block_size=None, max_in_flight_tokens=None,
                     use_eagle=False, dcp_world_size=1, enable_kv_cache_events=False, num_hash_lookahead_tokens=0):
        config = build_kv_cache_config(self._iface, groups, num_blocks, retention_interval, self._dtype)
        sizes = [g.block_size for g in groups]
        sbs = scheduler_block_size or math.lcm(*sizes)
        hbs = hash_block_size or (math.gcd(*sizes) if enable_caching else sbs)
        return self._manager.KVCacheManager(config, max_model_len, sbs, hbs,
                                            max_in_flight_tokens=max_in_flight_tokens,
                                            enable_caching=enable_caching, use_eagle=use_eagle,
                                            dcp_world_size=dcp_world_size,
                                            enable_kv_cache_events=enable_kv_cache_events,
                                            num_hash_lookahead_tokens=num_hash_lookahead_tokens)

    def make_request(self, request_id, prompt_token_ids, hash_block_size, *, lora=None, cache_salt=None):
        hasher = self._hashers.get(hash_block_size)
        if hasher is None:
            hasher = self._hashers[hash_block_size] = self._utils.get_request_block_hasher(
                hash_block_size, self._sha256)
        lora_request = None
        if lora:
            from vllm.lora.request import LoRARequest

            lora_request = LoRARequest(lora[0], lora[1], lora[2])
        return self._Request(request_id, list(prompt_token_ids), self._sampling, None, block_hasher=hasher,
                             lora_request=lora_request, cache_salt=cache_salt)

    def cache_entries(self, block_pool):
        out = {}
        for key, entry in block_pool.cached_block_hash_to_block._cache.items():
            out[key] = [entry.block_id] if hasattr(entry, "block_id") else [b.block_id for b in entry.values()]
        return out

    def block_key(self, block):
        return block.block_hash

    def sha256(self, obj):
        return self._sha256(obj)


def make_target() -> VllmAllocatorTarget:
    """Factory for `--kv-allocator harness.targets.vllm_allocator:make_target` (alias `vllm`)."""
    return VllmAllocatorTarget()
