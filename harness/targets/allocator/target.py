"""The allocator target protocol the allocator suite and benchmarks drive, and the one adapter behind it.

A target builds vLLM-shaped objects (`BlockPool`, `KVCacheManager`, `Request`) from plain descriptions;
scenario code then calls their vLLM method names directly, so the same scenario runs on the reference and on
any vLLM release. `ModuleMapAllocatorTarget` is that target for every implementation that keeps vLLM's
`v1/core` modules: it finds them through a module map (vLLM's module name -> where the implementation keeps
it), the reference's (`make_reference_target`) or an installed vLLM's (`make_vllm_target`), and what an
implementation offers is read from its code (`harness.targets.allocator.capabilities`), never from its
name. Backdoor accessors (zarr.testing style) expose internals the invariant checks need without trusting
the public API. Capabilities are data: a test needing one the target lacks is skipped with a reason.
Planning scenarios (`PlanningTarget`) reach the target's own planner the same way, through its module map,
with specs built by `make_spec` (the one home of GroupDesc -> spec, `make_manager`'s too) and the config
sections the planner reads from `planning_config`.
"""

from __future__ import annotations

import importlib
import inspect
import math
from collections.abc import Mapping, Sequence
from types import ModuleType, SimpleNamespace
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from harness.targets.allocator.capabilities import CAPABILITIES as RELEASE_CAPABILITIES
from harness.targets.allocator.capabilities import ReleaseModules, fields_of, not_applicable, probe_capabilities

__all__ = ["GroupDesc", "AllocatorTarget", "PlanningTarget", "ModuleMapAllocatorTarget", "CAPABILITIES",
           "REFERENCE_MODULES", "REFERENCE_EXTENSIONS", "target_module", "make_spec", "vllm_modules",
           "make_reference_target", "make_vllm_target"]

#: Capabilities a target may declare (behaviour no probe of its code can see). What its code offers, vLLM's
#: APIs and kvconform's own extensions alike, is probed instead (`allocator_capabilities.CAPABILITIES`).
CAPABILITIES = {
    "strict_input_validation": "target raises ValueError for bad input the engine would accept silently "
                               "(unknown request on free, tokens past max_model_len, window > model length)",
}

GROUP_KINDS = ("full", "sliding_window", "chunked_local", "mamba", "rswa", "cross_attention")

#: vLLM's module (under `vllm.`) -> where the reference keeps it. A target's `modules` map is how the adapter
#: and the scenarios reach an implementation's code, by vLLM's name (HiSparse's layout helpers, the spec
#: classes, the event classes the capability probes read).
REFERENCE_MODULES = {
    "v1.kv_cache_interface": "reference_impl.kv_cache.kv_cache_interface",
    "v1.request": "reference_impl.kv_cache.request",
    "v1.core.block_pool": "reference_impl.kv_cache.block_pool",
    "v1.core.kv_cache_utils": "reference_impl.kv_cache.kv_cache_utils",
    "v1.core.single_type_kv_cache_manager": "reference_impl.kv_cache.single_type_kv_cache_manager",
    "v1.core.kv_cache_coordinator": "reference_impl.kv_cache.kv_cache_coordinator",
    "v1.core.kv_cache_manager": "reference_impl.kv_cache.kv_cache_manager",
    "v1.core.kv_cache_planning": "reference_impl.kv_cache.kv_cache_planning",
    "v1.hisparse.layout": "reference_impl.kv_cache.hisparse_layout",
    "v1.hisparse.coordinator": "reference_impl.kv_cache.hisparse_coordinator",
    "distributed.kv_events": "reference_impl.kv_cache.kv_events",
    "lora.request": "reference_impl.kv_cache.request",
    "utils.hashing": "reference_impl.kv_cache.kv_cache_utils",
}

#: kvconform's extensions, modules with no vLLM counterpart, under names of their own (`kvconform.`): the
#: reference's KV cache tensors allocated from a planned config (vLLM's model runner allocates them) and the
#: config resolver's era-styled grouping stage. Only the reference's map names them; a scenario needing one is
#: N/A elsewhere through a probed capability (`kv_tensors`, `era_grouping`), never through a target's name.
REFERENCE_EXTENSIONS = {
    "kvconform.kv_cache_tensors": "reference_impl.kv_cache.tensors",
    "kvconform.kv_cache_groups": "reference_impl.config.kv_cache_groups",
}

