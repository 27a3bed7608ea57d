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
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import fields, replace
from functools import partial, reduce
from types import SimpleNamespace

from reference_impl.kv_cache.hisparse_layout import (
    get_hisparse_host_pool_bytes,
    get_hisparse_kv_cache_config,
    get_hisparse_kv_cache_groups,
)
from reference_impl.kv_cache.kv_cache_config_builder import KVCacheConfigBuilder, get_kv_cache_config_builder
from reference_impl.kv_cache.kv_cache_utils import update_kv_cache_capacity
from reference_impl.kv_cache.kv_cache_interface import (
    AttentionSpec,
    ChunkedLocalAttentionSpec,
    CircularBufferSpec,
    FullAttentionSpec,
    HiddenStateCacheSpec,
    HiSparseHotSpec,
    HiSparseResidentSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    KVCacheLayout,
    KVCacheSpec,
    KVCacheTensor,
    MambaSpec,
    MLAAttentionSpec,
    SlidingWindowMLASpec,
    SlidingWindowSpec,
    UniformTypeKVCacheSpecs,
    cdiv,
    compute_layout_strides,
    iter_layer_specs,
)

__all__ = [
    "DefaultKVCacheConfigBuilder",
    "E_PROMOTE",
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
    "resolve_kv_cache_layout",
    "shrink_kv_cache_configs",
    "unify_hybrid_kv_cache_specs",
    "unify_kv_cache_spec_page_size",
    "validate_kv_cache_layout",
]

logger = logging.getLogger(__name__)

#: vLLM 0.33's error when HMA is off and local-attention layers cannot be promoted to one type.
E_PROMOTE = "Failed to promote local KV cache specs to one unified type."


# ------------------------------------------------------------------------------------------ config access
def _section(vllm_config, name: str):
    return getattr(vllm_config, name, None)


def _max_model_len(vllm_config) -> int:
    return vllm_config.model_config.max_model_len


def _set_max_model_len(vllm_config, value: int) -> None:
    vllm_config.model_config.max_model_len = value


def _num_gpu_blocks_override(vllm_config) -> int | None:
    return getattr(_section(vllm_config, "cache_config"), "num_gpu_blocks_override", None)


def _retention_interval(vllm_config) -> int | None:
    return getattr(_section(vllm_config, "cache_config"), "prefix_cache_retention_interval", None)


def _hisparse_enabled(vllm_config) -> bool:
    return getattr(_section(vllm_config, "attention_config"), "hisparse_config", None) is not None


def _disable_hma(vllm_config) -> bool:
    return bool(getattr(_section(vllm_config, "scheduler_config"), "disable_hybrid_kv_cache_manager", False))


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


# ------------------------------------------------------------------------------------------------ layouts
#: The layout when the config names none (the reference's own configs): layer-outermost, each layer a run
#: of whole blocks.
DEFAULT_LAYOUT = KVCacheLayout.LBHNC


def resolve_kv_cache_layout(vllm_config) -> KVCacheLayout:
    """The layout planning places pages in: the config's resolved layout (vLLM's
    `cache_config.get_resolved_kv_cache_layout()`, which raises ValueError while the engine core has not
    resolved one, as vLLM's planning does), else its `kv_cache_layout` name, else `DEFAULT_LAYOUT`."""
    cache_config = _section(vllm_config, "cache_config")
    getter = getattr(cache_config, "get_resolved_kv_cache_layout", None)
    layout = getter() if getter is not None else getattr(cache_config, "kv_cache_layout", None)
    if layout is None:
        return DEFAULT_LAYOUT
    if isinstance(layout, KVCacheLayout):
        return layout
    # vLLM's own `KVCacheLayout` member, or a layout name
    return KVCacheLayout.from_name(getattr(layout, "name", layout))


# ------------------------------------------------------------------------------------------ spec helpers
def is_kv_cache_type_attention_free(kv_cache_spec: dict[str, KVCacheSpec]) -> bool:
    """Whether the model has no KV cache at all (an attention-free model has no layer specs)."""
    return not kv_cache_spec


