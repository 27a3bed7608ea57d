"""The KV cache memory: one shared backing torch allocation, overlaid by every group from byte 0.

Block id b means "slot b" in every group's layers; the pool hands an id to one group at a time, so
overlays never collide. Allocated on `cuda` when available, else `cpu`.
"""

from __future__ import annotations

import math

import torch

from reference_impl.kv_cache.kv_cache_interface import AttentionSpec, KVCacheConfig, KVCacheSpec, MambaSpec, cdiv

__all__ = ["default_device", "KVCacheTensors"]


def default_device() -> torch.device:
    """cuda when a GPU is present, else cpu."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


class KVCacheTensors:
    """Backing storage of a `KVCacheConfig` with per-layer block views and one-block write/read helpers."""

    def __init__(self, kv_cache_config: KVCacheConfig, device: torch.device | str | None = None):
        self.kv_cache_config = kv_cache_config
        self.device = torch.device(device) if device is not None else default_device()
        self.num_blocks = kv_cache_config.num_blocks
        size = max((t.size for t in kv_cache_config.kv_cache_tensors), default=0)
        self.backing = torch.zeros(size, dtype=torch.uint8, device=self.device)
        self._layer_spec: dict[str, KVCacheSpec] = {}
        self._layer_pages: dict[str, torch.Tensor] = {}
        for tensor, group in zip(kv_cache_config.kv_cache_tensors, kv_cache_config.kv_cache_groups):
            spec = group.kv_cache_spec
            for j, name in enumerate(tensor.layers):
                start = tensor.offset + j * tensor.layer_stride
                raw = self.backing[start : start + self.num_blocks * tensor.block_stride]
                self._layer_pages[name] = raw.view(self.num_blocks, tensor.block_stride)
                self._layer_spec[name] = spec

    @property
    def layer_names(self) -> list[str]:
        """Every layer with a view."""
        return list(self._layer_pages)

    def _check(self, layer_name: str, block_id: int) -> None:
        if layer_name not in self._layer_pages:
            raise ValueError(f"layer_name {layer_name!r} is not a layer of this KV cache config")
        if isinstance(block_id, bool) or not isinstance(block_id, int) or not 0 < block_id < self.num_blocks:
            raise ValueError(f"block_id must be in 1..{self.num_blocks - 1} (0 is the null block), got {block_id!r}")

    def block_shape(self, layer_name: str) -> tuple[int, ...]:
        """Shape of one block of an attention layer: (2, block_size, num_kv_heads, head_size); Mamba: (page,)."""
        spec = self._layer_spec[layer_name]
        if isinstance(spec, AttentionSpec) and spec.page_size_padded is None and spec.head_size_v in (None, spec.head_size):
            return (2, spec.block_size, spec.num_kv_heads, spec.head_size)
        return (spec.page_size_bytes,)

    def layer_view(self, layer_name: str) -> torch.Tensor:
        """All blocks of one layer, typed: (num_blocks, *block_shape) in the layer's dtype (bytes otherwise)."""
        pages = self._layer_pages[layer_name]
        spec = self._layer_spec[layer_name]
        shape = self.block_shape(layer_name)
        if len(shape) == 1:
            return pages
        return pages.view(spec.dtype).view(self.num_blocks, *shape)

    def kv_cache_view(self, layer_name: str, kernel_block_ratio: int = 1) -> torch.Tensor | list[torch.Tensor]:
        """The layer as the connector API hands it to `register_kv_caches`.

        Attention: [num_blocks, block_size, num_kv_heads, 2 * head_size] (K then V) over the real page
        (padding excluded); with `kernel_block_ratio` r > 1, as the attention backend splits each block into
        r kernel blocks: [num_blocks * r, block_size // r, ...] (manager block b is kernel blocks b*r..b*r+r-1).
        Mamba: one [num_blocks, *shape] tensor per state, packed from byte 0 of the page (never split).
        """
        pages = self._layer_pages[layer_name]
        spec = self._layer_spec[layer_name]
        if isinstance(spec, AttentionSpec):
            r = kernel_block_ratio
            if isinstance(r, bool) or not isinstance(r, int) or r < 1 or spec.block_size % r \
                    or (r > 1 and spec.real_page_size_bytes != pages.shape[1]):
                raise ValueError(f"kernel_block_ratio must be a positive divisor of block_size {spec.block_size} "
                                 f"of an unpadded page (layer {layer_name!r}), got {r!r}")
            used = pages[:, : spec.real_page_size_bytes]
            return used.view(spec.dtype).view(self.num_blocks * r, spec.block_size // r, spec.num_kv_heads,
                                              2 * spec.head_size)
        if isinstance(spec, MambaSpec):
            states, start = [], 0
            for shape, dtype in zip(spec.shapes, spec.dtypes):
                size = math.prod(shape) * dtype.itemsize
                states.append(pages[:, start : start + size].view(dtype).view(self.num_blocks, *shape))
                # Each state starts on the spec's state alignment, as vLLM's Mamba layers bind it.
                start += cdiv(size, spec.state_alignment) * spec.state_alignment
            return states
        raise ValueError(f"layer {layer_name!r}: no connector view for {type(spec).__name__}")

    def kv_caches(self, kernel_block_ratio: int = 1) -> dict[str, torch.Tensor | list[torch.Tensor]]:
        """`kv_cache_view` of every layer: the dict a worker passes to `register_kv_caches`."""
        return {name: self.kv_cache_view(name, kernel_block_ratio) for name in self._layer_pages}

    def write_block(self, layer_name: str, block_id: int, data: torch.Tensor) -> None:
        """Copy `data` (one block of this layer) into block `block_id`."""
        self._check(layer_name, block_id)
        view = self.layer_view(layer_name)[block_id]
        if tuple(data.shape) != tuple(view.shape):
            raise ValueError(f"data shape {tuple(data.shape)} does not match the block shape {tuple(view.shape)}")
        view.copy_(data.to(device=view.device, dtype=view.dtype))

    def read_block(self, layer_name: str, block_id: int) -> torch.Tensor:
        """A copy of block `block_id` of this layer."""
        self._check(layer_name, block_id)
        return self.layer_view(layer_name)[block_id].clone()

    def fill_block(self, layer_name: str, block_id: int, value: int) -> None:
        """Fill every byte of one block of one layer with `value` (0..255), for content stamps."""
        self._check(layer_name, block_id)
        self._layer_pages[layer_name][block_id].fill_(value & 0xFF)

    def block_bytes(self, layer_name: str, block_id: int) -> bytes:
        """The raw bytes of one block of one layer."""
        self._check(layer_name, block_id)
        return bytes(self._layer_pages[layer_name][block_id].cpu().tolist())
