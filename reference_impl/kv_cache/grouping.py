"""From layer specs to KV cache groups and one shared pool (vLLM's `get_kv_cache_groups` and friends).

Also the `kv_cache_groups` stage of config resolution: `resolve_groups(layer_kinds, disable_hma, era_style)`.
"""

from __future__ import annotations

import logging
import math
from dataclasses import replace

import torch

from reference_impl.config import messages

from reference_impl.kv_cache.kv_cache_interface import (
    AttentionSpec,
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    KVCacheSpec,
    KVCacheTensor,
    MambaSpec,
    SlidingWindowSpec,
)

__all__ = [
    "ERA_STYLES",
    "W_U",
    "E_UNIFY_SEED",
    "E_UNIFY_V033",
    "LAYER_KINDS",
    "is_kv_cache_spec_uniform",
    "unify_hybrid_kv_cache_specs",
    "unify_kv_cache_spec_page_size",
    "get_kv_cache_groups",
    "get_kv_cache_config_from_groups",
    "default_layer_spec",
    "resolve_groups",
]

logger = logging.getLogger(__name__)

ERA_STYLES = ("seed", "v0.33")

# The era texts have one home with the rest of vLLM's HMA messages.
W_U, E_UNIFY_SEED, E_UNIFY_V033 = messages.W_U, messages.E_UNIFY_SEED, messages.E_UNIFY_V033


def _warn(warnings: list[str] | None, text: str) -> None:
    logger.warning(text)
    if warnings is not None:
        warnings.append(text)


def _mergeable(specs) -> bool:
    try:
        type(specs[0]).merge(list(specs))
    except (ValueError, AssertionError):
        return False
    return all(type(s) is type(specs[0]) for s in specs)


def is_kv_cache_spec_uniform(kv_cache_spec: dict[str, KVCacheSpec]) -> bool:
    """Whether all layers can share one group (their specs merge into one)."""
    specs = list(kv_cache_spec.values())
    return not specs or _mergeable(specs)


def _promote(spec: KVCacheSpec, full_block_size: int) -> KVCacheSpec:
    """A sliding-window / chunked-local spec as full attention, recording its window / chunk."""
    if not isinstance(spec, (SlidingWindowSpec, ChunkedLocalAttentionSpec)):
        return spec  # full attention and Mamba layers stay as they are (a Mamba spec has no attention shape)
    common = dict(block_size=full_block_size, num_kv_heads=spec.num_kv_heads, head_size=spec.head_size,
                  dtype=spec.dtype, head_size_v=spec.head_size_v, page_size_padded=None)
    if isinstance(spec, SlidingWindowSpec):
        return FullAttentionSpec(**common, sliding_window=spec.sliding_window)
    if isinstance(spec, ChunkedLocalAttentionSpec):
        return FullAttentionSpec(**common, attention_chunk_size=spec.attention_chunk_size)
    return spec


def unify_hybrid_kv_cache_specs(kv_cache_spec: dict[str, KVCacheSpec], era_style: str = "v0.33",
                                warnings: list[str] | None = None) -> None:
    """HMA disabled: promote local-attention layers to full attention in place, or raise ValueError.

    seed: logs W-U for any non-uniform model, then raises E_UNIFY_SEED if promotion cannot unify.
    v0.33: raises E_UNIFY_V033 (before any warning) if promotion cannot unify; logs W-U only if specs changed.
    """
    if era_style not in ERA_STYLES:
        raise ValueError(f"era_style must be one of {', '.join(ERA_STYLES)}, got {era_style!r}")
    if is_kv_cache_spec_uniform(kv_cache_spec):
        return
    if era_style == "seed":
        _warn(warnings, W_U)
    fulls = [s for s in kv_cache_spec.values() if isinstance(s, FullAttentionSpec)]
    has_local = any(isinstance(s, (SlidingWindowSpec, ChunkedLocalAttentionSpec)) for s in kv_cache_spec.values())
    promoted = dict(kv_cache_spec)
    if fulls and has_local:
        full_bs = fulls[0].block_size
        for name, spec in kv_cache_spec.items():
            promoted[name] = _promote(spec, full_bs)
    if not is_kv_cache_spec_uniform(promoted):
        raise ValueError(E_UNIFY_SEED if era_style == "seed" else E_UNIFY_V033)
    if era_style == "v0.33":
        _warn(warnings, W_U)
    kv_cache_spec.update(promoted)


