"""Model presets: small hybrid models whose KV cache groups mirror real architectures.

Every group of a preset has the same number of layers and the same page size (Mamba pages are padded),
so the groups overlay one shared backing allocation as in vLLM's layer-outermost layout.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from reference_impl.kv_cache.kv_cache_planning import DefaultKVCacheConfigBuilder, get_kv_cache_groups, planning_config
from reference_impl.kv_cache.kv_cache_interface import (
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheSpec,
    MambaSpec,
    ScratchSpec,
    SlidingWindowSpec,
)

HEAD_SIZE = 8
DTYPE = torch.float16
MAMBA_SHAPES = ((4, 8), (8, 4))


@dataclass(frozen=True)
class ModelPreset:
    """A named model: its groups as (kind, block size, extra) tuples, layers per group and KV heads."""

    name: str
    # (kind, block_size, window): window is the sliding window, or a chunked group's attention_chunk_size; else 0
    groups: tuple[tuple[str, int, int], ...]
    layers_per_group: int = 2
    num_kv_heads: int = 2
    vocab_size: int = 32000
    dtype: torch.dtype = DTYPE  # of every KV cache and Mamba state

    def layer_specs(self, tp_size: int = 1) -> dict[str, KVCacheSpec]:
        """Layer name -> spec in model order (group by group), with KV heads sharded over `tp_size` ranks."""
        if self.num_kv_heads % tp_size:
            raise ValueError(f"tensor_parallel_size {tp_size} does not divide num_kv_heads {self.num_kv_heads}")
        heads = self.num_kv_heads // tp_size
        full_page = None
        specs: dict[str, KVCacheSpec] = {}
        for index, (kind, block_size, window) in enumerate(self.groups):
            if kind == "full":
                spec = FullAttentionSpec(block_size=block_size, num_kv_heads=heads, head_size=HEAD_SIZE, dtype=self.dtype)
            elif kind == "swa":
                # Halve the heads when the block doubles so every group keeps the same page size.
                scale = block_size // self.groups[0][1]
                spec = SlidingWindowSpec(block_size=block_size, num_kv_heads=max(1, heads // scale),
                                         head_size=HEAD_SIZE, dtype=self.dtype, sliding_window=window)
            elif kind == "chunked":
                spec = ChunkedLocalAttentionSpec(block_size=block_size, num_kv_heads=heads, head_size=HEAD_SIZE,
                                                 dtype=self.dtype, attention_chunk_size=window)
            elif kind == "scratch":
                spec = ScratchSpec(block_size=block_size, num_kv_heads=heads, head_size=HEAD_SIZE, dtype=self.dtype)
            elif kind == "mamba":
                spec = MambaSpec(block_size=block_size, shapes=MAMBA_SHAPES, dtypes=(self.dtype, self.dtype),
                                 page_size_padded=full_page, mamba_cache_mode="align")
            else:
                raise ValueError(f"preset {self.name}: unknown group kind {kind!r}")
            if full_page is None:
                full_page = spec.page_size_bytes
            for j in range(self.layers_per_group):
                specs[f"model.layers.{index * self.layers_per_group + j}.{kind}"] = spec
        return specs

    def kv_cache_config(self, num_blocks: int, tp_size: int = 1) -> KVCacheConfig:
        """The allocator's `KVCacheConfig` of this model with `num_blocks` blocks (block 0 is the null block).

        Planned by the allocator's `kv_cache_planning` (vLLM 0.33's grouping and placement, HMA on): one group
        per preset group, in order, every group overlaying the same pool from byte 0.
        """
        specs = self.layer_specs(tp_size)
        pages = sorted({spec.page_size_bytes for spec in specs.values()})
        if len(pages) != 1:
            # The allocator would unify by growing block sizes: the preset would no longer be the model it names.
            raise ValueError(f"preset {self.name} at tensor_parallel_size {tp_size}: groups must share one page "
                             f"size, got {pages}")
        config = planning_config()
        groups = get_kv_cache_groups(config, specs)
        if len(groups) != len(self.groups):
            raise ValueError(f"preset {self.name}: {len(self.groups)} groups declared, the allocator made {len(groups)}")
        kv_cache_config = DefaultKVCacheConfigBuilder().get_kv_cache_config_from_groups(config, groups, num_blocks)
        # The reference engine's workers read each layer's spec from the config (a field vLLM's lacks).
        kv_cache_config.layer_specs = {name: specs[name] for g in groups for name in g.layer_names}
        return kv_cache_config


PRESETS: dict[str, ModelPreset] = {
    "fa_only": ModelPreset("fa_only", (("full", 16, 0),)),
    "fa+swa": ModelPreset("fa+swa", (("full", 16, 0), ("swa", 16, 128))),
    "fa16+swa32": ModelPreset("fa16+swa32", (("full", 16, 0), ("swa", 32, 128))),
    "fa+mamba_align": ModelPreset("fa+mamba_align", (("full", 16, 0), ("mamba", 256, 0))),
    "fa+swa+mamba": ModelPreset("fa+swa+mamba", (("full", 16, 0), ("swa", 16, 128), ("mamba", 256, 0))),
    # A scratch group (prefix_cacheable=False): connectors must leave it alone (spec 4.2 C03).
    "scratch_group": ModelPreset("scratch_group", (("full", 16, 0), ("scratch", 16, 0))),
    # Other KV dtypes (the content oracle uses each dtype's full precision): a round trip through another dtype
    # changes the values.
    "fa_only@bf16": ModelPreset("fa_only@bf16", (("full", 16, 0),), dtype=torch.bfloat16),
    "fa+swa@fp32": ModelPreset("fa+swa@fp32", (("full", 16, 0), ("swa", 16, 128)), dtype=torch.float32),
    # Sliding-window geometry: a window that spans several connector chunks (of 256) and is a multiple of
    # neither the chunk nor the block; a window shorter than one block.
    "fa+swa600": ModelPreset("fa+swa600", (("full", 16, 0), ("swa", 16, 600))),
    "fa+swa8": ModelPreset("fa+swa8", (("full", 16, 0), ("swa", 16, 8))),
    # Chunked local attention (Llama 4's attention_chunk_size, scaled down): a token attends within its chunk of
    # 320 tokens, a multiple of the block and not of a 256-token connector chunk, so a hit at 256, 512, 768 or 1024
    # falls inside an attention chunk and needs the KV of that chunk before it. The layout vLLM builds with HMA on
    # (VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE set, its default "1" in recent releases: config-rules
    # spec 3.8); with it off vLLM turns HMA off and allocates these layers as full attention, fa_only's layout.
    "fa+chunked320": ModelPreset("fa+chunked320", (("full", 16, 0), ("chunked", 16, 320))),
}
# The presets most checks run on; the dtype and window presets run where they can change a verdict.
CORE_PRESETS = ("fa_only", "fa+swa", "fa16+swa32", "fa+mamba_align", "fa+swa+mamba", "scratch_group")
DTYPE_PRESETS = ("fa_only@bf16", "fa+swa@fp32")
WINDOW_PRESETS = ("fa+swa600", "fa+swa8")
CHUNKED_LOCAL_PRESETS = ("fa+chunked320",)
#: The core presets with more than one KV cache group, where the multi-group checks run.
MULTI_GROUP_PRESETS = tuple(name for name in CORE_PRESETS if len(PRESETS[name].groups) > 1)


# A preset laid out with every group's block at one size: "NAME@blockN" (the layout an engine builds in place of
# NAME, e.g. a vLLM release that makes the attention block the Mamba block: harness.targets.connector.vllm_layouts).
BLOCK_SUFFIX = "@block"


def at_block_size(preset: ModelPreset, block_size: int) -> ModelPreset:
    """`preset` with every group's block at `block_size` (windows, layers, heads and dtype kept), named
    `NAME@blockN`."""
    groups = tuple((kind, block_size, window) for kind, _, window in preset.groups)
    return ModelPreset(f"{preset.name}{BLOCK_SUFFIX}{block_size}", groups, preset.layers_per_group,
                       preset.num_kv_heads, preset.vocab_size, preset.dtype)


def get_preset(name: str) -> ModelPreset:
    """The preset called `name` (or `NAME@blockN`: preset NAME with every block at N tokens); ValueError listing
    the accepted names otherwise."""
    base, sep, size = name.partition(BLOCK_SUFFIX)
    if sep and base in PRESETS and size.isdigit() and int(size) > 0:
        return at_block_size(PRESETS[base], int(size))
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"model preset {name!r} is unknown; accepted: {', '.join(PRESETS)} "
                         f"(or NAME{BLOCK_SUFFIX}N, every block at N tokens)") from None
