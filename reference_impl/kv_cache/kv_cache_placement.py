"""KV cache placement: groups -> tensors in one backing pool, in the config's KV cache layout.

The layout resolution, the bytes one block id takes, the check that a layout can place a model's pages,
the tensors of each group, and the `KVCacheConfig` of groups that need nothing beyond that. The lowest
of the planning modules: `kv_cache_grouping` packs groups by the resolved layout, HiSparse's layout places
its device and host pools with it, and `kv_cache_planning` dispatches to HiSparse or here. vLLM keeps
these functions in `v1/core/kv_cache_planning`, which re-exports vLLM's names among them.
"""

from __future__ import annotations

import math
from collections import defaultdict

from reference_impl.kv_cache.kv_cache_interface import (
    HiSparseHotSpec,
    HiSparseResidentSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    KVCacheLayout,
    KVCacheSpec,
    KVCacheTensor,
    UniformTypeKVCacheSpecs,
    cdiv,
    compute_layout_strides,
)

__all__ = [
    "DEFAULT_LAYOUT",
    "get_regular_kv_cache_config",
    "may_override_num_blocks",
    "resolve_kv_cache_layout",
    "validate_kv_cache_layout",
]


def _cache_setting(vllm_config, name: str):
    """`vllm_config.cache_config.<name>`; None when the section or the setting is missing."""
    return getattr(getattr(vllm_config, "cache_config", None), name, None)


#: The layout when the config names none (the reference's own configs): layer-outermost, each layer a run
#: of whole blocks.
DEFAULT_LAYOUT = KVCacheLayout.LBHNC


def resolve_kv_cache_layout(vllm_config) -> KVCacheLayout:
    """The layout planning places pages in: the config's resolved layout (vLLM's
    `cache_config.get_resolved_kv_cache_layout()`, which raises ValueError while the engine core has not
    resolved one, as vLLM's planning does), else its `kv_cache_layout` name, else `DEFAULT_LAYOUT`."""
    cache_config = getattr(vllm_config, "cache_config", None)
    getter = getattr(cache_config, "get_resolved_kv_cache_layout", None)
    layout = getter() if getter is not None else getattr(cache_config, "kv_cache_layout", None)
    if layout is None:
        return DEFAULT_LAYOUT
    if isinstance(layout, KVCacheLayout):
        return layout
    # vLLM's own `KVCacheLayout` member, or a layout name
    return KVCacheLayout.from_name(getattr(layout, "name", layout))


def _num_gpu_blocks_override(vllm_config) -> int | None:
    return _cache_setting(vllm_config, "num_gpu_blocks_override")


def _retention_interval(vllm_config) -> int | None:
    return _cache_setting(vllm_config, "prefix_cache_retention_interval")


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


def get_regular_kv_cache_config(vllm_config, kv_cache_groups: list[KVCacheGroupSpec],
                                available_memory: int) -> KVCacheConfig:
    """The `KVCacheConfig` for these groups in `available_memory` bytes, all of them in one device pool
    (no HiSparse host pool: `kv_cache_planning.get_kv_cache_config_from_groups` dispatches that).

    num_blocks = available_memory // bytes per block (or `num_gpu_blocks_override`). Every group aliases
    the one backing allocation from byte 0; inside a group the layers of each distinct spec get one
    tensor, placed after the group's previous specs (block-outermost: after their pages within each
    block; layer-outermost: after their layer runs).
    """
    if not kv_cache_groups:
        return _empty_config(vllm_config, kv_cache_groups)
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