def unify_kv_cache_spec_page_size(kv_cache_spec: dict[str, KVCacheSpec]) -> dict[str, KVCacheSpec]:
    """Make every page equal to the largest: grow block sizes where the page divides it, else pad."""
    pages = {s.page_size_bytes for s in kv_cache_spec.values()}
    if len(pages) <= 1:
        return dict(kv_cache_spec)
    largest = max(pages)
    out = {}
    for name, spec in kv_cache_spec.items():
        page = spec.page_size_bytes
        if page == largest:
            out[name] = spec
        elif spec.page_size_padded is not None:
            # An already padded page cannot be re-padded or scaled consistently.
            raise NotImplementedError(f"layer {name!r} has a padded page ({page} bytes) smaller than {largest}")
        elif isinstance(spec, MambaSpec):
            out[name] = replace(spec, page_size_padded=largest)
        elif largest % page == 0:
            out[name] = replace(spec, block_size=spec.block_size * (largest // page))
        elif isinstance(spec, AttentionSpec):
            out[name] = replace(spec, page_size_padded=largest)
        else:
            raise NotImplementedError(f"cannot unify the page size of layer {name!r} ({page} bytes) to {largest}")
    return out


def _uniform_page_grouping(kv_cache_spec: dict[str, KVCacheSpec],
                           warnings: list[str] | None) -> list[KVCacheGroupSpec]:
    buckets: list[tuple[KVCacheSpec, list[str]]] = []
    index: dict[KVCacheSpec, int] = {}
    for name, spec in kv_cache_spec.items():
        if spec not in index:
            index[spec] = len(buckets)
            buckets.append((spec, []))
        buckets[index[spec]][1].append(name)
    merged: list[tuple[list[KVCacheSpec], list[str]]] = []
    for spec, names in buckets:
        for specs, layer_names in merged:
            if _mergeable(specs + [spec]):
                specs.append(spec)
                layer_names.extend(names)
                break
        else:
            merged.append(([spec], list(names)))
    sizes = [len(names) for _, names in merged]
    group_size = min(sizes)
    if max(sizes) < 1.5 * min(sizes):
        group_size = max(sizes)
    groups = []
    for specs, names in merged:
        num_groups = math.ceil(len(names) / group_size)
        for i in range(num_groups):
            layers = names[i::num_groups]
            if len(layers) < group_size:
                logger.debug("Add %d padding layers", group_size - len(layers))
            merged_spec = type(specs[0]).merge([kv_cache_spec[n] for n in layers])
            groups.append(KVCacheGroupSpec(layer_names=layers, kv_cache_spec=merged_spec))
    return groups


def get_kv_cache_groups(kv_cache_spec: dict[str, KVCacheSpec], *, disable_hybrid_kv_cache_manager: bool = False,
                        era_style: str = "v0.33", warnings: list[str] | None = None) -> list[KVCacheGroupSpec]:
    """Group layers: one group if uniform, else unify pages and group by equal spec (spec section 3)."""
    if not isinstance(kv_cache_spec, dict):
        raise ValueError(f"kv_cache_spec must be a dict of layer name -> KVCacheSpec, got {type(kv_cache_spec).__name__}")
    for name, spec in kv_cache_spec.items():
        if not isinstance(spec, KVCacheSpec):
            raise ValueError(f"kv_cache_spec[{name!r}] must be a KVCacheSpec, got {type(spec).__name__}")
    specs = dict(kv_cache_spec)
    if disable_hybrid_kv_cache_manager:
        unify_hybrid_kv_cache_specs(specs, era_style, warnings)
    if not specs:
        return []
    if is_kv_cache_spec_uniform(specs):
        merged = type(next(iter(specs.values()))).merge(list(specs.values()))
        return [KVCacheGroupSpec(layer_names=list(specs), kv_cache_spec=merged)]
    try:
        unified = unify_kv_cache_spec_page_size(specs)
    except NotImplementedError as exc:
        raise ValueError(f"kv_cache_spec: page sizes cannot be unified: {exc}") from None
    return _uniform_page_grouping(unified, warnings)


def get_kv_cache_config_from_groups(kv_cache_groups: list[KVCacheGroupSpec], *, num_blocks: int | None = None,
                                    available_memory: int | None = None,
                                    prefix_cache_retention_interval: int | None = None) -> KVCacheConfig:
    """One pool: bytes per block = the largest group's sum of pages; every group overlays it from byte 0."""
    if (num_blocks is None) == (available_memory is None):
        raise ValueError("give exactly one of num_blocks and available_memory")
    layer_specs: dict[str, KVCacheSpec] = {}
    group_bytes = []
    for g in kv_cache_groups:
        page = g.kv_cache_spec.page_size_bytes
        group_bytes.append(page * len(g.layer_names))
        for name in g.layer_names:
            layer_specs[name] = g.kv_cache_spec
    bytes_per_block = max(group_bytes, default=0)
    if num_blocks is None:
        if isinstance(available_memory, bool) or not isinstance(available_memory, int) or available_memory < 0:
            raise ValueError(f"available_memory must be a non-negative integer, got {available_memory!r}")
        num_blocks = available_memory // bytes_per_block if bytes_per_block else 1
    if isinstance(num_blocks, bool) or not isinstance(num_blocks, int) or num_blocks < 1:
        raise ValueError(f"num_blocks must be an integer >= 1, got {num_blocks!r}")
    tensors = []
    for g in kv_cache_groups:
        page = g.kv_cache_spec.page_size_bytes
        tensors.append(KVCacheTensor(size=bytes_per_block * num_blocks, layers=tuple(g.layer_names),
                                     layer_stride=page * num_blocks, block_stride=page, offset=0))
    return KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=tensors, kv_cache_groups=kv_cache_groups,
                         prefix_cache_retention_interval=prefix_cache_retention_interval, layer_specs=layer_specs)


LAYER_KINDS = ("full", "sliding_window", "chunked_local", "mamba")


def default_layer_spec(kind: str, *, block_size: int = 16, sliding_window: int = 4096,
                       attention_chunk_size: int = 8192) -> KVCacheSpec:
    """A representative spec per layer kind: 8 KV heads x 128 bf16; Mamba state smaller than a page."""
    attn = dict(block_size=block_size, num_kv_heads=8, head_size=128, dtype=torch.bfloat16)
    if kind == "full":
        return FullAttentionSpec(**attn)
    if kind == "sliding_window":
        return SlidingWindowSpec(**attn, sliding_window=sliding_window)
    if kind == "chunked_local":
        return ChunkedLocalAttentionSpec(**attn, attention_chunk_size=attention_chunk_size)
    if kind == "mamba":
        return MambaSpec(block_size=block_size, shapes=((64, 128), (8, 64, 16)), dtypes=(torch.bfloat16, torch.bfloat16))
    raise ValueError(f"unknown layer kind {kind!r}; accepted: {', '.join(LAYER_KINDS)}")


def _spec_kind(spec: KVCacheSpec) -> str:
    return {FullAttentionSpec: "full", SlidingWindowSpec: "sliding_window",
            ChunkedLocalAttentionSpec: "chunked_local", MambaSpec: "mamba"}[type(spec)]


def resolve_groups(layer_kinds: list[str], disable_hma: bool, era_style: str,
                   warnings: list[str] | None = None) -> tuple[list[dict], list[str]]:
    """The `kv_cache_groups` stage: group layers of the given kinds as vLLM would.

    Layers are named "layers.{i}" in input order. Returns (groups, warnings): one dict per group,
    {"kind": the group's spec kind after any promotion, "layers": [layer indices],
     "block_size": tokens per block, "page_size_bytes": bytes per block of one layer}.
    Raises ValueError with the era's exact text when HMA is disabled and the specs cannot be unified,
    and ValueError naming the field for bad input.
    """
    if not isinstance(layer_kinds, list):
        raise ValueError(f"layers must be a list of layer kinds, got {type(layer_kinds).__name__}")
    if not isinstance(disable_hma, bool):
        raise ValueError(f"disable_hma must be a bool, got {disable_hma!r}")
    if era_style not in ERA_STYLES:
        raise ValueError(f"era_style must be one of {', '.join(ERA_STYLES)}, got {era_style!r}")
    specs = {}
    for i, kind in enumerate(layer_kinds):
        if kind not in LAYER_KINDS:
            raise ValueError(f"layers[{i}]: unknown layer kind {kind!r}; accepted: {', '.join(LAYER_KINDS)}")
        specs[f"layers.{i}"] = default_layer_spec(kind)
    warnings = [] if warnings is None else warnings  # the caller's list keeps warnings logged before an error
    groups = get_kv_cache_groups(specs, disable_hybrid_kv_cache_manager=disable_hma, era_style=era_style,
                                 warnings=warnings)
    summary = [
        {"kind": _spec_kind(g.kv_cache_spec), "layers": [int(n.split(".")[1]) for n in g.layer_names],
         "block_size": g.kv_cache_spec.block_size, "page_size_bytes": g.kv_cache_spec.page_size_bytes}
        for g in groups
    ]
    return summary, warnings