#: Modules of vLLM's engine the reference has no counterpart of: the sampling parameters every vLLM Request
#: takes, the platform and the backend HiSparse's host pool asks for (probed by `hisparse_backend`).
_VLLM_ONLY_MODULES = ("sampling_params", "platforms", "v1.hisparse.backend")

#: What the adapter itself needs from every implementation: its short name -> vLLM's module name.
_REQUIRED_MODULES = {"iface": "v1.kv_cache_interface", "pool": "v1.core.block_pool", "utils": "v1.core.kv_cache_utils",
                     "manager": "v1.core.kv_cache_manager", "request": "v1.request", "hashing": "utils.hashing"}


@dataclass(frozen=True)
class GroupDesc:
    """One KV cache group, described independently of any implementation."""

    kind: str
    block_size: int = 16
    sliding_window: int | None = None
    attention_chunk_size: int | None = None
    num_layers: int = 1
    rswa_window: int | None = None
    #: A layer's shape: KV heads, head size and dtype (a torch dtype's name). A Mamba layer's one state is
    #: as many bytes as an attention page of that shape would be.
    num_kv_heads: int = 2
    head_size: int = 8
    dtype: str = "float16"
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
        for name in ("block_size", "num_kv_heads", "head_size"):
            if not isinstance(getattr(self, name), int):
                raise ValueError(f"GroupDesc.{name} must be an integer, got {getattr(self, name)!r}")


@runtime_checkable
class AllocatorTarget(Protocol):
    """What the allocator suite needs from an implementation."""

    name: str
    capabilities: frozenset[str]
    #: vLLM's module name (e.g. "v1.hisparse.layout") -> the importable module where this target keeps it
    #: (`REFERENCE_MODULES`, `vllm_modules()`); a scenario needing a module the map lacks is skipped
    #: (`target_module`).
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


@runtime_checkable
class PlanningTarget(Protocol):
    """What the planning scenarios (layer specs -> KV cache groups -> a `KVCacheConfig`) need beyond
    `AllocatorTarget`: the target's own spec classes and a config its planner reads. The planner itself is
    the module the target's map keeps under vLLM's `v1.core.kv_cache_planning` (`target_module`)."""

    modules: Mapping[str, str]

    def make_spec(self, desc: GroupDesc) -> Any:
        """One layer's spec as `desc` describes it, built with the target's own spec classes."""

    def planning_config(self, *, max_model_len: int = 8192, disable_hybrid_kv_cache_manager: bool = False,
                        kv_cache_layout: str = "LBHNC", num_gpu_blocks_override: int | None = None) -> Any:
        """The sections of a `VllmConfig` the target's planner reads, `kv_cache_layout` resolved (a name of
        the target's `KVCacheLayout`, where it has one)."""


def target_module(target: AllocatorTarget, name: str) -> ModuleType | None:
    """The module a target keeps under vLLM's module name `name` (e.g. "v1.hisparse.layout"), or None when
    its map has no such entry (the scenario is then not applicable to that target)."""
    path = getattr(target, "modules", {}).get(name)
    return importlib.import_module(path) if path else None


