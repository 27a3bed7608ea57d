"""KV cache planning (vLLM's `v1/core/kv_cache_planning`): layers -> groups, groups -> a `KVCacheConfig`,
and the memory accounting that decides whether a model length fits.

Names and signatures follow vLLM 0.33 (`vllm_config` in; vLLM's groups and `KVCacheConfig` out). The
`vllm_config` is read duck-typed, so vLLM's own `VllmConfig` and the reference's config objects both work:
`scheduler_config.disable_hybrid_kv_cache_manager`, `model_config.max_model_len`,
`cache_config.num_gpu_blocks_override` / `prefix_cache_retention_interval` / the resolved KV cache
layout, `attention_config.hisparse_config`, `parallel_config` sizes. A missing section reads as vLLM's
default.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from functools import partial, reduce
from types import SimpleNamespace

from reference_impl.kv_cache.hisparse_layout import (
    get_hisparse_host_pool_bytes,
    get_hisparse_kv_cache_config,
    get_hisparse_kv_cache_groups,
)
from reference_impl.kv_cache.kv_cache_config_builder import KVCacheConfigBuilder, get_kv_cache_config_builder
from reference_impl.kv_cache.kv_cache_grouping import (
    _disable_hma,
    get_regular_kv_cache_groups,
    unify_hybrid_kv_cache_specs,
)
from reference_impl.kv_cache.kv_cache_interface import (
    AttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    KVCacheSpec,
    SlidingWindowSpec,
    UniformTypeKVCacheSpecs,
    cdiv,
    iter_layer_specs,
)
from reference_impl.kv_cache.kv_cache_placement import (
    _get_kv_cache_bytes_per_block,
    _num_gpu_blocks_override,
    get_regular_kv_cache_config,
    resolve_kv_cache_layout,
)
from reference_impl.kv_cache.kv_cache_utils import update_kv_cache_capacity

# vLLM's `v1/core/kv_cache_planning` defines these too; the reference homes them in grouping and placement.
# The import mapping presents this module as vLLM's, so vLLM's tests and code find them here.
from reference_impl.kv_cache.kv_cache_grouping import (
    _get_packed_kv_cache_groups,  # noqa: F401 - imported by vLLM's tests from planning
    create_kv_cache_group_specs,
    get_uniform_page_size,
    is_kv_cache_spec_uniform,
    is_kv_cache_type_attention_free,
    unify_kv_cache_spec_page_size,
)
from reference_impl.kv_cache.kv_cache_placement import may_override_num_blocks, validate_kv_cache_layout

__all__ = [
    "DefaultKVCacheConfigBuilder",
    "check_enough_kv_cache_memory",
    "create_kv_cache_group_specs",
    "estimate_max_model_len",
    "finalize_extensible_kv_cache",
    "get_global_kv_cache_groups",
    "get_kv_cache_config_from_groups",
    "get_kv_cache_configs",
    "get_kv_cache_groups",
    "get_kv_cache_groups_from_builder",
    "get_uniform_page_size",
    "is_kv_cache_spec_uniform",
    "is_kv_cache_type_attention_free",
    "kv_cache_groups_tp_replicas",
    "max_memory_usage_bytes",
    "may_override_num_blocks",
    "planning_config",
    "shrink_kv_cache_configs",
    "unify_hybrid_kv_cache_specs",
    "unify_kv_cache_spec_page_size",
    "validate_kv_cache_layout",
]

logger = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------------ config access
def _section(vllm_config, name: str):
    return getattr(vllm_config, name, None)


def _max_model_len(vllm_config) -> int:
    return vllm_config.model_config.max_model_len


def _set_max_model_len(vllm_config, value: int) -> None:
    vllm_config.model_config.max_model_len = value


def _hisparse_enabled(vllm_config) -> bool:
    return getattr(_section(vllm_config, "attention_config"), "hisparse_config", None) is not None


def planning_config(*, max_model_len: int = 8192, disable_hybrid_kv_cache_manager: bool = False,
                    kv_cache_layout: str | None = None, num_gpu_blocks_override: int | None = None,
                    prefix_cache_retention_interval: int | None = None, max_num_batched_tokens: int | None = None):
    """The config sections planning reads, for callers without a `VllmConfig` (the engine's presets, the
    config resolver): `max_model_len -1` is not supported here (no auto-fit without a model length)."""
    return SimpleNamespace(
        scheduler_config=SimpleNamespace(disable_hybrid_kv_cache_manager=disable_hybrid_kv_cache_manager,
                                         max_num_batched_tokens=max_num_batched_tokens or max_model_len),
        model_config=SimpleNamespace(max_model_len=max_model_len, original_max_model_len=max_model_len,
                                     supports_kv_cache_grouping=False),
        cache_config=SimpleNamespace(kv_cache_layout=kv_cache_layout, num_gpu_blocks_override=num_gpu_blocks_override,
                                     prefix_cache_retention_interval=prefix_cache_retention_interval),
        attention_config=SimpleNamespace(hisparse_config=None), speculative_config=None)


# -------------------------------------------------------------------------------------------- grouping
def get_kv_cache_groups(vllm_config, kv_cache_spec: dict[str, KVCacheSpec]) -> list[KVCacheGroupSpec]:
    """Split the model's layers into KV cache groups, as vLLM 0.33 does: HiSparse's groups when HiSparse is
    configured and lays the layers out (`get_hisparse_kv_cache_groups`: the model has MLA layers), else
    `kv_cache_grouping.get_regular_kv_cache_groups`. HMA disabled: local-attention layers are promoted
    first, in place.
    """
    if _hisparse_enabled(vllm_config):
        if _disable_hma(vllm_config):
            # vLLM promotes before its HiSparse dispatch, so HiSparse lays out the promoted specs (the
            # regular grouping's own promotion is then a no-op).
            unify_hybrid_kv_cache_specs(kv_cache_spec)
        groups = get_hisparse_kv_cache_groups(vllm_config, kv_cache_spec)
        if groups:
            return groups
    return get_regular_kv_cache_groups(vllm_config, kv_cache_spec)


def _check_exact_partition(groups: list[KVCacheGroupSpec], kv_cache_spec: dict[str, KVCacheSpec]) -> None:
    """AssertionError unless the groups hold every layer exactly once."""
    seen: set[str] = set()
    for group in groups:
        overlap = set(group.layer_names) & seen
        assert not overlap, f"KV cache group overlaps: {overlap}."
        seen |= set(group.layer_names)
    missing = set(kv_cache_spec) - seen
    assert not missing, f"KV cache groups miss layers: {sorted(missing)}."


def get_kv_cache_groups_from_builder(builder: KVCacheConfigBuilder, vllm_config,
                                     kv_cache_spec: dict[str, KVCacheSpec]) -> list[KVCacheGroupSpec]:
    """The builder's grouping, checked to partition the layers exactly."""
    groups = builder.get_kv_cache_groups(vllm_config, kv_cache_spec)
    _check_exact_partition(groups, kv_cache_spec)
    return groups


