"""KV cache config and memory for a preset: one shared int8 backing buffer, overlaid by every group.

Tensor j of the config holds the j-th layer of every group, so block id b of a layer of group g and of
the same-index layer of another group are the same bytes (the overlay a connector must respect).
Attention layers are viewed as [num_blocks, block_size, num_kv_heads, 2 * head_size] (K then V);
Mamba layers as a list of state tensors [num_blocks, *shape].
"""

from __future__ import annotations

import torch

from reference_impl.engine.presets import ModelPreset
from reference_impl.kv_cache.specs import (
    AttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    KVCacheTensor,
    MambaSpec,
)


def build_kv_cache_config(preset: ModelPreset, num_blocks: int, tp_size: int = 1) -> KVCacheConfig:
    """The `KVCacheConfig` of `preset` with `num_blocks` blocks (block 0 is the null block)."""
    groups = preset.layer_specs(tp_size)
    pages = {spec.page_size_bytes for _, _, spec in groups}
    if len(pages) != 1:
        raise ValueError(f"preset {preset.name}: groups must share one page size, got {sorted(pages)}")
    page = pages.pop()
    tensors = [
        KVCacheTensor(size=page * num_blocks, layers=tuple(names[j] for _, names, _ in groups),
                      layer_stride=0, block_stride=page)
        for j in range(preset.layers_per_group)
    ]
    return KVCacheConfig(
        num_blocks=num_blocks,
        kv_cache_tensors=tensors,
        kv_cache_groups=[KVCacheGroupSpec(layer_names=list(names), kv_cache_spec=spec) for _, names, spec in groups],
        layer_specs={name: spec for _, names, spec in groups for name in names},
    )


def allocate_kv_caches(config: KVCacheConfig) -> tuple[torch.Tensor, dict[str, torch.Tensor | list[torch.Tensor]]]:
    """(backing int8 buffer, per-layer views) for `config`, all groups overlaying the same bytes."""
    total = sum(t.size for t in config.kv_cache_tensors)
    backing = torch.zeros(total, dtype=torch.int8)
    views: dict[str, torch.Tensor | list[torch.Tensor]] = {}
    offset = 0
    for tensor in config.kv_cache_tensors:
        raw = backing[offset : offset + tensor.size].view(config.num_blocks, tensor.block_stride)
        for name in tensor.layers:
            views[name] = layer_view(raw, config.layer_specs[name])
        offset += tensor.size
    return backing, views


def layer_view(raw: torch.Tensor, spec) -> torch.Tensor | list[torch.Tensor]:
    """The typed view of one layer over `raw` ([num_blocks, page bytes])."""
    num_blocks = raw.shape[0]
    if isinstance(spec, AttentionSpec):
        used = raw[:, : spec.real_page_size_bytes]
        return used.view(spec.dtype).view(num_blocks, spec.block_size, spec.num_kv_heads, 2 * spec.head_size)
    if isinstance(spec, MambaSpec):
        states, start = [], 0
        for shape, dtype in zip(spec.shapes, spec.dtypes):
            size = dtype.itemsize
            for dim in shape:
                size *= dim
            states.append(raw[:, start : start + size].view(dtype).view((num_blocks,) + tuple(shape)))
            start += size
        return states
    raise ValueError(f"no KV view for spec {type(spec).__name__}")