def is_kv_cache_spec_uniform(kv_cache_spec: dict[str, KVCacheSpec]) -> bool:
    """Whether all layers merge into one spec (full attention with and without a recorded window counts
    as one). An empty model is uniform."""
    if not kv_cache_spec:
        return True
    specs = list(kv_cache_spec.values())
    try:
        specs[0].merge(specs)
    except AssertionError:
        return False
    return True


def create_kv_cache_group_specs(kv_cache_spec: dict[str, KVCacheSpec],
                                grouped_layer_names: list[list[str]]) -> list[KVCacheGroupSpec]:
    """One group per list of layer names, its spec the merge of its layers' specs."""
    groups = []
    for names in grouped_layer_names:
        specs = [kv_cache_spec[name] for name in names]
        groups.append(KVCacheGroupSpec(names, specs[0].merge(specs)))
    return groups


def get_uniform_page_size(kv_cache_specs: Iterable[KVCacheSpec]) -> int:
    """The one page size the specs share (AssertionError if they do not)."""
    pages = {spec.page_size_bytes for spec in kv_cache_specs}
    assert len(pages) == 1, f"expected one page size, got {sorted(pages)}"
    return pages.pop()


def _replace_spec(spec: KVCacheSpec, target_cls: type, drop: tuple[str, ...] = (), **changes) -> KVCacheSpec:
    """`spec` rebuilt as `target_cls`: the fields both classes have, minus `drop`, plus `changes`."""
    target_fields = {f.name for f in fields(target_cls) if f.init}
    values = {f.name: getattr(spec, f.name) for f in fields(spec)
              if f.init and f.name in target_fields and f.name not in drop}
    values.update(changes)
    return target_cls(**values)