# ----------------------------------------------------------------------------------------- placement
def get_kv_cache_config_from_groups(vllm_config, kv_cache_groups: list[KVCacheGroupSpec],
                                    available_memory: int) -> KVCacheConfig:
    """The `KVCacheConfig` for these groups in `available_memory` bytes: with HiSparse,
    `get_hisparse_kv_cache_config` (its host pool sized by `get_hisparse_host_pool_bytes`), else
    `kv_cache_placement.get_regular_kv_cache_config` (every group aliases one device pool)."""
    if kv_cache_groups and _hisparse_enabled(vllm_config):
        return get_hisparse_kv_cache_config(vllm_config, kv_cache_groups, available_memory,
                                            get_hisparse_host_pool_bytes(vllm_config))
    return get_regular_kv_cache_config(vllm_config, kv_cache_groups, available_memory)


def _pool_bytes_per_block(vllm_config, kv_cache_groups: list[KVCacheGroupSpec]) -> int:
    """Bytes one block takes in the worker's device pool (the divisor `get_kv_cache_config_from_groups`
    turns memory into blocks with); host-resident groups excluded."""
    device = [g for g in kv_cache_groups if not g.host_resident]
    return _get_kv_cache_bytes_per_block(device, resolve_kv_cache_layout(vllm_config))


