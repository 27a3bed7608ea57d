"""Model presets: small hybrid models whose KV cache groups mirror real architectures.

Every group of a preset has the same number of layers and the same page size (Mamba pages are padded),
so the groups overlay one shared backing allocation as in vLLM's layer-outermost layout.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from reference_impl.kv_cache.specs import FullAttentionSpec, KVCacheSpec, MambaSpec, SlidingWindowSpec

HEAD_SIZE = 8
DTYPE = torch.float16
MAMBA_SHAPES = ((4, 8), (8, 4))


@dataclass(frozen=True)
class ModelPreset:
    """A named model: its groups as (kind, block size, extra) tuples, layers per group and KV heads."""

    name: str
    groups: tuple[tuple[str, int, int], ...]  # (kind, block_size, window) ; window 0 when not sliding
    layers_per_group: int = 2
    num_kv_heads: int = 2
    vocab_size: int = 32000

    def layer_specs(self, tp_size: int = 1) -> list[tuple[str, list[str], KVCacheSpec]]:
        """(group kind, layer names, spec) per group, with heads sharded over `tp_size` ranks."""
        if self.num_kv_heads % tp_size:
            raise ValueError(f"tensor_parallel_size {tp_size} does not divide num_kv_heads {self.num_kv_heads}")
        heads = self.num_kv_heads // tp_size
        full_page = None
        out = []
        for index, (kind, block_size, window) in enumerate(self.groups):
            names = [f"model.layers.{index * self.layers_per_group + j}.{kind}" for j in range(self.layers_per_group)]
            if kind == "full":
                spec = FullAttentionSpec(block_size=block_size, num_kv_heads=heads, head_size=HEAD_SIZE, dtype=DTYPE)
            elif kind == "swa":
                # Halve the heads when the block doubles so every group keeps the same page size.
                scale = block_size // self.groups[0][1]
                spec = SlidingWindowSpec(block_size=block_size, num_kv_heads=max(1, heads // scale),
                                         head_size=HEAD_SIZE, dtype=DTYPE, sliding_window=window)
            elif kind == "mamba":
                spec = MambaSpec(block_size=block_size, shapes=MAMBA_SHAPES, dtypes=(DTYPE, DTYPE),
                                 page_size_padded=full_page, mamba_cache_mode="align")
            else:
                raise ValueError(f"preset {self.name}: unknown group kind {kind!r}")
            if full_page is None:
                full_page = spec.page_size_bytes
            out.append((kind, names, spec))
        return out


PRESETS: dict[str, ModelPreset] = {
    "fa_only": ModelPreset("fa_only", (("full", 16, 0),)),
    "fa+swa": ModelPreset("fa+swa", (("full", 16, 0), ("swa", 16, 128))),
    "fa16+swa32": ModelPreset("fa16+swa32", (("full", 16, 0), ("swa", 32, 128))),
    "fa+mamba_align": ModelPreset("fa+mamba_align", (("full", 16, 0), ("mamba", 256, 0))),
    "fa+swa+mamba": ModelPreset("fa+swa+mamba", (("full", 16, 0), ("swa", 16, 128), ("mamba", 256, 0))),
}


def get_preset(name: str) -> ModelPreset:
    """The preset called `name`; ValueError listing the accepted names otherwise."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"model preset {name!r} is unknown; accepted: {', '.join(PRESETS)}") from None
