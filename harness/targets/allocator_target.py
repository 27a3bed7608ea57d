"""The allocator target protocol the allocator suite and benchmarks drive, and the reference target.

A target builds vLLM-0.33-shaped objects (`BlockPool`, `KVCacheManager`, `Request`) from plain
descriptions; scenario code then calls their vLLM method names directly, so the same scenario runs on
the reference and on vLLM. Backdoor accessors (zarr.testing style) expose internals the invariant checks
need without trusting the public API. Capabilities are data: a test needing one the target lacks is
skipped with a reason.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Mapping, Sequence
from types import ModuleType
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

__all__ = ["GroupDesc", "AllocatorTarget", "ReferenceAllocatorTarget", "CAPABILITIES", "REFERENCE_MODULES",
           "target_module", "make_reference_target"]

#: Capabilities a target may declare.
CAPABILITIES = {
    "strict_input_validation": "target raises ValueError for bad input the engine would accept silently "
                               "(unknown request on free, tokens past max_model_len, window > model length)",
    "grouping": "target exposes grouping of layer specs into KV cache groups (get_kv_cache_groups)",
    "kv_tensors": "target allocates the KV cache tensors itself",
}

GROUP_KINDS = ("full", "sliding_window", "chunked_local", "mamba", "rswa")

#: vLLM's module (under `vllm.`) -> where the reference keeps it. A target's `modules` map is how a scenario
#: reaches an API the protocol does not wrap (HiSparse's layout helpers, the spec classes): by vLLM's name.
REFERENCE_MODULES = {
    "v1.kv_cache_interface": "reference_impl.kv_cache.kv_cache_interface",
    "v1.request": "reference_impl.kv_cache.request",
    "v1.core.block_pool": "reference_impl.kv_cache.block_pool",
    "v1.core.kv_cache_utils": "reference_impl.kv_cache.kv_cache_utils",
    "v1.core.single_type_kv_cache_manager": "reference_impl.kv_cache.single_type_kv_cache_manager",
    "v1.core.kv_cache_manager": "reference_impl.kv_cache.kv_cache_manager",
    "v1.hisparse.layout": "reference_impl.kv_cache.hisparse_layout",
    "v1.hisparse.coordinator": "reference_impl.kv_cache.hisparse_coordinator",
}


@dataclass(frozen=True)
class GroupDesc:
    """One KV cache group, described independently of any implementation."""

    kind: str
    block_size: int = 16
    sliding_window: int | None = None
    attention_chunk_size: int | None = None
    num_layers: int = 1
    rswa_window: int | None = None
    #: Mamba only: scratch state blocks for speculative decoding, and prefill checkpoint blocks with the
    #: token alignment the worker exports checkpoints at.
    num_speculative_blocks: int = 0
    num_prefill_checkpoint_blocks: int = 0
    prefill_checkpoint_alignment: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in GROUP_KINDS:
            raise ValueError(f"GroupDesc.kind must be one of {', '.join(GROUP_KINDS)}, got {self.kind!r}")
        if self.kind == "sliding_window" and self.sliding_window is None:
            raise ValueError("GroupDesc.sliding_window is required for kind 'sliding_window'")
        if self.kind == "chunked_local" and self.attention_chunk_size is None:
            raise ValueError("GroupDesc.attention_chunk_size is required for kind 'chunked_local'")
        if self.kind == "rswa" and self.rswa_window is None:
            raise ValueError("GroupDesc.rswa_window is required for kind 'rswa'")


@runtime_checkable
class AllocatorTarget(Protocol):
    """What the allocator suite needs from an implementation."""

    name: str
    capabilities: frozenset[str]
    #: vLLM's module name (e.g. "v1.hisparse.layout") -> the importable module where this target keeps it
    #: (`REFERENCE_MODULES`); a scenario needing a module the map lacks is skipped (`target_module`).
    modules: Mapping[str, str]

    def make_block_pool(self, num_gpu_blocks: int, enable_caching: bool, hash_block_size: int = 16,
                        enable_kv_cache_events: bool = False) -> Any:
        """A `BlockPool` (queueing KV cache events with `enable_kv_cache_events`)."""

    def make_manager(self, groups: Sequence[GroupDesc], num_blocks: int, max_model_len: int, *,
                     enable_caching: bool = True, retention_interval: int | None = None,
                     hash_block_size: int | None = None, scheduler_block_size: int | None = None,
                     max_in_flight_tokens: int | None = None, use_eagle: bool = False,
                     dcp_world_size: int = 1, enable_kv_cache_events: bool = False,
                     num_hash_lookahead_tokens: int = 0) -> Any:
        """A `KVCacheManager` over one pool of `num_blocks` with one group per description (EAGLE's
        last-block drop with `use_eagle`; decode context parallelism over `dcp_world_size` ranks; KV cache
        events with `enable_kv_cache_events`; block hashes covering `num_hash_lookahead_tokens` tokens past
        their block)."""

    def make_request(self, request_id: str, prompt_token_ids: Sequence[int], hash_block_size: int, *,
                     lora: tuple[str, int, str] | None = None, cache_salt: str | None = None) -> Any:
        """A `Request` whose block hashes are kept at `hash_block_size` (sha256)."""

    # ---- backdoors
    def cache_entries(self, block_pool: Any) -> dict[bytes, list[int]]:
        """Prefix-cache map as key -> block ids (insertion order)."""

    def block_key(self, block: Any) -> bytes | None:
        """The prefix-cache key a block carries, or None."""

    def sha256(self, obj: Any) -> bytes:
        """The target's sha256 hash function (for hash-chain checks against an independent oracle)."""