def _pool_bytes_per_block_from_builder(builder: KVCacheConfigBuilder, vllm_config,
                                       kv_cache_groups: list[KVCacheGroupSpec]) -> int:
    """Bytes one block takes in the device pool as the builder places it: the builder's declared value,
    else the size of the single device backing of a one-block placement (override suppressed so it cannot
    inflate the probe). HiSparse keeps the computed value (probing would size its host pool early).
    ValueError when the probe has several device backings of different sizes."""
    if not kv_cache_groups:
        return 0
    if _hisparse_enabled(vllm_config):
        return _pool_bytes_per_block(vllm_config, kv_cache_groups)
    declared = builder._get_pool_bytes_per_block(vllm_config, kv_cache_groups)
    if declared is not None:
        return declared
    cache_config = vllm_config.cache_config
    saved = cache_config.num_gpu_blocks_override
    cache_config.num_gpu_blocks_override = None
    try:
        probe = builder.get_kv_cache_config_from_groups(vllm_config, kv_cache_groups, num_blocks=1)
    finally:
        cache_config.num_gpu_blocks_override = saved
    sizes = {t.size for t in probe.kv_cache_tensors if not t.host_resident}
    if len(sizes) != 1:
        raise ValueError(
            f"KV cache tensors must share one device backing allocation, but got sizes {sorted(sizes)}. "
            "Override KVCacheConfigBuilder._get_pool_bytes_per_block() for placements with several device "
            "allocations.")
    return sizes.pop()


# ---------------------------------------------------------------------------------- memory accounting
def _format_gib(num_bytes: int) -> str:
    return f"{num_bytes / (1 << 30):.2f}"


def _check_enough_kv_cache_memory(available_memory: int, get_needed_memory: Callable[[], int],
                                  max_model_len: int, estimate: Callable[[int], int]) -> None:
    """ValueError when there is no memory, or less than one max_model_len request needs (naming the
    model length that would fit)."""
    if available_memory <= 0:
        raise ValueError(
            "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
            "initializing the engine (this flag also controls CPU memory reservation on the CPU backend, "
            "despite its name). See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for "
            "more details.")
    needed = get_needed_memory()
    if needed > available_memory:
        fits = estimate(available_memory)
        hint = (f"Based on the available memory, the estimated maximum model length is {fits}. "
                if fits > 0 else "")
        raise ValueError(
            f"To serve at least one request with the model's max seq len ({max_model_len}), "
            f"({_format_gib(needed)} GiB KV cache is needed, which is larger than the available KV cache "
            f"memory ({_format_gib(available_memory)} GiB). {hint}Try increasing `gpu_memory_utilization` "
            "(which also controls CPU memory on the CPU backend) or decreasing `max_model_len` when "
            "initializing the engine. See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ "
            "for more details.")


def max_memory_usage_bytes(vllm_config, kv_cache_specs: Iterable[KVCacheSpec]) -> int:
    """Worst-case bytes one max_model_len request needs over these layers (no grouping or padding)."""
    return sum(spec.max_memory_usage_bytes(vllm_config) for spec in kv_cache_specs)


def _binary_search_model_len(vllm_config, fits: Callable[[], bool]) -> int:
    """The largest model length in 1..max_model_len for which `fits()` holds (0 if not even 1), trying
    lengths by setting `model_config.max_model_len`, which is restored afterwards."""
    original = _max_model_len(vllm_config)

    def fits_len(length: int) -> bool:
        _set_max_model_len(vllm_config, length)
        return fits()

    try:
        if not fits_len(1):
            return 0
        low, high, best = 1, original, 1
        while low <= high:
            mid = (low + high) // 2
            if fits_len(mid):
                best, low = mid, mid + 1
            else:
                high = mid - 1
        return best
    finally:
        _set_max_model_len(vllm_config, original)


