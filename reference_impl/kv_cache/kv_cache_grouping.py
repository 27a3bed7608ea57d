"""KV cache grouping: the model's layer specs -> KV cache groups, as vLLM 0.33 groups a model HiSparse does
not lay out.

HMA-off promotion of local-attention layers, page-size unification, and the groupings by spec: one
spec, one attention type, mixed pages packed in a block-outermost layout, hybrid models in groups of
equal size, hidden-state layers on their own. HiSparse's layout groups the layers it does not serve here
too, and `kv_cache_planning.get_kv_cache_groups` (the public entry) dispatches to HiSparse or here. vLLM
keeps these functions in `v1/core/kv_cache_planning`, which re-exports vLLM's names among them.
"""

from __future__ import annotations

import logging
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import fields, replace

from reference_impl.kv_cache.kv_cache_interface import (
    AttentionSpec,
    ChunkedLocalAttentionSpec,
    CircularBufferSpec,
    FullAttentionSpec,
    HiddenStateCacheSpec,
    KVCacheGroupSpec,
    KVCacheSpec,
    MambaSpec,
    MLAAttentionSpec,
    SlidingWindowMLASpec,
    SlidingWindowSpec,
    UniformTypeKVCacheSpecs,
    cdiv,
)
from reference_impl.kv_cache.kv_cache_placement import resolve_kv_cache_layout

__all__ = [
    "E_PROMOTE",
    "create_kv_cache_group_specs",
    "get_regular_kv_cache_groups",
    "get_uniform_page_size",
    "is_kv_cache_spec_uniform",
    "is_kv_cache_type_attention_free",
    "unify_hybrid_kv_cache_specs",
    "unify_kv_cache_spec_page_size",
]

logger = logging.getLogger(__name__)

#: vLLM 0.33's error when HMA is off and local-attention layers cannot be promoted to one type.
E_PROMOTE = "Failed to promote local KV cache specs to one unified type."


def _disable_hma(vllm_config) -> bool:
    scheduler_config = getattr(vllm_config, "scheduler_config", None)
    return bool(getattr(scheduler_config, "disable_hybrid_kv_cache_manager", False))


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


def get_regular_kv_cache_groups(vllm_config, kv_cache_spec: dict[str, KVCacheSpec]) -> list[KVCacheGroupSpec]:
    """Split the model's layers into KV cache groups as vLLM 0.33 does when HiSparse does not lay them out.

    HMA disabled: local-attention layers are promoted first (in place). Then: no layers -> no groups; one
    spec -> one group; one attention type with different shapes -> one `UniformTypeKVCacheSpecs` group;
    mixed page sizes in a block-outermost layout -> packed groups; else pages are unified and layers
    grouped by type in groups of equal size (MLA beside sliding window whose pages cannot be unified
    falls back to full allocation).
    """
    if _disable_hma(vllm_config):
        unify_hybrid_kv_cache_specs(kv_cache_spec)
    if is_kv_cache_type_attention_free(kv_cache_spec):
        return []
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