def make_spec(mod, desc: GroupDesc) -> Any:
    """Build `desc` with the spec classes of `mod` (an implementation's `v1.kv_cache_interface`: the
    reference and vLLM share field names; fields a release's MambaSpec lacks are left out, and only asked for
    when they differ from their default)."""
    import torch

    dtype = getattr(torch, desc.dtype, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"GroupDesc.dtype must name a torch dtype (e.g. 'float16', 'float32'), got {desc.dtype!r}")
    attn = dict(block_size=desc.block_size, num_kv_heads=desc.num_kv_heads, head_size=desc.head_size, dtype=dtype)
    if desc.kind == "full":
        return mod.FullAttentionSpec(**attn)
    if desc.kind == "sliding_window":
        return mod.SlidingWindowSpec(**attn, sliding_window=desc.sliding_window)
    if desc.kind == "chunked_local":
        return mod.ChunkedLocalAttentionSpec(**attn, attention_chunk_size=desc.attention_chunk_size)
    if desc.kind == "rswa":
        return mod.RSWASpec(**attn, rswa_window=desc.rswa_window)
    if desc.kind == "cross_attention":
        return mod.CrossAttentionSpec(**attn)
    page = 2 * desc.block_size * desc.num_kv_heads * desc.head_size * dtype.itemsize
    extra = dict(mamba_cache_mode="align", num_speculative_blocks=desc.num_speculative_blocks,
                 num_prefill_checkpoint_blocks=desc.num_prefill_checkpoint_blocks,
                 prefill_checkpoint_alignment=desc.prefill_checkpoint_alignment)
    known = fields_of(mod.MambaSpec)
    return mod.MambaSpec(block_size=desc.block_size, shapes=((page // dtype.itemsize,),), dtypes=(dtype,),
                         **{k: v for k, v in extra.items() if k in known})


def build_kv_cache_config(mod, groups: Sequence[GroupDesc], num_blocks: int, retention_interval, **extra) -> Any:
    """A `KVCacheConfig` of `mod` with one group (and one overlaid tensor) per description.

    Releases name a tensor's layers `layers` (with strides) or, before that, `shared_by`; a KVCacheConfig
    without `prefix_cache_retention_interval` gets none (callers check the capability first)."""
    group_specs = []
    tensors = []
    tensor_fields = fields_of(mod.KVCacheTensor)
    for gid, desc in enumerate(groups):
        spec = make_spec(mod, desc)
        names = [f"g{gid}.layer{j}" for j in range(desc.num_layers)]
        group_specs.append(mod.KVCacheGroupSpec(layer_names=names, kv_cache_spec=spec))
        page = spec.page_size_bytes
        if "layers" in tensor_fields:
            tensors.append(mod.KVCacheTensor(size=page * desc.num_layers * num_blocks, layers=names,
                                             layer_stride=page * num_blocks, block_stride=page))
        else:
            tensors.append(mod.KVCacheTensor(size=page * desc.num_layers * num_blocks, shared_by=names))
    if "prefix_cache_retention_interval" in fields_of(mod.KVCacheConfig):
        extra["prefix_cache_retention_interval"] = retention_interval
    return mod.KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=tensors, kv_cache_groups=group_specs, **extra)


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


@dataclass
class ModuleMapAllocatorTarget:
    """The allocator target protocol over any implementation that keeps vLLM's `v1/core` modules, found
    through a module map: the reference's (`REFERENCE_MODULES`) or an installed vLLM's (`vllm_modules()`).

    What the implementation offers is its capability table (`allocator_capabilities`, probed from the
    modules' code): a scenario asking for an option it lacks (lookahead hashing, a retention interval, mixed
    block sizes before `scheduler_block_size`, ...) is "N/A on VERSION: reason", never a failure. The
    reference has every capability. API shapes that changed without changing behaviour are met here, each
    read from the code as well: a KVCacheTensor's `shared_by` before `layers`, the manager's keyword arguments
    by name, a Request that takes `eos_token_id` (vLLM 0.13), `get_computed_blocks`' pair before the
    shared-prefix boundary was added (the boundary is then 0: nothing is reported), a NONE_HASH the engine
    must initialise at start-up (vLLM) rather than on first use (the reference). `capabilities` are the ones
    the implementation declares (`CAPABILITIES`: behaviour no probe can see, e.g. strict input validation).
    It is a `PlanningTarget` as well: `make_spec` and `planning_config` for the planner its map names.
    """

    name: str
    modules: Mapping[str, str]
    capabilities: frozenset[str] = frozenset()
    #: What "N/A on ..." names (a release number); the target's name when not given.
    version: str | None = None

    def __post_init__(self) -> None:
        unknown = sorted(set(self.capabilities) - set(CAPABILITIES))
        if unknown:
            raise ValueError(f"capabilities: {unknown[0]!r} is not one of {', '.join(CAPABILITIES)}")
        if self.version is None:
            self.version = self.name
        required = {key: self._import(name) for key, name in _REQUIRED_MODULES.items()}
        self._iface = required["iface"]
        self._block_pool = required["pool"]
        self._utils = required["utils"]
        self._Request = required["request"].Request
        self._request_params = frozenset(inspect.signature(self._Request).parameters)
        self._sha256 = required["hashing"].sha256
        sampling = target_module(self, "sampling_params")  # only an engine's Request needs one
        self._sampling = sampling.SamplingParams(max_tokens=1 << 20) if sampling is not None else None
        self._hashers: dict[int, Any] = {}
        if not hasattr(self._utils, "get_none_hash"):
            # vLLM's engine sets NONE_HASH at start-up (init_none_hash); the reference sets it on first use.
            self._utils.init_none_hash(self._sha256)
        self.release_capabilities, self.lacks = probe_capabilities(ReleaseModules(self.modules))
        manager_class = required["manager"].KVCacheManager
        self._manager_params = frozenset(inspect.signature(manager_class).parameters)
        self._manager_class = _boundary_manager(manager_class) if "shared_prefix_boundary" in self.lacks \
            else manager_class

    def _import(self, name: str) -> ModuleType:
        path = self.modules.get(name)
        if path is None:
            raise ValueError(f"modules: no entry for vLLM's {name!r}; an allocator target maps at least "
                             f"{', '.join(_REQUIRED_MODULES.values())}")
        return importlib.import_module(path)

    def require(self, capability: str) -> None:
        """Skip the running check (N/A on this release) unless the implementation has `capability` (one of
        `allocator_capabilities.CAPABILITIES`)."""
        if capability not in RELEASE_CAPABILITIES:
            raise ValueError(f"capability: {capability!r} is not one of {', '.join(RELEASE_CAPABILITIES)}")
        if capability in self.lacks:
            not_applicable(self.version, self.lacks[capability])

    def make_spec(self, desc: GroupDesc) -> Any:
        return make_spec(self._iface, desc)

    def planning_config(self, *, max_model_len=8192, disable_hybrid_kv_cache_manager=False, kv_cache_layout="LBHNC",
                        num_gpu_blocks_override=None):
        # Every section any release's planner reads, at vLLM's defaults for one CPU rank; the layout is
        # resolved up front, as the engine core does before planning (a release without layouts never asks).
        layouts = getattr(self._iface, "KVCacheLayout", None)
        cache_config = SimpleNamespace(num_gpu_blocks=None, num_gpu_blocks_override=num_gpu_blocks_override,
                                       prefix_cache_retention_interval=None, enable_prefix_caching=True,
                                       enable_extensible_kv_cache=False, resolved_gpu_memory_utilization=0.92,
                                       kv_cache_layout=kv_cache_layout)
        if layouts is not None:
            if kv_cache_layout not in layouts.__members__:
                raise ValueError(f"kv_cache_layout: {kv_cache_layout!r} is not one of {', '.join(layouts.__members__)}")
            cache_config.get_resolved_kv_cache_layout = lambda: layouts[kv_cache_layout]
        return SimpleNamespace(
            scheduler_config=SimpleNamespace(disable_hybrid_kv_cache_manager=disable_hybrid_kv_cache_manager,
                                             max_num_batched_tokens=max_model_len),
            model_config=SimpleNamespace(max_model_len=max_model_len, original_max_model_len=max_model_len,
                                         supports_kv_cache_grouping=False),
            cache_config=cache_config, attention_config=SimpleNamespace(hisparse_config=None),
            parallel_config=SimpleNamespace(tensor_parallel_size=1, decode_context_parallel_size=1,
                                            prefill_context_parallel_size=1),
            device_config=SimpleNamespace(device_type="cpu"), speculative_config=None, kv_transfer_config=None,
            num_prefill_lookahead_tokens=0)

    def make_block_pool(self, num_gpu_blocks, enable_caching, hash_block_size=16, enable_kv_cache_events=False):
        return self._block_pool.BlockPool(num_gpu_blocks, enable_caching, hash_block_size,
                                          enable_kv_cache_events=enable_kv_cache_events)

    def make_manager(self, groups, num_blocks, max_model_len, *, enable_caching=True, retention_interval=None,
                     hash_block_size=None, scheduler_block_size=None, max_in_flight_tokens=None,
                     use_eagle=False, dcp_world_size=1, enable_kv_cache_events=False, num_hash_lookahead_tokens=0):
        sizes = [g.block_size for g in groups]
        sbs = scheduler_block_size or math.lcm(*sizes)
        hbs = hash_block_size or (math.gcd(*sizes) if enable_caching else sbs)
        # What the scenario asks for, against what the implementation offers.
        if retention_interval is not None:
            self.require("retention_interval")
        if num_hash_lookahead_tokens:
            self.require("hash_lookahead")
        if max_in_flight_tokens is not None:
            self.require("max_in_flight_tokens")
        if dcp_world_size != 1:
            self.require("dcp")
            if len(groups) > 1:  # more than one group: the hybrid coordinator
                self.require("hybrid_dcp")
        # Before scheduler_block_size (0.24.0) the hybrid coordinator aligned hits at the groups' LCM itself.
        if sbs != math.lcm(*sizes):
            self.require("scheduler_block_size")
        for kind, capability in (("rswa", "rswa"), ("mamba", "mamba_align"), ("cross_attention", "cross_attention")):
            if any(g.kind == kind for g in groups):
                self.require(capability)
        if any(g.num_prefill_checkpoint_blocks or g.prefill_checkpoint_alignment for g in groups):
            self.require("mamba_checkpoints")
        other_types = {(g.kind, g.sliding_window, g.attention_chunk_size, g.rswa_window)
                       for g in groups if g.kind != "full"}
        full_types = {g.block_size for g in groups if g.kind == "full"}
        if len(other_types) > 1 or len(full_types) > 1:
            self.require("several_group_types")
        config = build_kv_cache_config(self._iface, groups, num_blocks, retention_interval)
        kwargs = dict(scheduler_block_size=sbs, hash_block_size=hbs, max_in_flight_tokens=max_in_flight_tokens,
                      enable_caching=enable_caching, use_eagle=use_eagle, dcp_world_size=dcp_world_size,
                      enable_kv_cache_events=enable_kv_cache_events,
                      num_hash_lookahead_tokens=num_hash_lookahead_tokens)
        if "max_in_flight_tokens" not in self._manager_params:
            # 0.20.0 - 0.24.0 name the same budget max_num_batched_tokens (one batch in flight).
            kwargs["max_num_batched_tokens"] = kwargs.pop("max_in_flight_tokens")
        kwargs = {k: v for k, v in kwargs.items() if k in self._manager_params}
        return self._manager_class(config, max_model_len, **kwargs)

    def make_request(self, request_id, prompt_token_ids, hash_block_size, *, lora=None, cache_salt=None):
        hasher = self._hashers.get(hash_block_size)
        if hasher is None:
            hasher = self._hashers[hash_block_size] = self._utils.get_request_block_hasher(
                hash_block_size, self._sha256)
        lora_request = target_module(self, "lora.request").LoRARequest(*lora) if lora else None
        extra = {"eos_token_id": None} if "eos_token_id" in self._request_params else {}
        return self._Request(request_id, list(prompt_token_ids), self._sampling, None, block_hasher=hasher,
                             lora_request=lora_request, cache_salt=cache_salt, **extra)

    def cache_entries(self, block_pool):
        cache_map = block_pool.cached_block_hash_to_block
        dups = getattr(cache_map, "_dup_ids", None)
        out = {}
        for key, entry in cache_map._cache.items():
            if isinstance(entry, int):  # vLLM 0.34 and the reference: block ids, the shared keys' in _dup_ids
                out[key] = list(dups[key]) if dups and key in dups else [entry]
            else:  # vLLM 0.33 and before: a block, or {block_id: block} for a shared key
                out[key] = [entry.block_id] if hasattr(entry, "block_id") else [b.block_id for b in entry.values()]
        return out

    def block_key(self, block):
        return block.block_hash

    def sha256(self, obj):
        return self._sha256(obj)


def vllm_modules() -> dict[str, str]:
    """The installed vLLM's module map: each module under its own name (`vllm.` + vLLM's name), the hashing
    helpers in `vllm.utils` before it became a package, the planner in `kv_cache_utils` before
    `kv_cache_planning` (0.13). Raises ImportError when vLLM is not importable."""
    import importlib.util

    import vllm  # noqa: F401  (ModuleNotFoundError here names 'vllm': the target cannot be built)

    modules = {name: f"vllm.{name}" for name in REFERENCE_MODULES}
    modules.update({name: f"vllm.{name}" for name in _VLLM_ONLY_MODULES})
    if importlib.util.find_spec("vllm.utils.hashing") is None:
        modules["utils.hashing"] = "vllm.utils"
    if importlib.util.find_spec("vllm.v1.core.kv_cache_planning") is None:
        modules["v1.core.kv_cache_planning"] = "vllm.v1.core.kv_cache_utils"  # the planner before it moved out
    return modules


def make_reference_target() -> ModuleMapAllocatorTarget:
    """Factory of the default `--kv-allocator` target: the reference allocator (`reference_impl.kv_cache`)."""
    return ModuleMapAllocatorTarget("reference", {**REFERENCE_MODULES, **REFERENCE_EXTENSIONS},
                                    frozenset({"strict_input_validation"}))


def make_vllm_target() -> ModuleMapAllocatorTarget:
    """Factory of `--kv-allocator vllm`: the installed vLLM release's own `v1/core` (any release from 0.13.0 to
    the newest; needs vLLM importable, e.g. the venv built by scripts/install-vllm.sh)."""
    import vllm

    return ModuleMapAllocatorTarget(f"vllm-{vllm.__version__}", vllm_modules(), version=vllm.__version__)