def unify_kv_cache_spec_page_size(kv_cache_spec: dict[str, KVCacheSpec]) -> dict[str, KVCacheSpec]:
    """Make every layer's page as large as the largest.

    A layer whose page divides the largest grows its block size by the ratio; a Mamba layer (its page
    does not scale with the block size) and a non-MLA attention layer whose page does not divide the
    largest pad their page instead. Anything else raises NotImplementedError (MLA indexes its cache in
    whole token rows, so it cannot be padded to an arbitrary size). Returns the input when the pages
    are already equal.
    """
    pages = {spec.page_size_bytes for spec in kv_cache_spec.values()}
    if len(pages) <= 1:
        return kv_cache_spec
    largest = max(pages)
    unified: dict[str, KVCacheSpec] = {}
    for name, spec in kv_cache_spec.items():
        page = spec.page_size_bytes
        if page == largest:
            new = spec
        elif isinstance(spec, MambaSpec):
            new = replace(spec, page_size_padded=largest)
        elif largest % page == 0:
            new = replace(spec, block_size=spec.block_size * (largest // page))
        elif isinstance(spec, AttentionSpec) and not isinstance(spec, MLAAttentionSpec):
            new = replace(spec, page_size_padded=largest)
        else:
            raise NotImplementedError(
                f"Layer {name}: page size is not divisible by the maximum page size and cannot be padded. "
                "Padding is only supported for non-MLA attention layers.")
        assert new.page_size_bytes == largest
        unified[name] = new
    return unified


# Local-attention spec class -> the class it allocates as when promoted (most specific first).
_PROMOTIONS: tuple[tuple[type, type], ...] = (
    (SlidingWindowMLASpec, MLAAttentionSpec),
    (SlidingWindowSpec, FullAttentionSpec),
    (ChunkedLocalAttentionSpec, FullAttentionSpec),
)


def _is_one_type(specs: dict[str, KVCacheSpec]) -> bool:
    return is_kv_cache_spec_uniform(specs) or UniformTypeKVCacheSpecs.is_uniform_type(specs)


def _promote_local_kv_cache_specs(kv_cache_spec: dict[str, KVCacheSpec]) -> dict[str, KVCacheSpec]:
    """Allocate local-attention layers (sliding window, chunked local) as full attention, next to full
    attention layers, so the model has one spec type. Compute keeps its window; only allocation changes.

    The promoted layers take the full-attention block size when the full layers agree on one; a padded
    page stays padded (at least to the promoted unpadded page). ValueError `E_PROMOTE` when the result
    is still not one type.
    """
    promoted = dict(kv_cache_spec)
    if _is_one_type(promoted):
        return promoted
    values = list(promoted.values())
    has_full = any(isinstance(s, FullAttentionSpec) for s in values)
    has_local = any(isinstance(s, (SlidingWindowSpec, ChunkedLocalAttentionSpec)) for s in values)
    full_block_sizes = {s.block_size for s in values if isinstance(s, FullAttentionSpec)}
    full_block_size = next(iter(full_block_sizes)) if len(full_block_sizes) == 1 else None
    if has_full and has_local:
        for name, spec in kv_cache_spec.items():
            target = next((to for cls, to in _PROMOTIONS if isinstance(spec, cls)), None)
            if target is None:
                continue
            block_size = full_block_size or spec.block_size
            padded = spec.page_size_padded
            if padded is not None:
                padded = max(padded, spec.unpadded_page_size_bytes * block_size // spec.block_size)
            # A promoted layer keeps blocks for every token, so a window's trailing extension is moot.
            promoted[name] = _replace_spec(spec, target, drop=("extra_retained_tokens",),
                                           block_size=block_size, page_size_padded=padded)
    if not _is_one_type(promoted):
        raise ValueError(E_PROMOTE)
    return promoted


def unify_hybrid_kv_cache_specs(kv_cache_spec: dict[str, KVCacheSpec]) -> None:
    """HMA disabled: promote local-attention layers to full attention, in place.

    Layers replicated across DCP ranks (attention layers that are not DCP-sharded) and the others are
    promoted separately. Logs vLLM's "Hybrid KV cache manager is disabled" warning when a spec changed;
    raises ValueError `E_PROMOTE` when a part cannot become one type.
    """
    parts: defaultdict[bool, dict[str, KVCacheSpec]] = defaultdict(dict)
    for name, spec in kv_cache_spec.items():
        parts[isinstance(spec, AttentionSpec) and not spec.dcp_sharded][name] = spec
    for specs in parts.values():
        promoted = _promote_local_kv_cache_specs(specs)
        if promoted == specs:
            continue
        logger.warning(
            "Hybrid KV cache manager is disabled for this hybrid model, This means we do not enable any "
            "optimizations for saving KV cache memory (e.g., dropping the KV cache outside the sliding window). "
            "The compute of layers like sliding window is still saved.")
        kv_cache_spec.update(promoted)


# -------------------------------------------------------------------------------------------- grouping
def _get_kv_cache_groups_uniform_spec(kv_cache_specs: dict[str, KVCacheSpec]) -> list[KVCacheGroupSpec]:
    """Every layer has the same spec: one group of all layers."""
    return create_kv_cache_group_specs(kv_cache_specs, [list(kv_cache_specs)])


def _get_kv_cache_groups_uniform_type(spec: UniformTypeKVCacheSpecs) -> list[KVCacheGroupSpec]:
    """One attention type with differing shapes (e.g. head sizes): one group whose spec keeps each layer's."""
    return [KVCacheGroupSpec(list(spec.kv_cache_specs), spec)]


def _get_kv_cache_groups_uniform_page_size(kv_cache_spec: dict[str, KVCacheSpec]) -> list[KVCacheGroupSpec]:
    """Hybrid model whose layers all have one page size: groups of equally many layers, one attention
    type each.

    Layers are bucketed by spec (buckets whose specs merge join, e.g. full attention with different
    recorded windows). The group size is the smallest bucket, or the largest when it is under 1.5x the
    smallest (12 sliding + 13 full layers pad to 13 + 13 rather than split into 12 + 24). A bucket splits
    into ceil(len / group_size) groups taking every n-th layer, so pipeline stages split evenly.
    """
    same_spec: dict[KVCacheSpec, list[str]] = defaultdict(list)
    for name, spec in kv_cache_spec.items():
        same_spec[spec].append(name)
    layer_buckets: list[list[str]] = []
    spec_buckets: list[list[KVCacheSpec]] = []
    for spec, names in same_spec.items():
        for bucket_names, bucket_specs in zip(layer_buckets, spec_buckets):
            try:
                type(bucket_specs[0]).merge([*bucket_specs, spec])
            except (AssertionError, ValueError):
                continue
            bucket_names.extend(names)
            bucket_specs.append(spec)
            break
        else:
            layer_buckets.append(list(names))
            spec_buckets.append([spec])
    sizes = [len(names) for names in layer_buckets]
    group_size = min(sizes)
    if max(sizes) < 1.5 * min(sizes):
        group_size = max(sizes)
    grouped: list[list[str]] = []
    for names in layer_buckets:
        padding = group_size - len(names) % group_size
        if padding != group_size:
            logger.warning("Add %d padding layers, may waste at most %.2f%% KV cache memory",
                           padding, padding / len(names) * 100)
        num_groups = cdiv(len(names), group_size)
        grouped.extend(names[i::num_groups] for i in range(num_groups))
    return create_kv_cache_group_specs(kv_cache_spec, grouped)


def _approximate_gcd(values: Sequence[int], *, lower_bound: int | None = None) -> int:
    """The divisor d >= lower_bound minimizing the total padding sum(ceil(x / d) * d - x); ties take the
    larger d. Searched exhaustively up to max(values) (the lists are short and small)."""
    if not values:
        raise ValueError("values must be non-empty")
    if any(x <= 0 for x in values):
        raise ValueError(f"values must be positive, got: {list(values)!r}")
    low = max(1, lower_bound or 1)
    high = max(values)
    if low > high:
        return low
    best, best_pad = low, None
    for d in range(low, high + 1):
        pad = sum(-x % d for x in values)
        if best_pad is None or pad < best_pad or (pad == best_pad and d > best):
            best, best_pad = d, pad
    return best


def _max_layers_per_page_size(spec: UniformTypeKVCacheSpecs) -> int:
    """Most layers of one page size in the group (the pattern repeats of a balanced bucket)."""
    return Counter(s.page_size_bytes for s in spec.kv_cache_specs.values()).most_common(1)[0][1]


def _get_packed_kv_cache_groups(vllm_config, kv_cache_spec: dict[str, KVCacheSpec]) -> list[KVCacheGroupSpec] | None:
    """Groups for mixed page sizes packed side by side in a block-outermost layout (None when the layout
    is not block-outermost or every page is one size).

    Layers are greedily bucketed into same-type wrappers. A bucket with as many layers of each page size
    (a repeating pattern) splits into groups of an equal number of pattern repeats, chosen by
    `_approximate_gcd` to pad least but never below the largest mixed bucket, which stays whole. State
    buckets (Mamba, circular buffer, and sliding window when nothing repeats) split further so that no
    group is wider than the block the other buckets already need.
    """
    layout = resolve_kv_cache_layout(vllm_config)
    if not layout.is_block_outermost or len({s.page_size_bytes for s in kv_cache_spec.values()}) <= 1:
        return None

    buckets: list[dict[str, KVCacheSpec]] = []
    for name, spec in kv_cache_spec.items():
        for bucket in buckets:
            if UniformTypeKVCacheSpecs.is_uniform_type({**bucket, name: spec}):
                bucket[name] = spec
                break
        else:
            buckets.append({name: spec})

    bucketed = []  # (wrapper, page size -> layer names, balanced)
    for bucket in buckets:
        wrapper = UniformTypeKVCacheSpecs.from_specs(bucket)
        assert wrapper is not None, f"layers {sorted(bucket)} are not of one registered type"
        by_page: dict[int, list[str]] = defaultdict(list)
        for name, spec in bucket.items():
            by_page[spec.page_size_bytes].append(name)
        balanced = len({len(names) for names in by_page.values()}) == 1
        bucketed.append((wrapper, by_page, balanced))

    min_repeats = max((_max_layers_per_page_size(w) for w, by_page, balanced in bucketed
                       if balanced and len(by_page) > 1), default=0)
    repeats_per_group = (_approximate_gcd([_max_layers_per_page_size(w) for w, _, balanced in bucketed if balanced],
                                          lower_bound=min_repeats) if min_repeats else None)

    def num_groups_for(wrapper, balanced: bool) -> int:
        if balanced and repeats_per_group is not None:
            return cdiv(_max_layers_per_page_size(wrapper), repeats_per_group)
        return 1

    def widest_group_bytes(by_page: dict[int, list[str]], n: int) -> int:
        return sum(cdiv(len(names), n) * page for page, names in by_page.items())

    def is_state_bucket(wrapper) -> bool:
        first = wrapper.first_spec
        if isinstance(first, (MambaSpec, CircularBufferSpec)):
            return True
        return repeats_per_group is None and isinstance(first, SlidingWindowSpec)

    anchor_bytes = max((widest_group_bytes(by_page, len(w.kv_cache_specs) if is_state_bucket(w)
                                           else num_groups_for(w, balanced))
                        for w, by_page, balanced in bucketed), default=0)

    groups: list[KVCacheGroupSpec] = []
    for wrapper, by_page, balanced in bucketed:
        num_groups = num_groups_for(wrapper, balanced)
        if anchor_bytes and is_state_bucket(wrapper):
            # A state group holds only the states the block already fits, rather than widen the block.
            per_block = max(anchor_bytes // wrapper.first_spec.page_size_bytes, 1)
            num_groups = max(num_groups, cdiv(len(wrapper.kv_cache_specs), per_block))
        if num_groups == 1:
            groups.append(KVCacheGroupSpec(list(wrapper.kv_cache_specs), wrapper))
            continue
        repeats = list(zip(*by_page.values()))
        for i in range(num_groups):
            names = [name for repeat in repeats[i::num_groups] for name in repeat]
            specs = {name: wrapper.kv_cache_specs[name] for name in names}
            group_spec = UniformTypeKVCacheSpecs.from_specs(specs)
            assert group_spec is not None
            groups.append(KVCacheGroupSpec(names, group_spec))
    return groups


def _try_get_full_allocation_fallback_groups(kv_cache_spec: dict[str, KVCacheSpec]) -> list[KVCacheGroupSpec] | None:
    """MLA next to regular sliding-window layers whose pages cannot be unified: allocate the sliding
    layers as full attention, all in one same-type group (compute keeps its window). None when the model
    is not that case or promotion does not give one type."""
    specs = list(kv_cache_spec.values())
    if any(isinstance(s, (HiddenStateCacheSpec, SlidingWindowMLASpec, ChunkedLocalAttentionSpec)) for s in specs):
        return None
    if not (any(isinstance(s, MLAAttentionSpec) for s in specs) and any(isinstance(s, SlidingWindowSpec) for s in specs)):
        return None
    try:
        promoted = _promote_local_kv_cache_specs(kv_cache_spec)
    except ValueError:
        return None
    wrapper = UniformTypeKVCacheSpecs.from_specs(promoted)
    if wrapper is None:
        return None
    logger.warning("KV cache page sizes cannot be unified; treating sliding-window layers as full attention "
                   "for cache allocation. Sliding-window attention compute is unchanged.")
    return _get_kv_cache_groups_uniform_type(wrapper)


def get_kv_cache_groups(vllm_config, kv_cache_spec: dict[str, KVCacheSpec]) -> list[KVCacheGroupSpec]:
    """Split the model's layers into KV cache groups, as vLLM 0.33 does.

    HMA disabled: local-attention layers are promoted first (in place). Then: no layers -> no groups;
    HiSparse -> its groups; one spec -> one group; one attention type with different shapes -> one
    `UniformTypeKVCacheSpecs` group; mixed page sizes in a block-outermost layout -> packed groups; else
    pages are unified and layers grouped by type in groups of equal size (MLA beside sliding window
    whose pages cannot be unified falls back to full allocation).
    """
    if _disable_hma(vllm_config):
        unify_hybrid_kv_cache_specs(kv_cache_spec)
    if is_kv_cache_type_attention_free(kv_cache_spec):
        return []
    if _hisparse_enabled(vllm_config):
        groups = get_hisparse_kv_cache_groups(vllm_config, kv_cache_spec)
        if groups:
            return groups
    if is_kv_cache_spec_uniform(kv_cache_spec):
        return _get_kv_cache_groups_uniform_spec(kv_cache_spec)
    wrapper = UniformTypeKVCacheSpecs.from_specs(kv_cache_spec)
    if wrapper is not None:
        return _get_kv_cache_groups_uniform_type(wrapper)
    # Hidden-state layers keep a block table of their own: never folded into an attention bucket.
    hidden = {n: s for n, s in kv_cache_spec.items() if isinstance(s, HiddenStateCacheSpec)}
    others = {n: s for n, s in kv_cache_spec.items() if not isinstance(s, HiddenStateCacheSpec)}
    packed = _get_packed_kv_cache_groups(vllm_config, others)
    if packed:
        # Block-outermost blocks are strided by the widest group: hidden groups need no page alignment.
        return packed + [KVCacheGroupSpec([name], spec) for name, spec in hidden.items()]
    try:
        unified = unify_kv_cache_spec_page_size(others)
    except NotImplementedError:
        fallback = _try_get_full_allocation_fallback_groups(kv_cache_spec)
        if fallback is None:
            raise
        return fallback
    groups = _get_kv_cache_groups_uniform_page_size(unified)
    if hidden:
        groups = _add_hidden_state_groups(groups, hidden)
    return groups


def _hidden_bytes_per_token(spec: HiddenStateCacheSpec) -> int:
    return spec.num_kv_heads * spec.head_size * spec.dtype.itemsize


def _largest_divisor_at_most(value: int, limit: int) -> int:
    return next((d for d in range(min(value, limit), 0, -1) if value % d == 0), 1)


def _add_hidden_state_groups(groups: list[KVCacheGroupSpec],
                             hidden: dict[str, HiddenStateCacheSpec]) -> list[KVCacheGroupSpec]:
    """One group per hidden-state layer, its page padded to the other groups' common page.

    The common page must hold at least one token of the widest hidden state: when it does not (tensor
    parallelism shrinks attention pages), every group's block size (and padded page) is scaled up first.
    A hidden layer's block size is the largest divisor of the groups' gcd block size that fits the page.
    """
    common_page = get_uniform_page_size([g.kv_cache_spec for g in groups])
    widest = max(_hidden_bytes_per_token(s) for s in hidden.values())
    if widest > common_page:
        scale = cdiv(widest, common_page)
        common_page *= scale
        scaled = []
        for g in groups:
            spec = g.kv_cache_spec
            changes = {"block_size": spec.block_size * scale}
            if isinstance(spec, (AttentionSpec, MambaSpec)) and spec.page_size_padded is not None:
                changes["page_size_padded"] = spec.page_size_padded * scale
            scaled.append(KVCacheGroupSpec(g.layer_names, replace(spec, **changes)))
        groups = scaled
    group_block_size = math.gcd(*(g.kv_cache_spec.block_size for g in groups))
    for name, spec in hidden.items():
        per_token = _hidden_bytes_per_token(spec)
        block_size = _largest_divisor_at_most(group_block_size, max(common_page // per_token, 1))
        groups.append(KVCacheGroupSpec([name], replace(spec, block_size=block_size, page_size_padded=common_page)))
    return groups


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
def _get_per_layer_spec(group: KVCacheGroupSpec, layer_name: str) -> KVCacheSpec:
    spec = group.kv_cache_spec
    if isinstance(spec, UniformTypeKVCacheSpecs):
        return spec.kv_cache_specs[layer_name]
    return spec


def _block_stride_alignment(spec: KVCacheSpec) -> int:
    """Bytes a block stride of this layer must be a multiple of (1 unless a backend declares one)."""
    getter = getattr(spec, "get_block_stride_alignment", None)
    return getter() if getter is not None else 1


def _round_up(value: int, multiple: int) -> int:
    return cdiv(value, multiple) * multiple


def _get_layer_block_stride(spec: KVCacheSpec) -> int:
    """A layer-outermost block stride: the page rounded up to the layer's alignment."""
    return _round_up(spec.page_size_bytes, _block_stride_alignment(spec))


def _get_kv_cache_bytes_per_block(kv_cache_groups: list[KVCacheGroupSpec], layout: KVCacheLayout) -> int:
    """Bytes of one block id across the pool: the widest group's pages (layer-outermost: each page at
    its aligned stride; block-outermost: the pages packed, rounded up to every alignment at once)."""
    if not layout.is_block_outermost:
        return max(sum(_get_layer_block_stride(_get_per_layer_spec(g, n)) for n in g.layer_names)
                   for g in kv_cache_groups)
    widest = max(sum(_get_per_layer_spec(g, n).page_size_bytes for n in g.layer_names) for g in kv_cache_groups)
    assert widest > 0
    alignments = [g.kv_cache_spec.page_size_bytes for g in kv_cache_groups if isinstance(g.kv_cache_spec, HiSparseHotSpec)]
    alignments += [_block_stride_alignment(_get_per_layer_spec(g, n)) for g in kv_cache_groups for n in g.layer_names]
    return _round_up(widest, math.lcm(*alignments))


def validate_kv_cache_layout(layout: KVCacheLayout, kv_cache_groups: list[KVCacheGroupSpec]) -> None:
    """ValueError when the layout cannot place this model's pages: mixed page sizes pack side by side in
    a block, so each page must be one contiguous chunk (block-compact) and, with several groups, blocks
    must be outside layers."""
    pages = {_get_per_layer_spec(g, n).page_size_bytes for g in kv_cache_groups for n in g.layer_names}
    if len(pages) == 1:
        return
    if not layout.is_block_compact or (len(kv_cache_groups) > 1 and layout.is_layer_compact):
        raise ValueError(
            f"KV cache layout {layout.name} cannot express this model's mixed page sizes ({sorted(pages)}); "
            "a backend should declare block-outermost supported layouts (e.g. BLHNC), or set "
            "VLLM_KV_CACHE_LAYOUT=BLHNC.")


def may_override_num_blocks(vllm_config, num_blocks: int) -> int:
    """`cache_config.num_gpu_blocks_override` when set, else `num_blocks`."""
    override = _num_gpu_blocks_override(vllm_config)
    return num_blocks if override is None else override


def _empty_config(vllm_config, kv_cache_groups: list[KVCacheGroupSpec]) -> KVCacheConfig:
    # An attention-free model has no KV cache; the pool still needs its null block.
    return KVCacheConfig(num_blocks=1, kv_cache_tensors=[], kv_cache_groups=kv_cache_groups,
                         prefix_cache_retention_interval=_retention_interval(vllm_config))


def get_kv_cache_config_from_groups(vllm_config, kv_cache_groups: list[KVCacheGroupSpec],
                                    available_memory: int) -> KVCacheConfig:
    """The `KVCacheConfig` for these groups in `available_memory` bytes.

    num_blocks = available_memory // bytes per block (or `num_gpu_blocks_override`). Every group aliases
    the one backing allocation from byte 0; inside a group the layers of each distinct spec get one
    tensor, placed after the group's previous specs (block-outermost: after their pages within each
    block; layer-outermost: after their layer runs).
    """
    if not kv_cache_groups:
        return _empty_config(vllm_config, kv_cache_groups)
    if _hisparse_enabled(vllm_config):
        return get_hisparse_kv_cache_config(vllm_config, kv_cache_groups, available_memory,
                                            get_hisparse_host_pool_bytes(vllm_config))
    layout = resolve_kv_cache_layout(vllm_config)
    validate_kv_cache_layout(layout, kv_cache_groups)
    bytes_per_block = _get_kv_cache_bytes_per_block(kv_cache_groups, layout)
    num_blocks = may_override_num_blocks(vllm_config, available_memory // bytes_per_block)
    tensors = _build_kv_cache_tensors(kv_cache_groups, num_blocks, bytes_per_block * num_blocks, layout,
                                      bytes_per_block)
    return KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=tensors, kv_cache_groups=kv_cache_groups,
                         prefix_cache_retention_interval=_retention_interval(vllm_config))


def _build_kv_cache_tensors(kv_cache_groups: list[KVCacheGroupSpec], num_blocks: int, size: int,
                            layout: KVCacheLayout, bytes_per_block: int, *,
                            host_resident: bool = False) -> list[KVCacheTensor]:
    """Place the groups in one backing allocation of `size` bytes holding `num_blocks` blocks of
    `bytes_per_block`: every group starts at byte 0 (groups overlay; a block id belongs to one group at a
    time) and inside a group each distinct layer spec gets one tensor after the group's previous ones.

    Block-outermost: the same packing repeats in every block, the block stride being `bytes_per_block`.
    Layer-outermost: each layer owns a run of blocks, a layer's block stride its page rounded up to the
    spec's block-stride alignment. HiSparse's hot and resident pages have no per-layer view; they need a
    block-outermost layout (ValueError otherwise) and sit one page apart within a block.
    """
    interleaved_stride = bytes_per_block if layout.is_block_outermost else None
    tensors = []
    for group in kv_cache_groups:
        by_spec: dict[KVCacheSpec, list[str]] = defaultdict(list)
        # The group's own layers, not its spec's: a pipeline stage owning none of a same-type group's
        # layers keeps the global spec (vLLM 0.34) but must not place the other stage's layers.
        for name in group.layer_names:
            by_spec[_get_per_layer_spec(group, name)].append(name)
        offset = 0
        for spec, names in by_spec.items():
            if isinstance(spec, (HiSparseHotSpec, HiSparseResidentSpec)):
                if not layout.is_block_outermost:
                    raise ValueError(f"HiSparse's {type(spec).__name__} pages need a block-outermost KV cache "
                                     f"layout, got {layout.name}; accepted: BLHNC, BLNHC, BHLNC")
                layer_stride, block_stride = spec.page_size_bytes, bytes_per_block
            else:
                block_stride = interleaved_stride
                padded = _get_layer_block_stride(spec)
                if block_stride is None and padded != spec.page_size_bytes:
                    assert layout.is_block_compact, f"{layout.name} cannot pad pages"
                    block_stride = padded
                layer_stride, block_stride, *_ = compute_layout_strides(
                    spec, num_blocks, len(names), layout, fixed_strides=(None, block_stride, None, None, None))
            tensors.append(KVCacheTensor(size=size, layers=names, layer_stride=layer_stride,
                                         block_stride=block_stride, offset=offset, host_resident=host_resident))
            # Block-outermost layers share each block; layer-outermost ones own whole regions.
            offset += len(names) * (spec.page_size_bytes if layout.is_block_outermost else layer_stride)
    return tensors


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
        if not kv_cache_groups:
            return _empty_config(vllm_config, kv_cache_groups)
        return get_kv_cache_config_from_groups(vllm_config, kv_cache_groups,
                                               num_blocks * _pool_bytes_per_block(vllm_config, kv_cache_groups))