def target_module(target: AllocatorTarget, name: str) -> ModuleType | None:
    """The module a target keeps under vLLM's module name `name` (e.g. "v1.hisparse.layout"), or None when
    its map has no such entry (the scenario is then not applicable to that target)."""
    path = getattr(target, "modules", {}).get(name)
    return importlib.import_module(path) if path else None


def _field_names(cls) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls))


def _make_spec(mod, desc: GroupDesc, dtype) -> Any:
    """Build `desc` with the given module's spec classes (the reference and vLLM share field names; fields a
    release's MambaSpec lacks are left out, and only asked for when they differ from their default)."""
    attn = dict(block_size=desc.block_size, num_kv_heads=2, head_size=8, dtype=dtype)
    if desc.kind == "full":
        return mod.FullAttentionSpec(**attn)
    if desc.kind == "sliding_window":
        return mod.SlidingWindowSpec(**attn, sliding_window=desc.sliding_window)
    if desc.kind == "chunked_local":
        return mod.ChunkedLocalAttentionSpec(**attn, attention_chunk_size=desc.attention_chunk_size)
    if desc.kind == "rswa":
        return mod.RSWASpec(**attn, rswa_window=desc.rswa_window)
    page = 2 * desc.block_size * 2 * 8 * dtype.itemsize
    extra = dict(mamba_cache_mode="align", num_speculative_blocks=desc.num_speculative_blocks,
                 num_prefill_checkpoint_blocks=desc.num_prefill_checkpoint_blocks,
                 prefill_checkpoint_alignment=desc.prefill_checkpoint_alignment)
    known = _field_names(mod.MambaSpec)
    return mod.MambaSpec(block_size=desc.block_size, shapes=((page // dtype.itemsize,),), dtypes=(dtype,),
                         **{k: v for k, v in extra.items() if k in known})


def build_kv_cache_config(mod, groups: Sequence[GroupDesc], num_blocks: int, retention_interval, dtype,
                          **extra) -> Any:
    """A `KVCacheConfig` of `mod` with one group (and one overlaid tensor) per description.

    Releases name a tensor's layers `layers` (with strides) or, before that, `shared_by`; a KVCacheConfig
    without `prefix_cache_retention_interval` gets none (callers check the capability first)."""
    group_specs = []
    tensors = []
    tensor_fields = _field_names(mod.KVCacheTensor)
    for gid, desc in enumerate(groups):
        spec = _make_spec(mod, desc, dtype)
        names = [f"g{gid}.layer{j}" for j in range(desc.num_layers)]
        group_specs.append(mod.KVCacheGroupSpec(layer_names=names, kv_cache_spec=spec))
        page = spec.page_size_bytes
        if "layers" in tensor_fields:
            tensors.append(mod.KVCacheTensor(size=page * desc.num_layers * num_blocks, layers=names,
                                             layer_stride=page * num_blocks, block_stride=page))
        else:
            tensors.append(mod.KVCacheTensor(size=page * desc.num_layers * num_blocks, shared_by=names))
    if "prefix_cache_retention_interval" in _field_names(mod.KVCacheConfig):
        extra["prefix_cache_retention_interval"] = retention_interval
    return mod.KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=tensors, kv_cache_groups=group_specs, **extra)


@dataclass
class ReferenceAllocatorTarget:
    """kvconform's reference allocator (`reference_impl.kv_cache`)."""

    name: str = "reference"
    capabilities: frozenset[str] = field(
        default_factory=lambda: frozenset({"strict_input_validation", "grouping", "kv_tensors"}))
    modules: Mapping[str, str] = field(default_factory=lambda: dict(REFERENCE_MODULES))

    def __post_init__(self) -> None:
        import torch

        from reference_impl import kv_cache
        from reference_impl.kv_cache import kv_cache_utils

        self._mod = kv_cache
        self._hashing = kv_cache_utils
        self._dtype = torch.float16
        self._hashers: dict[int, Any] = {}

    def make_block_pool(self, num_gpu_blocks, enable_caching, hash_block_size=16, enable_kv_cache_events=False):
        return self._mod.BlockPool(num_gpu_blocks, enable_caching, hash_block_size,
                                   enable_kv_cache_events=enable_kv_cache_events)

    def make_kv_cache_config(self, groups, num_blocks, retention_interval=None):
        """The reference `KVCacheConfig` for these group descriptions."""
        return build_kv_cache_config(self._mod, groups, num_blocks, retention_interval, self._dtype)

    def make_manager(self, groups, num_blocks, max_model_len, *, enable_caching=True, retention_interval=None,
                     hash_block_size=None, scheduler_block_size=None, max_in_flight_tokens=None,
                     use_eagle=False, dcp_world_size=1, enable_kv_cache_events=False, num_hash_lookahead_tokens=0):
        import math

        config = self.make_kv_cache_config(groups, num_blocks, retention_interval)
        sizes = [g.block_size for g in groups]
        sbs = scheduler_block_size or math.lcm(*sizes)
        hbs = hash_block_size or (math.gcd(*sizes) if enable_caching else sbs)
        return self._mod.KVCacheManager(config, max_model_len, sbs, hbs, max_in_flight_tokens=max_in_flight_tokens,
                                        enable_caching=enable_caching, use_eagle=use_eagle,
                                        dcp_world_size=dcp_world_size,
                                        enable_kv_cache_events=enable_kv_cache_events,
                                        num_hash_lookahead_tokens=num_hash_lookahead_tokens)

    def make_request(self, request_id, prompt_token_ids, hash_block_size, *, lora=None, cache_salt=None):
        hasher = self._hashers.get(hash_block_size)
        if hasher is None:
            hasher = self._hashers[hash_block_size] = self._hashing.get_request_block_hasher(
                hash_block_size, self._hashing.sha256)
        lora_request = self._mod.LoRARequest(*lora) if lora else None
        return self._mod.Request(request_id, prompt_token_ids, block_hasher=hasher, lora_request=lora_request,
                                 cache_salt=cache_salt)

    def cache_entries(self, block_pool):
        return {k: [b.block_id for b in blocks] for k, blocks in block_pool.cached_block_hash_to_block.items()}

    def block_key(self, block):
        return block.block_hash

    def sha256(self, obj):
        return self._hashing.sha256(obj)


def make_reference_target() -> ReferenceAllocatorTarget:
    """Factory of the default `--kv-allocator` target."""
    return ReferenceAllocatorTarget()