def estimate_max_model_len(vllm_config, kv_cache_spec: dict[str, KVCacheSpec], available_memory: int) -> int:
    """The largest model length whose per-layer worst case fits `available_memory` (binary search; the
    config's max_model_len is left unchanged)."""
    return _binary_search_model_len(
        vllm_config, lambda: max_memory_usage_bytes(vllm_config, kv_cache_spec.values()) <= available_memory)


def check_enough_kv_cache_memory(vllm_config, kv_cache_spec: dict[str, KVCacheSpec], available_memory: int) -> None:
    """ValueError unless `available_memory`, less the null block the pool holds back, serves one
    max_model_len request (nothing to check for a model without KV cache)."""
    if not kv_cache_spec:
        return
    groups = get_kv_cache_groups(vllm_config, dict(kv_cache_spec))  # grouping may unify specs in place
    check_memory = available_memory - _pool_bytes_per_block(vllm_config, groups) if groups else available_memory
    _check_enough_kv_cache_memory(
        check_memory, lambda: max_memory_usage_bytes(vllm_config, kv_cache_spec.values()),
        _max_model_len(vllm_config), lambda memory: estimate_max_model_len(vllm_config, kv_cache_spec, memory))


def _group_blocks_per_request(vllm_config, group: KVCacheGroupSpec) -> int:
    spec = group.kv_cache_spec
    if isinstance(spec, UniformTypeKVCacheSpecs):
        # The layers share one block table: the group needs its longest layer's page count.
        return max(cdiv(s.max_memory_usage_bytes(vllm_config), s.page_size_bytes)
                   for s in spec.kv_cache_specs.values())
    return cdiv(spec.max_memory_usage_bytes(vllm_config), spec.page_size_bytes)


def _max_memory_usage_bytes_from_groups(builder: KVCacheConfigBuilder, vllm_config,
                                        kv_cache_groups: list[KVCacheGroupSpec]) -> int:
    """Device bytes one max_model_len request needs: every group takes its own blocks from the shared
    pool, so bytes per block x the sum of the groups' block counts (padding layers included)."""
    device = [g for g in kv_cache_groups if not g.host_resident]
    if not device:
        return 0
    bytes_per_block = _pool_bytes_per_block_from_builder(builder, vllm_config, device)
    return bytes_per_block * sum(_group_blocks_per_request(vllm_config, g) for g in device)


def _estimate_max_model_len_from_groups(builder: KVCacheConfigBuilder, vllm_config,
                                        kv_cache_groups: list[KVCacheGroupSpec], available_memory: int) -> int:
    """The largest model length whose grouped worst case fits `available_memory` (0 if not one token);
    with HiSparse the host pool must also place it."""
    hisparse = _hisparse_enabled(vllm_config) and bool(kv_cache_groups)

    def fits() -> bool:
        if hisparse:
            try:
                num_blocks = available_memory // _pool_bytes_per_block_from_builder(builder, vllm_config, kv_cache_groups)
                builder.get_kv_cache_config_from_groups(vllm_config, kv_cache_groups, num_blocks)
            except ValueError:
                return False
        return _max_memory_usage_bytes_from_groups(builder, vllm_config, kv_cache_groups) <= available_memory

    return _binary_search_model_len(vllm_config, fits)


def _auto_fit_max_model_len(builder: KVCacheConfigBuilder, vllm_config,
                            projected_groups_per_worker: list[list[KVCacheGroupSpec]],
                            available_memory: list[int], after_warmup: bool = False) -> None:
    """max_model_len -1: lower `model_config.max_model_len` to the largest length every worker fits
    (unchanged when the model's full length fits or the model has no KV cache); ValueError when not one
    token fits. `after_warmup` (vLLM 0.34's extensible KV cache): the fit is redone on the memory measured
    after CUDA graph capture and warmup, and the error says what took the memory."""
    original = _max_model_len(vllm_config)
    if all(not groups for groups in projected_groups_per_worker):
        return
    fit = original
    for groups, memory in zip(projected_groups_per_worker, available_memory):
        if groups:
            fit = min(fit, _estimate_max_model_len_from_groups(builder, vllm_config, groups, memory))
    if fit <= 0:
        hint = ("CUDA graph capture and warmup left no memory for the KV cache. Increase "
                "`gpu_memory_utilization`, reduce the memory CUDA graphs take (fewer or smaller capture sizes "
                "in the compilation config), or use more GPUs." if after_warmup
                else "Try increasing `gpu_memory_utilization`.")
        raise ValueError("Cannot auto-fit max_model_len: not enough GPU memory available to serve even a "
                         f"single token. {hint}")
    if fit < original:
        logger.info("Auto-fit max_model_len: reduced from %d to %d to fit in available KV cache memory",
                    original, fit)
        _set_max_model_len(vllm_config, fit)


def shrink_kv_cache_configs(vllm_config, kv_cache_configs: list[KVCacheConfig], num_blocks: int) -> None:
    """Lower every config's `num_blocks` in place to the count measured after warmup (vLLM 0.34's
    extensible KV cache). Device tensors shrink in proportion, keeping their strides and offsets (they
    still describe the reserved capacity); host-resident tensors (HiSparse's host pool, sized by its own
    block count) stay. ValueError when the count, less the null block, no longer serves max_model_len."""
    builder = get_kv_cache_config_builder(vllm_config)
    for config in kv_cache_configs:
        if num_blocks > config.num_blocks:
            raise ValueError(f"shrink_kv_cache_configs: num_blocks {num_blocks} exceeds the config's "
                             f"{config.num_blocks}; the measured count can only lower the reservation")
        config.kv_cache_tensors = [
            tensor if tensor.host_resident else replace(tensor, size=num_blocks * tensor.size // config.num_blocks)
            for tensor in config.kv_cache_tensors]
        groups = config.kv_cache_groups
        if groups:
            _check_enough_kv_cache_memory(
                (num_blocks - 1) * _pool_bytes_per_block_from_builder(builder, vllm_config, groups),
                partial(_max_memory_usage_bytes_from_groups, builder, vllm_config, groups),
                _max_model_len(vllm_config), partial(_estimate_max_model_len_from_groups, builder, vllm_config, groups))
        config.num_blocks = num_blocks


def finalize_extensible_kv_cache(vllm_config, kv_cache_configs: list[KVCacheConfig],
                                 scheduler_kv_cache_config: KVCacheConfig, compilation_times: Sequence) -> int:
    """Settle the KV cache size from the block counts the workers measured after warmup (each entry's
    `num_kv_blocks`; None: not measured) and return it: the smallest, never above the scheduler's
    reservation. With max_model_len -1 the length is fitted again to that count; every config shrinks to
    it, `cache_config.num_gpu_blocks` takes it and the scheduler's capacity is updated."""
    measured = [t.num_kv_blocks for t in compilation_times if t.num_kv_blocks is not None]
    # No measurement (vLLM's elastic-EP scale-up skips warmup): the reservation stands.
    num_blocks = min(min(measured, default=scheduler_kv_cache_config.num_blocks),
                     scheduler_kv_cache_config.num_blocks)
    if getattr(vllm_config.model_config, "original_max_model_len", None) == -1:
        # The length was fitted to the reservation, before CUDA graphs and warmup took their share.
        builder = get_kv_cache_config_builder(vllm_config)
        groups_per_worker = [config.kv_cache_groups for config in kv_cache_configs]
        memory = [(num_blocks - 1) * _pool_bytes_per_block_from_builder(builder, vllm_config, groups) if groups else 0
                  for groups in groups_per_worker]
        _auto_fit_max_model_len(builder, vllm_config, groups_per_worker, memory, after_warmup=True)
    shrink_kv_cache_configs(vllm_config, [*kv_cache_configs, scheduler_kv_cache_config], num_blocks)
    vllm_config.cache_config.num_gpu_blocks = num_blocks
    if scheduler_kv_cache_config.kv_cache_groups:
        update_kv_cache_capacity(vllm_config, scheduler_kv_cache_config)
    return num_blocks


def _layer_tp_replicas(spec: KVCacheSpec, tp_size: int, dcp_size: int) -> int:
    shards = getattr(spec, "max_tp_shards", None)
    if not isinstance(spec, AttentionSpec) or shards is None:
        return 1
    if spec.dcp_sharded and dcp_size > 1:
        return 1
    return max(1, tp_size // shards)


def kv_cache_groups_tp_replicas(groups: list[KVCacheGroupSpec], tp_size: int, dcp_size: int = 1) -> int:
    """Consecutive TP ranks that hold identical KV for every layer: the gcd over layers of the ranks
    each layer is replicated on (a layer with fewer KV heads than ranks is replicated)."""
    specs = [s for g in groups for s in iter_layer_specs(g.kv_cache_spec)]
    if not specs:
        return 1
    return reduce(math.gcd, (_layer_tp_replicas(s, tp_size, dcp_size) for s in specs), tp_size)


# ---------------------------------------------------------------------------------- cross-worker plan
def _project_kv_cache_groups_to_worker(global_kv_cache_groups: list[KVCacheGroupSpec],
                                       worker_spec: dict[str, KVCacheSpec]) -> list[KVCacheGroupSpec]:
    """The global groups restricted to one worker's layers (pipeline parallelism), keeping each group's
    flags; a same-type group keeps only this worker's layer specs."""
    projected = []
    for group in global_kv_cache_groups:
        names = [n for n in group.layer_names if n in worker_spec]
        if len(names) == len(group.layer_names):
            projected.append(group)
            continue
        spec = group.kv_cache_spec
        if names and isinstance(spec, UniformTypeKVCacheSpecs):
            spec = UniformTypeKVCacheSpecs(block_size=spec.block_size,
                                           kv_cache_specs={n: spec.kv_cache_specs[n] for n in names})
        projected.append(KVCacheGroupSpec(names, spec, is_eagle_group=group.is_eagle_group,
                                          host_resident=group.host_resident,
                                          enable_kv_transfer=group.enable_kv_transfer, role=group.role))
    return projected


def _parallel_sizes(vllm_config) -> tuple[int, int]:
    parallel = _section(vllm_config, "parallel_config")
    return (getattr(parallel, "tensor_parallel_size", 1) or 1,
            getattr(parallel, "decode_context_parallel_size", 1) or 1)


def get_kv_cache_configs(vllm_config, kv_cache_specs: list[dict[str, KVCacheSpec]], available_memory: list[int],
                         global_kv_cache_groups: list[KVCacheGroupSpec]) -> list[KVCacheConfig]:
    """One `KVCacheConfig` per worker, consistent across workers (one scheduler drives them all).

    The global groups are projected onto each worker's layers; `num_gpu_blocks_override` replaces the
    profiled memory; the null block is held back before auto-fitting max_model_len (-1) and checking that
    one request fits; each worker is placed with its memory, then every worker is re-placed with the
    smallest block count so strides and sizes agree.
    """
    builder = get_kv_cache_config_builder(vllm_config)
    projected = [_project_kv_cache_groups_to_worker(global_kv_cache_groups, spec) for spec in kv_cache_specs]
    override = _num_gpu_blocks_override(vllm_config)
    if override is not None:
        available_memory = [memory if not groups else
                            override * _pool_bytes_per_block_from_builder(builder, vllm_config, groups)
                            for groups, memory in zip(projected, available_memory)]
    check_memory = [memory - _pool_bytes_per_block_from_builder(builder, vllm_config, groups) if groups else memory
                    for groups, memory in zip(projected, available_memory)]
    model_config = vllm_config.model_config
    if getattr(model_config, "original_max_model_len", None) == -1:
        _auto_fit_max_model_len(builder, vllm_config, projected, check_memory)
    for groups, memory in zip(projected, check_memory):
        if groups:
            _check_enough_kv_cache_memory(
                memory, partial(_max_memory_usage_bytes_from_groups, builder, vllm_config, groups),
                _max_model_len(vllm_config), partial(_estimate_max_model_len_from_groups, builder, vllm_config, groups))
    configs = []
    for groups, spec, memory in zip(projected, kv_cache_specs, available_memory):
        assert sum(len(g.layer_names) for g in groups) == len(spec), "Some layers are not assigned to any group."
        num_blocks = memory // _pool_bytes_per_block_from_builder(builder, vllm_config, groups) if groups else 1
        configs.append(builder.get_kv_cache_config_from_groups(vllm_config, groups, num_blocks))
    fewest = min(c.num_blocks for c in configs)
    configs = [c if c.num_blocks == fewest else
               builder.get_kv_cache_config_from_groups(vllm_config, c.kv_cache_groups, fewest) for c in configs]
    tp_size, dcp_size = _parallel_sizes(vllm_config)
    for config in configs:
        config.kv_tp_replicas = kv_cache_groups_tp_replicas(config.kv_cache_groups, tp_size, dcp_size)
    # Every worker zeroes the block ids the one scheduler sends, so all agree on whether it sends any.
    needs_zeroing = any(config.needs_kv_cache_zeroing for config in configs)
    for config in configs:
        config.needs_kv_cache_zeroing = needs_zeroing
    return configs


def _num_prefill_lookahead_tokens(vllm_config) -> int:
    return getattr(vllm_config, "num_prefill_lookahead_tokens", 0) or 0


def get_global_kv_cache_groups(vllm_config, kv_cache_specs: list[dict[str, KVCacheSpec]]) -> list[KVCacheGroupSpec]:
    """Group the whole model: the workers' layer specs merged (a layer must have one spec on every
    worker), sliding-window layers told how many extra tokens multi-token speculation retains, grouped by
    the builder; with EAGLE's block drop, groups holding draft layers are marked as EAGLE groups."""
    builder = get_kv_cache_config_builder(vllm_config)
    merged: dict[str, KVCacheSpec] = {}
    for worker in kv_cache_specs:
        for name, spec in worker.items():
            if name in merged:
                assert merged[name] == spec, ("The KV cache specs for the same layer are different across "
                                              "workers. This is not supported yet.")
            else:
                merged[name] = spec
    extra = max(0, _num_prefill_lookahead_tokens(vllm_config) - 1)
    for name, spec in merged.items():
        if isinstance(spec, SlidingWindowSpec):
            merged[name] = replace(spec, extra_retained_tokens=extra)
    groups = get_kv_cache_groups_from_builder(builder, vllm_config, merged)
    spec_config = _section(vllm_config, "speculative_config")
    use_drop = getattr(spec_config, "use_eagle_block_drop", None)
    if spec_config is not None and use_drop is not None and use_drop():
        drafts = {name for name, spec in merged.items() if spec.is_draft}
        for group in groups:
            group.is_eagle_group = not drafts.isdisjoint(group.layer_names)
    return groups


class DefaultKVCacheConfigBuilder(KVCacheConfigBuilder):
    """The default grouping and placement, over this module's functions.

    A model that declares its own grouping (`model_config.supports_kv_cache_grouping`) owns it, except
    with HiSparse, which groups by itself.
    """

    def get_kv_cache_groups(self, vllm_config, kv_cache_spec: dict[str, KVCacheSpec]) -> list[KVCacheGroupSpec]:
        """The model's declared grouping, else `get_kv_cache_groups`."""
        model_config = _section(vllm_config, "model_config")
        if not getattr(model_config, "supports_kv_cache_grouping", False):
            return get_kv_cache_groups(vllm_config, kv_cache_spec)
        if _hisparse_enabled(vllm_config):
            raise ValueError("A model-declared get_kv_cache_groups cannot be combined with HiSparse, which owns "
                             "its own KV cache grouping. Remove one of them.")
        model_cls, _ = model_config.registry.resolve_model_cls(model_config.architectures, model_config)
        return model_cls.get_kv_cache_groups(vllm_config, kv_cache_spec)

    def get_kv_cache_config_from_groups(self, vllm_config, kv_cache_groups: list[KVCacheGroupSpec],
                                        num_blocks: int) -> KVCacheConfig:
        """`get_kv_cache_config_from_groups` for exactly `num_blocks` blocks."""
        if not kv_cache_groups:  # no pool to size: the attention-free config
            return get_kv_cache_config_from_groups(vllm_config, kv_cache_groups, 0)
        return get_kv_cache_config_from_groups(vllm_config, kv_cache_groups,
                                               num_blocks * _pool_bytes_per_block(vllm_config, kv_cache_groups))
