"""Layer specs (`KVCacheSpec` family) and the KV cache configuration types, named as in vLLM 0.33 `v1`.

A layer spec says what one attention (or Mamba) layer needs from the block pool: tokens per block and the
bytes of one block of that layer (`page_size_bytes`). `KVCacheGroupSpec` gathers layers sharing one block
table; `KVCacheConfig` is the whole plan (pool size, tensors, groups, resolved knobs).
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass, field, replace
from enum import Enum, IntEnum
from typing import ClassVar

import torch

__all__ = [
    "KVQuantMode",
    "KVCacheSpecKind",
    "SparseCacheRole",
    "KVCacheGroupRole",
    "MLAAttentionSpec",
    "SinkFullAttentionSpec",
    "RSWASpec",
    "SlidingWindowMLASpec",
    "CircularBufferSpec",
    "EncoderOnlyAttentionSpec",
    "CrossAttentionSpec",
    "HiSparseHotSpec",
    "HiSparseResidentSpec",
    "UniformTypeKVCacheSpecs",
    "iter_layer_specs",
    "HiddenStateCacheSpec",
    "is_full_attention_spec",
    "get_kv_cache_spec_kind",
    "get_kv_cache_spec_sliding_window",
    "get_mamba_prefill_checkpoint_position",
    "is_mamba_prefill_checkpoint_valid",
    "KVCacheSpec",
    "AttentionSpec",
    "FullAttentionSpec",
    "SlidingWindowSpec",
    "ChunkedLocalAttentionSpec",
    "ScratchSpec",
    "MambaSpec",
    "KVCacheTensor",
    "KVCacheGroupSpec",
    "KVCacheConfig",
    "KVCacheLayout",
    "cdiv",
    "compute_layout_strides",
    "compute_layer_kv_cache_shape_bytes",
    "create_kv_cache_views",
    "group_kernel_blocks",
    "get_block_table_width",
    "get_kv_quant_mode",
    "is_quantized_kv_cache",
    "kv_cache_uses_per_token_head_scales",
]


def cdiv(a: int, b: int) -> int:
    """Ceiling division of non-negative integers."""
    return -(-a // b)


# Positions of the logical axes in a layout's value: every layer cache is logically [L, B, H, N, C]
# (layer, block, head slot, stored state, content bytes).
_L, _B, _H, _N, _C = range(5)


class KVCacheLayout(Enum):
    """Physical order of the logical KV cache axes [L, B, H, N, C], as vLLM 0.33 names them (RFC #42082).

    A member's name spells the axes outermost first; its value lists the logical axis at each physical
    position, outermost first (vLLM's stride permutation), e.g. BLHNC = (B, L, H, N, C) = (1, 0, 2, 3, 4).
    """

    LBHNC = (_L, _B, _H, _N, _C)
    LBNHC = (_L, _B, _N, _H, _C)
    LHBNC = (_L, _H, _B, _N, _C)
    BLHNC = (_B, _L, _H, _N, _C)
    BLNHC = (_B, _L, _N, _H, _C)
    BHLNC = (_B, _H, _L, _N, _C)

    @property
    def stride_order(self) -> tuple[int, ...]:
        """The logical axis at each physical position, outermost first."""
        return self.value

    @property
    def layer_view_order(self) -> tuple[int, ...]:
        """The same order for one layer's [B, H, N, C] view (L dropped, the others renumbered from 0)."""
        return tuple(axis - 1 for axis in self.value if axis != _L)

    @property
    def is_layer_compact(self) -> bool:
        """Whether layers are outermost: each layer owns one contiguous region of the allocation."""
        return self.value[0] == _L

    @property
    def is_block_outermost(self) -> bool:
        """Whether blocks are outermost: one block id holds every layer's page side by side."""
        return self.value[0] == _B

    @property
    def is_block_compact(self) -> bool:
        """Whether L and B are the two outermost axes, so each (layer, block) page is one contiguous run."""
        return {self.value[0], self.value[1]} == {_L, _B}

    @property
    def is_block_contiguous(self) -> bool:
        """Whether H, N and C are the three innermost axes, in that order."""
        return self.value[2:] == (_H, _N, _C)

    @classmethod
    def from_name(cls, name: str) -> "KVCacheLayout":
        """The member named `name`, or vLLM's older names NHD (= LBNHC) and HND (= LBHNC); ValueError
        naming the accepted names otherwise."""
        name = {"NHD": "LBNHC", "HND": "LBHNC"}.get(name, name)
        try:
            return cls[name]
        except KeyError:
            raise ValueError(f"Unknown KV cache layout {name!r}; accepted: {[m.name for m in cls]}") from None


def compute_layer_kv_cache_shape_bytes(spec: "KVCacheSpec", num_blocks: int,
                                       kernel_block_size: int | None = None) -> tuple[int, ...]:
    """Logical [B, H, N, C] extents of one layer's cache, C in bytes (vLLM's function of the same name).

    With `kernel_block_size` each block is seen as block_size / kernel_block_size kernel blocks. A state
    layer (no heads or states, e.g. Mamba) is one head and one state of its whole unpadded page.
    """
    block_size = spec.block_size if kernel_block_size is None else kernel_block_size
    if block_size <= 0 or spec.block_size % block_size:
        raise ValueError(f"kernel_block_size must divide the spec's block_size {spec.block_size}, "
                         f"got {kernel_block_size}")
    blocks = num_blocks * (spec.block_size // block_size)
    if isinstance(spec, AttentionSpec):
        return (blocks, spec.num_heads, spec.get_num_kernel_states(block_size), spec.state_content_size_bytes)
    return (blocks, 1, 1, spec.real_page_size_bytes)


def compute_layout_strides(spec: "KVCacheSpec", num_blocks: int, num_layers: int, layout: KVCacheLayout,
                           kernel_block_size: int | None = None,
                           fixed_strides: tuple[int | None, ...] = (None,) * 5) -> tuple[int, ...]:
    """Byte strides of `num_layers` layers of `spec` over `num_blocks` blocks, in logical [L, B, H, N, C]
    order (vLLM 0.33's function of the same name).

    Axes are laid out innermost first, each stride the bytes of everything inside it, unless
    `fixed_strides` gives it (None: derive). A padded page (`page_size_padded`) widens the stride of the
    inner of L and B to at least the padded page; that needs every axis outside it to be L, B or of
    extent 1 (ValueError otherwise).
    """
    if len(fixed_strides) != 5:
        raise ValueError(f"fixed_strides must give 5 strides (L, B, H, N, C), got {len(fixed_strides)}")
    if any(stride is not None and stride <= 0 for stride in fixed_strides):
        raise ValueError(f"fixed_strides must be positive or None, got {tuple(fixed_strides)}")
    extents = (num_layers, *compute_layer_kv_cache_shape_bytes(spec, num_blocks, kernel_block_size))
    order = layout.stride_order
    padded = getattr(spec, "page_size_padded", None)
    page_position = max(order.index(_L), order.index(_B))  # the page starts inside this physical axis
    if padded is not None:
        if kernel_block_size not in (None, spec.block_size):
            raise ValueError(f"a padded page ({padded} bytes) cannot be split into kernel blocks of "
                             f"{kernel_block_size} tokens")
        if any(extents[axis] != 1 for axis in order[:page_position] if axis not in (_L, _B)):
            raise ValueError(f"KV cache layout {layout.name} cannot pad pages of {type(spec).__name__}: an "
                             f"axis outside the page has extent above 1 (extents {extents})")
    strides = [0] * 5
    inner_bytes = 1
    for position in range(4, -1, -1):
        axis = order[position]
        if padded is not None and position == page_position:
            inner_bytes = max(inner_bytes, padded)
        strides[axis] = fixed_strides[axis] or inner_bytes
        inner_bytes = strides[axis] * extents[axis]
    return tuple(strides)


def create_kv_cache_views(raw: torch.Tensor, spec: "KVCacheSpec", num_blocks: int, layout: KVCacheLayout,
                          kv_cache_tensor: "KVCacheTensor", kernel_block_size: int | None = None) -> list[torch.Tensor]:
    """One [B, H, N, C] view per layer that `kv_cache_tensor` places in the flat one-byte buffer `raw`
    (vLLM's function of the same name), C as elements of the spec's `dtype` (bytes for a spec without one,
    e.g. Mamba's several state tensors).

    Layer l's block b starts at byte `offset + l * layer_stride + b * block_stride` of `raw`; the head, state
    and content strides inside a page follow `layout` (`compute_layout_strides`). With `kernel_block_size`
    each block is split into block_size / kernel_block_size kernel blocks, which sit one constant stride
    apart only when a block is one dense page (its stride the unpadded page): ValueError otherwise, as for
    a block-outermost layout, whose blocks hold every layer's page.
    """
    if raw.dim() != 1 or raw.element_size() != 1:
        raise ValueError(f"raw must be a flat tensor of one-byte elements, got shape {tuple(raw.shape)} of "
                         f"{raw.dtype}")
    shape = compute_layer_kv_cache_shape_bytes(spec, num_blocks, kernel_block_size)
    block_stride = kv_cache_tensor.block_stride
    kernel_blocks_per_block = shape[0] // num_blocks
    if kernel_blocks_per_block > 1:
        dense_page = math.prod(shape[1:]) * kernel_blocks_per_block
        if block_stride != dense_page:
            raise ValueError(
                f"KV cache layout {layout.name} stores a block of {type(spec).__name__} {block_stride} bytes apart, "
                f"not as one dense {dense_page}-byte page, so it cannot be split into kernel blocks of "
                f"{kernel_block_size} tokens; accepted: a layer-outermost layout of unpadded pages")
        block_stride //= kernel_blocks_per_block
    num_layers = len(kv_cache_tensor.layers)
    strides = compute_layout_strides(spec, num_blocks, num_layers, layout, kernel_block_size,
                                     fixed_strides=(kv_cache_tensor.layer_stride, block_stride, None, None, None))
    layers = torch.as_strided(raw, (num_layers, *shape), strides, raw.storage_offset() + kv_cache_tensor.offset)
    dtype = getattr(spec, "dtype", None)
    # The innermost axis is C in bytes; an attention layer reads it as elements of its dtype.
    return [layers[i] if dtype is None else layers[i].view(dtype) for i in range(num_layers)]


def group_kernel_blocks(cache: torch.Tensor, num_blocks: int) -> torch.Tensor:
    """A layer's cache viewed in kernel blocks (`create_kv_cache_views` with a kernel block size), with its
    `num_blocks` allocator blocks as the first axis: [num_blocks, kernel blocks per block, ...]. A cache
    whose first axis already counts allocator blocks is returned as it is (vLLM's function of the same name).
    """
    if isinstance(num_blocks, bool) or not isinstance(num_blocks, int) or num_blocks <= 0:
        raise ValueError(f"num_blocks must be a positive integer, got {num_blocks!r}")
    if cache.shape[0] == num_blocks:
        return cache
    if cache.shape[0] % num_blocks:
        raise ValueError(f"a cache of {cache.shape[0]} kernel blocks cannot be grouped into {num_blocks} blocks; "
                         f"accepted: a multiple of num_blocks")
    return cache.unflatten(0, (num_blocks, cache.shape[0] // num_blocks))


def get_block_table_width(max_num_blocks: int, block_size: int, *, token_alignment: int | None = 128) -> int:
    """Entries of a block-table row holding up to `max_num_blocks` blocks of `block_size` tokens (vLLM 0.34's
    function of the same name): widened to the next whole number of `token_alignment`-token tiles, i.e. to a
    multiple of the fewest blocks that span a multiple of `token_alignment` tokens. None: not widened.
    """
    if isinstance(max_num_blocks, bool) or not isinstance(max_num_blocks, int) or max_num_blocks < 0:
        raise ValueError(f"max_num_blocks must be a non-negative integer, got {max_num_blocks!r}")
    _require_positive_int("get_block_table_width", "block_size", block_size)
    if token_alignment is None:
        return max_num_blocks
    _require_positive_int("get_block_table_width", "token_alignment", token_alignment)
    blocks_per_tile = token_alignment // math.gcd(token_alignment, block_size)
    return cdiv(max_num_blocks, blocks_per_tile) * blocks_per_tile


class KVQuantMode(IntEnum):
    """How a layer's KV cache is quantized, as vLLM 0.33/0.34 number the modes. The mode is carried on
    attention specs for the backends; the reference sizes pages from `dtype` and the backend's published
    packing (`num_head_slots`, `state_content_bytes`), never from the mode, as vLLM 0.33 and 0.34 do."""

    NONE = 0
    FP8_PER_TENSOR = 1
    INT8_PER_TOKEN_HEAD = 2
    FP8_PER_TOKEN_HEAD = 3
    INT4_PER_TOKEN_HEAD = 4
    NVFP4 = 5
    TURBOQUANT_K8V4 = 6
    TURBOQUANT_4BIT_NC = 7
    TURBOQUANT_K3V4_NC = 8
    TURBOQUANT_3BIT_NC = 9
    NVFP4_DS_MLA = 10
    ULTRAQUANT_4BIT = 11
    OCTAVE_K3V4 = 12
    OCTAVE_K3V3 = 13
    OCTAVE_K3V3_COMPACT = 14

    @property
    def is_per_token_head(self) -> bool:
        """Whether scales are kept per token and head."""
        return self in (KVQuantMode.INT8_PER_TOKEN_HEAD, KVQuantMode.FP8_PER_TOKEN_HEAD,
                        KVQuantMode.INT4_PER_TOKEN_HEAD)

    @property
    def is_nvfp4(self) -> bool:
        """Whether the cache is packed NVFP4 (FP4 values with FP8 block scales); DeepSeek MLA's opaque
        NVFP4 pages are a mode of their own."""
        return self is KVQuantMode.NVFP4

    @property
    def is_turboquant(self) -> bool:
        """Whether the cache is one of the TurboQuant formats."""
        return self.name.startswith("TURBOQUANT_")

    @property
    def is_octave(self) -> bool:
        """Whether the cache is one of the Octave formats."""
        return self.name.startswith("OCTAVE_")

    @property
    def is_ultraquant(self) -> bool:
        """Whether the cache is the UltraQuant 4-bit format."""
        return self is KVQuantMode.ULTRAQUANT_4BIT


# Reviewed data: every `--kv-cache-dtype` name vLLM 0.33 and 0.34 accept (their `CacheDType`) and its mode.
# "auto" and the float names store unquantized values; every fp8 name other than fp8_per_token_head keeps one
# scale per tensor. Names a vLLM plugin registers at run time (vLLM's KV cache dtype handlers) are not here.
_KV_QUANT_MODE_OF_DTYPE: dict[str, KVQuantMode] = {
    "auto": KVQuantMode.NONE,
    "float16": KVQuantMode.NONE,
    "bfloat16": KVQuantMode.NONE,
    "fp8": KVQuantMode.FP8_PER_TENSOR,
    "fp8_e4m3": KVQuantMode.FP8_PER_TENSOR,
    "fp8_e5m2": KVQuantMode.FP8_PER_TENSOR,
    "fp8_inc": KVQuantMode.FP8_PER_TENSOR,
    "fp8_ds_mla": KVQuantMode.FP8_PER_TENSOR,
    "nvfp4_ds_mla": KVQuantMode.NVFP4_DS_MLA,
    "turboquant_k8v4": KVQuantMode.TURBOQUANT_K8V4,
    "turboquant_4bit_nc": KVQuantMode.TURBOQUANT_4BIT_NC,
    "turboquant_k3v4_nc": KVQuantMode.TURBOQUANT_K3V4_NC,
    "turboquant_3bit_nc": KVQuantMode.TURBOQUANT_3BIT_NC,
    "octave_k3v4": KVQuantMode.OCTAVE_K3V4,
    "octave_k3v3": KVQuantMode.OCTAVE_K3V3,
    "octave_k3v3_compact": KVQuantMode.OCTAVE_K3V3_COMPACT,
    "ultraquant_4bit": KVQuantMode.ULTRAQUANT_4BIT,
    "int4_per_token_head": KVQuantMode.INT4_PER_TOKEN_HEAD,
    "int8_per_token_head": KVQuantMode.INT8_PER_TOKEN_HEAD,
    "fp8_per_token_head": KVQuantMode.FP8_PER_TOKEN_HEAD,
    "nvfp4": KVQuantMode.NVFP4,
    "nvfp4_4over6": KVQuantMode.NVFP4,
}


def get_kv_quant_mode(kv_cache_dtype: str) -> KVQuantMode:
    """The quantization mode of a KV cache dtype name (`--kv-cache-dtype`); ValueError for a name outside
    vLLM's built-in set (the reference does not know the dtypes a vLLM plugin registers)."""
    try:
        return _KV_QUANT_MODE_OF_DTYPE[kv_cache_dtype]
    except (KeyError, TypeError):
        raise ValueError(f"kv_cache_dtype {kv_cache_dtype!r} is not a KV cache dtype the reference knows; "
                         f"accepted: {sorted(_KV_QUANT_MODE_OF_DTYPE)}") from None


def is_quantized_kv_cache(kv_cache_dtype: str) -> bool:
    """Whether the KV cache dtype name stores quantized values."""
    return get_kv_quant_mode(kv_cache_dtype) is not KVQuantMode.NONE


def kv_cache_uses_per_token_head_scales(kv_cache_dtype: str) -> bool:
    """Whether the KV cache dtype name keeps a scale per token and head."""
    return get_kv_quant_mode(kv_cache_dtype).is_per_token_head


class KVCacheSpecKind(str, Enum):
    """A spec's kind, as KV events and offloading configs name it."""

    FULL_ATTENTION = "full_attention"
    MLA_ATTENTION = "mla_attention"
    SLIDING_WINDOW = "sliding_window"
    SLIDING_WINDOW_MLA = "sliding_window_mla"
    MAMBA = "mamba"
    CHUNKED_LOCAL_ATTENTION = "chunked_local_attention"
    SINK_FULL_ATTENTION = "sink_full_attention"
    ENCODER_ONLY_ATTENTION = "encoder_only_attention"
    CROSS_ATTENTION = "cross_attention"
    UNKNOWN = "unknown"


class SparseCacheRole(str, Enum):
    """Which cache of a sparse-attention (MLA) layer a spec describes."""

    SPARSE = "sparse"
    INDEXER = "indexer"


class KVCacheGroupRole(str, Enum):
    """A group's role: an ordinary group, or the source / indexer group of HiSparse."""

    DEFAULT = "default"
    HISPARSE_SOURCE = "hisparse_source"
    HISPARSE_INDEXER = "hisparse_indexer"


def _require_positive_int(owner: str, name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{owner}.{name} must be a positive integer, got {value!r}")


@dataclass(frozen=True, kw_only=True)
class KVCacheSpec:
    """Base of all layer specs: `block_size` tokens per block."""

    block_size: int
    #: Whether decode context parallelism shards this cache's token positions across ranks (attention
    #: layers do; a Mamba state does not, so its block size is not scaled by the DCP world size).
    dcp_sharded: bool = field(default=False, kw_only=True)
    #: Bytes the stride between physical blocks must be a multiple of: an int, or an object with `base`
    #: (vLLM's `MultipleOf(n)`: whole kernel blocks of up to `n` tokens). None: no constraint.
    block_stride_alignment: object = field(default=None, kw_only=True)
    #: Whether a draft model owns the layer (never part of equality, so it never affects grouping).
    is_draft: bool = field(default=False, kw_only=True, compare=False)

    def __post_init__(self) -> None:
        _require_positive_int(type(self).__name__, "block_size", self.block_size)
        alignment = self.block_stride_alignment
        if isinstance(alignment, int) and not isinstance(alignment, bool) and alignment <= 0:
            raise ValueError(f"{type(self).__name__}.block_stride_alignment must be positive, got {alignment!r}")

    def get_block_stride_alignment(self) -> int:
        """Bytes the stride between physical blocks must be a multiple of: the declared bytes; for kernel
        blocks of up to `base` tokens, one kernel block's page (1 when a block is one kernel block)."""
        alignment = self.block_stride_alignment
        base = getattr(alignment, "base", None)
        if base is None:
            return alignment or 1
        kernel_block_size = math.gcd(base, self.block_size)
        if kernel_block_size == self.block_size:
            return 1
        return self.copy_with_new_block_size(kernel_block_size).page_size_bytes

    @property
    def prefix_cacheable(self) -> bool:
        """Whether this spec's group takes part in prefix caching."""
        return True

    @property
    def num_states(self) -> int:
        """Stored states per block: `tokens_per_state` tokens share one state (a fraction below 1 stores
        several states per token); 0 or less (a Mamba layer's -1) means one state per block. As in vLLM,
        the base class has them for every spec with a `tokens_per_state` (attention and Mamba specs)."""
        return self.get_num_kernel_states(self.block_size)

    def get_num_kernel_states(self, kernel_block_size: int) -> int:
        """Stored states in a (kernel) block of `kernel_block_size` tokens (see `num_states`)."""
        if self.tokens_per_state > 0:
            return int(kernel_block_size // self.tokens_per_state)
        return 1

    def is_uniform_with_collection(self, kv_cache_specs: dict) -> bool:
        """Whether every spec of `kv_cache_specs` is of this spec's uniform-type family (vLLM's spec
        registry: full attention with MLA, R-SWA, sinks and hidden states, ...), so the layers may share
        one block table; False for a kind vLLM does not register. Kinds with a parameter that changes
        which blocks a layer keeps (a window, a chunk, a state geometry) also require it to match."""
        base = _uniform_type_base(self)
        return base is not None and all(isinstance(spec, base) for spec in kv_cache_specs.values())

    def copy_with_new_block_size(self, block_size: int) -> "KVCacheSpec":
        """This spec with another block size."""
        return replace(self, block_size=block_size)

    @property
    def page_size_bytes(self) -> int:
        """Bytes of one block of one layer."""
        raise NotImplementedError

    @property
    def prefix_replay_tokens(self) -> int:
        """Tokens a prefix hit must replay before the hit point (bounded-replay sliding-window MLA only)."""
        return 0

    @property
    def has_layer_views(self) -> bool:
        """Whether the worker makes a per-layer view of the cache (False for pages a spec lays out itself)."""
        return True

    @property
    def uses_slot_mapping(self) -> bool:
        """Whether the worker computes a per-token slot mapping for this spec."""
        return True

    def max_num_blocks_per_req(self, vllm_config, max_len: int) -> int:
        """Block-table row length of one request of up to `max_len` tokens."""
        return cdiv(max_len, self.block_size)

    def max_memory_usage_bytes(self, max_model_len: int, max_in_flight_tokens: int | None = None) -> int:
        """Worst-case bytes one request needs from this layer."""
        raise NotImplementedError

    def validate_for_model_len(self, max_model_len: int) -> None:
        """Raise ValueError when the spec cannot serve `max_model_len` (window larger than the model length)."""

    @classmethod
    def merge(cls, specs: list["KVCacheSpec"]) -> "KVCacheSpec":
        """Merge equal specs into one; AssertionError (as vLLM asserts) when they differ."""
        first = specs[0]
        for other in specs[1:]:
            if other != first:
                raise AssertionError(
                    f"All layers in the same KV cache group must be the same: {first!r} != {other!r}")
        return first


def _lengths(vllm_config_or_max_model_len, max_in_flight_tokens: int | None) -> tuple[int, int]:
    """(max_model_len, max_in_flight_tokens) from vLLM's `vllm_config` or from plain numbers."""
    if isinstance(vllm_config_or_max_model_len, int):
        max_model_len = vllm_config_or_max_model_len
        return max_model_len, max_model_len if max_in_flight_tokens is None else max_in_flight_tokens
    config = vllm_config_or_max_model_len
    max_model_len = config.model_config.max_model_len
    in_flight = getattr(config, "max_in_flight_tokens", None)
    if in_flight is None:
        in_flight = getattr(getattr(config, "scheduler_config", None), "max_num_batched_tokens", max_model_len)
    return max_model_len, in_flight if max_in_flight_tokens is None else max_in_flight_tokens


@dataclass(frozen=True, kw_only=True)
class AttentionSpec(KVCacheSpec):
    """An attention layer: `num_kv_heads` x `head_size` per token for K (and `head_size_v` for V)."""

    dcp_sharded: bool = True
    num_kv_heads: int
    head_size: int
    dtype: torch.dtype
    head_size_v: int | None = None
    kv_quant_mode: KVQuantMode = KVQuantMode.NONE
    page_size_padded: int | None = None
    # vLLM's tensor-parallel and packed-state geometry; the reference's pages ignore them.
    max_tp_shards: int | None = None
    num_head_slots: int | None = None
    state_content_bytes: int | None = None
    # vLLM 0.34: head slots grouped by KV head (each head one contiguous run of the page); a merge keeps it.
    kv_head_major_slots: bool = False
    tokens_per_state: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        name = type(self).__name__
        _require_positive_int(name, "num_kv_heads", self.num_kv_heads)
        _require_positive_int(name, "head_size", self.head_size)
        if self.head_size_v is None:
            # As in vLLM: V is as wide as K unless said otherwise (so both spellings compare equal).
            object.__setattr__(self, "head_size_v", self.head_size)
        if self.head_size_v:  # 0: no separate V (latent attention)
            _require_positive_int(name, "head_size_v", self.head_size_v)
        if isinstance(self.dtype, str) and isinstance(getattr(torch, self.dtype, None), torch.dtype):
            # vLLM stores whatever it is given; its own tests pass dtype names ("float16")
            object.__setattr__(self, "dtype", getattr(torch, self.dtype))
        if not isinstance(self.dtype, torch.dtype):
            raise ValueError(f"{name}.dtype must be a torch.dtype or the name of one, got {self.dtype!r}")
        if self.page_size_padded is not None:
            _require_positive_int(name, "page_size_padded", self.page_size_padded)
            if self.page_size_padded < self.real_page_size_bytes:
                raise ValueError(
                    f"{name}.page_size_padded ({self.page_size_padded}) is smaller than the page "
                    f"({self.real_page_size_bytes} bytes)"
                )

    @property
    def num_heads(self) -> int:
        """Head slots of one page: `num_head_slots` when a backend packs heads differently, else one per
        KV head."""
        return self.num_kv_heads if self.num_head_slots is None else self.num_head_slots

    @property
    def state_content_size_bytes(self) -> int:
        """Bytes of one (head slot, state) cell: the backend's packed width (e.g. data plus inline
        per-token-head scales) when it publishes one, else K and V elements."""
        if self.state_content_bytes is not None:
            return self.state_content_bytes
        return (self.head_size + (self.head_size_v or 0)) * self.dtype.itemsize

    @property
    def unpadded_page_size_bytes(self) -> int:
        """Bytes of one block before padding: head slots x states x cell bytes."""
        return self.num_heads * self.num_states * self.state_content_size_bytes

    @property
    def real_page_size_bytes(self) -> int:
        """Unpadded bytes of one block (vLLM's older name of `unpadded_page_size_bytes`)."""
        return self.unpadded_page_size_bytes

    @property
    def page_size_bytes(self) -> int:
        return self.page_size_padded if self.page_size_padded is not None else self.real_page_size_bytes

    def max_memory_usage_bytes(self, vllm_config, max_in_flight_tokens: int | None = None) -> int:
        max_model_len, _ = _lengths(vllm_config, max_in_flight_tokens)
        return cdiv(max_model_len, self.block_size) * self.page_size_bytes

    def max_num_blocks_per_req(self, vllm_config, max_len: int) -> int:
        """Block-table row length: a DCP-sharded layer spreads its tokens over the DCP ranks."""
        parallel = getattr(vllm_config, "parallel_config", None)
        shards = (getattr(parallel, "decode_context_parallel_size", 1) or 1) if self.dcp_sharded else 1
        return cdiv(max_len, self.block_size * shards)


@dataclass(frozen=True, kw_only=True)
class FullAttentionSpec(AttentionSpec):
    """Full attention; records `sliding_window` / `attention_chunk_size` when a local layer was promoted."""

    sliding_window: int | None = None
    attention_chunk_size: int | None = None
    non_causal: bool = False

    @classmethod
    def merge(cls, specs: list["KVCacheSpec"]) -> "KVCacheSpec":
        # Full-attention layers that differ only in the recorded window/chunk still share a group.
        if not all(isinstance(s, FullAttentionSpec) for s in specs):
            raise AssertionError("FullAttentionSpec.merge needs full-attention specs only")
        stripped = {replace(s, sliding_window=None, attention_chunk_size=None) for s in specs}
        if len(stripped) != 1:
            raise AssertionError(
                f"All attention layers in the same KV cache group must be the same: {sorted(map(repr, stripped))}")
        windows = {s.sliding_window for s in specs} - {None}
        chunks = {s.attention_chunk_size for s in specs} - {None}
        if len(windows) > 1 or len(chunks) > 1:
            raise ValueError("cannot merge full-attention specs recording different windows or chunk sizes")
        return replace(
            specs[0],
            sliding_window=next(iter(windows), None),
            attention_chunk_size=next(iter(chunks), None),
        )


class _AdmissionCapped:
    """Specs whose blocks recycle across chunks (sliding window, chunked local): one request holds at most
    `max_admission_blocks_per_request` blocks, which also sizes its worst-case memory."""

    def max_admission_blocks(self, max_model_len: int, max_in_flight_tokens: int) -> int:
        """`max_admission_blocks_per_request` with the arguments in the reference's former order."""
        return self.max_admission_blocks_per_request(max_in_flight_tokens, max_model_len)

    def max_memory_usage_bytes(self, vllm_config, max_in_flight_tokens: int | None = None) -> int:
        """Worst-case bytes one request needs from this layer."""
        max_model_len, in_flight = _lengths(vllm_config, max_in_flight_tokens)
        return self.max_admission_blocks_per_request(in_flight, max_model_len) * self.page_size_bytes


@dataclass(frozen=True, kw_only=True)
class SlidingWindowSpec(_AdmissionCapped, AttentionSpec):
    """Sliding-window attention over the last `sliding_window` tokens."""

    sliding_window: int
    extra_retained_tokens: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        _require_positive_int("SlidingWindowSpec", "sliding_window", self.sliding_window)
        if not isinstance(self.extra_retained_tokens, int) or self.extra_retained_tokens < 0:
            raise ValueError(
                f"SlidingWindowSpec.extra_retained_tokens must be a non-negative integer, "
                f"got {self.extra_retained_tokens!r}"
            )

    def validate_for_model_len(self, max_model_len: int) -> None:
        if self.sliding_window > max_model_len:
            raise ValueError(
                f"SlidingWindowSpec.sliding_window ({self.sliding_window}) exceeds max_model_len "
                f"({max_model_len}); accepted: 1..max_model_len"
            )

    def is_uniform_with_collection(self, kv_cache_specs: dict) -> bool:
        """Sliding-window layers of this window."""
        return all(isinstance(s, SlidingWindowSpec) and s.sliding_window == self.sliding_window
                   for s in kv_cache_specs.values())

    @property
    def num_retained_tokens(self) -> int:
        """Tokens below a request's first scheduled position that must stay readable."""
        return self.sliding_window - 1 + self.extra_retained_tokens

    def max_admission_blocks_per_request(self, max_in_flight_tokens: int, max_model_len: int) -> int:
        """Blocks one request can hold at once (the +1: the window need not start on a block boundary)."""
        tokens = min(self.sliding_window - 1 + self.extra_retained_tokens + max_in_flight_tokens, max_model_len)
        return cdiv(tokens, self.block_size) + 1


@dataclass(frozen=True, kw_only=True)
class ChunkedLocalAttentionSpec(_AdmissionCapped, AttentionSpec):
    """Chunked local attention: a token attends within its chunk of `attention_chunk_size` tokens."""

    attention_chunk_size: int

    def __post_init__(self) -> None:
        super().__post_init__()
        _require_positive_int("ChunkedLocalAttentionSpec", "attention_chunk_size", self.attention_chunk_size)

    def validate_for_model_len(self, max_model_len: int) -> None:
        if self.attention_chunk_size > max_model_len:
            raise ValueError(
                f"ChunkedLocalAttentionSpec.attention_chunk_size ({self.attention_chunk_size}) exceeds "
                f"max_model_len ({max_model_len}); accepted: 1..max_model_len"
            )

    def max_admission_blocks_per_request(self, max_in_flight_tokens: int, max_model_len: int) -> int:
        """Blocks one request can hold at once."""
        return cdiv(min(self.attention_chunk_size + max_in_flight_tokens, max_model_len), self.block_size)

    def is_uniform_with_collection(self, kv_cache_specs: dict) -> bool:
        """Chunked local layers of this chunk size."""
        return all(isinstance(s, ChunkedLocalAttentionSpec) and s.attention_chunk_size == self.attention_chunk_size
                   for s in kv_cache_specs.values())


@dataclass(frozen=True, kw_only=True)
class ScratchSpec(AttentionSpec):
    """Per-request working memory of an attention layer that no later token reads back (vLLM's scratch
    specs such as `CircularBufferSpec`): `prefix_cacheable` is False, so connectors never transfer it.

    The reference allocator gives it a full-attention table (a superset of the one block vLLM keeps).
    """

    prefix_cacheable: ClassVar[bool] = False


@dataclass(frozen=True, kw_only=True)
class MambaSpec(KVCacheSpec):
    """A Mamba (SSM) layer: one block is one state snapshot made of `shapes`/`dtypes` tensors.

    Only `mamba_cache_mode="align"` supports prefix caching (a cached block is the state after exactly
    `(i+1)*block_size` tokens); "none" keeps one running state per request.
    """

    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[torch.dtype, ...]
    #: Bytes each state starts on within a page (vLLM 0.34; ReplaySSM's packed rings need 16): every
    #: state's bytes are rounded up to it.
    state_alignment: int = 1
    page_size_padded: int | None = None
    mamba_type: str = "mamba2"
    mamba_cache_mode: str = "align"
    num_speculative_blocks: int = 0
    num_prefill_checkpoint_blocks: int = 0
    prefill_checkpoint_alignment: int | None = None
    num_heads: int = 1
    tokens_per_state: int = -1
    tp_replicated: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.shapes or not self.dtypes:
            raise ValueError(
                f"MambaSpec.shapes and MambaSpec.dtypes must be non-empty, "
                f"got {len(self.shapes)} shapes and {len(self.dtypes)} dtypes"
            )
        if self.mamba_cache_mode not in ("align", "none", "all"):
            raise ValueError(
                f"MambaSpec.mamba_cache_mode must be 'align', 'none' or 'all', got {self.mamba_cache_mode!r}")
        if not isinstance(self.num_speculative_blocks, int) or self.num_speculative_blocks < 0:
            raise ValueError(
                f"MambaSpec.num_speculative_blocks must be a non-negative integer, got {self.num_speculative_blocks!r}"
            )
        _require_positive_int("MambaSpec", "state_alignment", self.state_alignment)
        if self.page_size_padded is not None and self.page_size_padded % self.state_alignment:
            # vLLM asserts it (and its tests expect the AssertionError).
            raise AssertionError(
                f"MambaSpec.page_size_padded must be aligned to state_alignment: {self.page_size_padded} is not "
                f"a multiple of {self.state_alignment}")
        if self.page_size_padded is not None and self.page_size_padded < self.real_page_size_bytes:
            raise ValueError(
                f"MambaSpec.page_size_padded ({self.page_size_padded}) is smaller than the state "
                f"({self.real_page_size_bytes} bytes)"
            )

    @property
    def state_content_size_bytes(self) -> int:
        """Bytes of the state tensors of one snapshot, each rounded up to `state_alignment`."""
        align = self.state_alignment
        return sum(cdiv(math.prod(shape if isinstance(shape, tuple) else (shape,)) * dtype.itemsize, align) * align
                   for shape, dtype in zip(self.shapes, self.dtypes))

    @property
    def real_page_size_bytes(self) -> int:
        """Bytes of one snapshot's states (vLLM's name for `state_content_size_bytes`)."""
        return self.state_content_size_bytes

    @property
    def page_size_bytes(self) -> int:
        return self.page_size_padded if self.page_size_padded is not None else self.real_page_size_bytes

    def max_num_blocks_per_req(self, vllm_config, max_len: int) -> int:
        """Block-table row length: "align" rows are indexed by position over the whole sequence (only the
        last states stay resident); other modes hold their resident states only."""
        if getattr(getattr(vllm_config, "cache_config", None), "mamba_cache_mode", self.mamba_cache_mode) == "align":
            return cdiv(max_len, self.block_size) + self.num_speculative_blocks
        return cdiv(self.max_memory_usage_bytes(vllm_config), self.page_size_bytes)

    def is_uniform_with_collection(self, kv_cache_specs: dict) -> bool:
        """Mamba layers that hold the same state blocks the same way (their state shapes may differ)."""
        same = ("num_speculative_blocks", "num_prefill_checkpoint_blocks", "prefill_checkpoint_alignment",
                "page_size_bytes", "state_alignment", "tp_replicated")
        return all(isinstance(s, MambaSpec) and all(getattr(s, a) == getattr(self, a) for a in same)
                   for s in kv_cache_specs.values())

    def max_memory_usage_bytes(self, vllm_config=None, max_in_flight_tokens: int | None = None) -> int:
        pages = 1 + self.num_speculative_blocks
        if self.mamba_cache_mode == "align":
            # the previous state until it is consumed, and the prefill checkpoints' blocks
            pages += 1 + self.num_prefill_checkpoint_blocks
        return pages * self.page_size_bytes


@dataclass(frozen=True)
class KVCacheTensor:
    """One physical placement: `size` bytes at `offset` of the shared backing allocation, holding `layers`.

    Layer j of the tensor starts at `offset + j * layer_stride`; block b of that layer at `+ b * block_stride`.
    """

    size: int
    layers: tuple[str, ...]
    layer_stride: int
    block_stride: int
    offset: int = 0
    host_resident: bool = False

    @property
    def shared_by(self) -> list[str]:
        """The layers placed in this tensor (vLLM's older name)."""
        return list(self.layers)


@dataclass
class KVCacheGroupSpec:
    """Layers sharing one block table per request; the manager treats the group as one logical layer."""

    layer_names: list[str]
    kv_cache_spec: KVCacheSpec
    is_eagle_group: bool = False
    host_resident: bool = False
    enable_kv_transfer: bool = True
    role: KVCacheGroupRole = KVCacheGroupRole.DEFAULT


@dataclass
class KVCacheConfig:
    """The allocation plan: `num_blocks` in one pool, the tensors, the groups and the resolved knobs.

    `prefix_cache_retention_interval`: None caches every reachable block (dense, the hand-built default);
    0 is the engine default (sparse: only boundary states of sliding-window/Mamba groups); > 0 keeps one
    state per interval.
    """

    num_blocks: int
    kv_cache_tensors: list[KVCacheTensor]
    kv_cache_groups: list[KVCacheGroupSpec]
    prefix_cache_retention_interval: int | None = None
    layer_specs: dict[str, KVCacheSpec] = field(default_factory=dict)
    kv_cache_layout: str | None = None
    hash_block_size: int | None = None
    cache_hit_alignment_tokens: int | None = None
    hisparse_host_num_blocks: int | None = None
    #: Bytes between consecutive HiSparse host blocks, and whether local TP ranks share one host pool.
    hisparse_host_block_stride: int | None = None
    hisparse_shared_host_pool: bool = False
    #: Consecutive TP ranks holding identical KV for every layer (1: none).
    kv_tp_replicas: int = 1
    #: Whether new attention blocks must be zeroed before use. A field, not a property: it starts as this
    #: config's own need (`__post_init__`) and `get_kv_cache_configs` then sets one answer on every worker's
    #: config, since every worker receives the scheduler's `new_block_ids_to_zero` (vLLM 0.34; a pipeline
    #: stage without a Mamba or mixed-precision layer must still zero when another stage needs it).
    needs_kv_cache_zeroing: bool = field(init=False)

    # Group selections are plain properties (not cached): groups may be edited after construction.
    @property
    def transfer_group_ids(self) -> tuple[int, ...]:
        """Ids of the groups that take part in external KV transfer."""
        return tuple(i for i, g in enumerate(self.kv_cache_groups) if g.enable_kv_transfer)

    @property
    def transfer_groups(self) -> tuple[KVCacheGroupSpec, ...]:
        """The groups that take part in external KV transfer, in group order."""
        return tuple(self.kv_cache_groups[i] for i in self.transfer_group_ids)

    @property
    def transfer_group_index_by_layer(self) -> dict[str, int]:
        """Layer name -> index of its group within `transfer_groups` (transferable layers only)."""
        return {name: index for index, group in enumerate(self.transfer_groups) for name in group.layer_names}

    @property
    def prefix_cacheable_group_ids(self) -> tuple[int, ...]:
        """Ids of the transferable groups whose blocks may be stored by hash (scratch state excluded)."""
        return tuple(i for i in self.transfer_group_ids if self.kv_cache_groups[i].kv_cache_spec.prefix_cacheable)

    @property
    def prefix_cacheable_groups(self) -> tuple[KVCacheGroupSpec, ...]:
        """The groups of `prefix_cacheable_group_ids`."""
        return tuple(self.kv_cache_groups[i] for i in self.prefix_cacheable_group_ids)

    def select_transfer_block_ids(self, block_ids) -> tuple[list[int], ...]:
        """The per-group block-id lists of the transferable groups, from one list per group."""
        if len(block_ids) != len(self.kv_cache_groups):
            raise ValueError(f"block_ids: expected one list per KV cache group ({len(self.kv_cache_groups)}), "
                             f"got {len(block_ids)}")
        return tuple(block_ids[i] for i in self.transfer_group_ids)

    @property
    def host_group_ids(self) -> tuple[int, ...]:
        """Ids of the groups whose blocks live in HiSparse's host pool."""
        return tuple(i for i, g in enumerate(self.kv_cache_groups) if g.host_resident)

    def num_blocks_of(self, tensor: KVCacheTensor) -> int:
        """Blocks addressable in the pool backing `tensor`: the host pool's for a host tensor."""
        if not tensor.host_resident:
            return self.num_blocks
        if self.hisparse_host_num_blocks is None:
            raise ValueError("KVCacheConfig.hisparse_host_num_blocks is None but a tensor is host_resident")
        return self.hisparse_host_num_blocks

    @property
    def has_mamba_layers(self) -> bool:
        """Whether any layer (wrapped or not) is a Mamba layer."""
        return any(isinstance(s, MambaSpec) for g in self.kv_cache_groups for s in iter_layer_specs(g.kv_cache_spec))

    @property
    def has_mixed_precision_kv_cache(self) -> bool:
        """Whether the device attention layers use more than one (dtype, quantization) precision."""
        precisions = {(s.dtype, s.kv_quant_mode) for g in self.kv_cache_groups if not g.host_resident
                      for s in iter_layer_specs(g.kv_cache_spec) if isinstance(s, AttentionSpec)}
        return len(precisions) > 1

    def __post_init__(self) -> None:
        # A Mamba state is read before it is fully written, and under mixed precision a reused block would
        # decode stale bytes of another format: either makes new blocks need zeroing.
        self.needs_kv_cache_zeroing = self.has_mamba_layers or self.has_mixed_precision_kv_cache
        if isinstance(self.num_blocks, bool) or not isinstance(self.num_blocks, int) or self.num_blocks < 1:
            raise ValueError(
                f"KVCacheConfig.num_blocks must be an integer >= 1 (block 0 is the null block), got {self.num_blocks!r}"
            )
        rti = self.prefix_cache_retention_interval
        if rti is not None and (isinstance(rti, bool) or not isinstance(rti, int) or rti < 0):
            raise ValueError(
                f"KVCacheConfig.prefix_cache_retention_interval must be None or a non-negative integer, got {rti!r}"
            )


# ------------------------------------------------------------------------------- vLLM's other spec types
@dataclass(frozen=True, kw_only=True)
class MLAAttentionSpec(FullAttentionSpec):
    """Multi-head latent attention: one latent vector per token (no separate V; `head_size_v` 0)."""

    cache_dtype_str: str | None = None
    topk_buffer_width: int | None = None
    alignment: int | None = None
    model_version: str | None = None
    cache_role: SparseCacheRole = SparseCacheRole.SPARSE
    is_index_group_leader: bool = False
    non_causal_multi_token_decode: bool = False
    head_size_v: int | None = 0

    def __post_init__(self) -> None:
        KVCacheSpec.__post_init__(self)
        _require_positive_int("MLAAttentionSpec", "num_kv_heads", self.num_kv_heads)
        _require_positive_int("MLAAttentionSpec", "head_size", self.head_size)
        _pad_page_to_alignment(self)


def _pad_page_to_alignment(spec: "MLAAttentionSpec | SlidingWindowMLASpec") -> None:
    """DeepSeek V4's MLA caches: with `alignment` set, the page is padded up to a multiple of it (as vLLM
    0.33 pads it, through `page_size_padded`)."""
    if spec.alignment is None:
        return
    _require_positive_int(type(spec).__name__, "alignment", spec.alignment)
    padded = cdiv(spec.real_page_size_bytes, spec.alignment) * spec.alignment
    if padded != spec.real_page_size_bytes:
        object.__setattr__(spec, "page_size_padded", padded)


@dataclass(frozen=True, kw_only=True)
class HiddenStateCacheSpec(MLAAttentionSpec):
    """A layer whose cache holds hidden states (extracted for a client through a connector), not KV: the
    planner gives each such layer a group of its own, its page aligned to the other groups'."""


@dataclass(frozen=True, kw_only=True)
class SinkFullAttentionSpec(FullAttentionSpec):
    """Full attention with `sink_len` learned sink tokens."""

    sink_len: int | None = None


@dataclass(frozen=True, kw_only=True)
class RSWASpec(FullAttentionSpec):
    """Full attention whose reads are limited to a recent window of `rswa_window` tokens."""

    rswa_window: int = 0


@dataclass(frozen=True, kw_only=True)
class SlidingWindowMLASpec(SlidingWindowSpec):
    """Sliding-window multi-head latent attention."""

    cache_dtype_str: str | None = None
    alignment: int | None = None
    model_version: str | None = None
    bounded_replay: bool = False
    # vLLM 0.34: a group capability (a member flattens a non-causal query block into decode rows, windowed
    # drafts); it does not change how blocks are allocated.
    non_causal_multi_token_decode: bool = False
    head_size_v: int | None = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        _pad_page_to_alignment(self)

    @property
    def prefix_cacheable(self) -> bool:
        """A bounded-replay layer keeps only its window and replays it before a hit, so it is never
        prefix-cached itself (hits come from the other groups)."""
        return not self.bounded_replay

    @property
    def prefix_replay_tokens(self) -> int:
        """A bounded-replay layer replays its window before a prefix hit."""
        return self.sliding_window if self.bounded_replay else 0

    def is_uniform_with_collection(self, kv_cache_specs: dict) -> bool:
        """Sliding-window MLA layers of this window and replay policy."""
        return all(isinstance(s, SlidingWindowMLASpec) and s.sliding_window == self.sliding_window
                   and s.bounded_replay == self.bounded_replay for s in kv_cache_specs.values())


@dataclass(frozen=True, kw_only=True)
class CircularBufferSpec(ScratchSpec):
    """vLLM's name for per-request scratch attention memory that no later token reads back."""

    prefix_cacheable: ClassVar[bool] = False

    def max_num_blocks_per_req(self, vllm_config, max_len: int) -> int:
        """One ring block per request, whatever the length."""
        return 1

    @property
    def uses_slot_mapping(self) -> bool:
        """The ring addresses its rows itself."""
        return False


@dataclass(frozen=True, kw_only=True)
class EncoderOnlyAttentionSpec(AttentionSpec):
    """Encoder-only attention: nothing is kept after the forward pass."""

    def max_memory_usage_bytes(self, vllm_config=None, max_in_flight_tokens: int | None = None) -> int:
        return 0


@dataclass(frozen=True, kw_only=True)
class CrossAttentionSpec(AttentionSpec):
    """Encoder-decoder cross attention (sized by the encoder length)."""


@dataclass(frozen=True, kw_only=True)
class _HiSparsePageSpec(KVCacheSpec):
    """HiSparse's device-side pages: `page_size` bytes each, never prefix-cached (the host source group
    owns prefix caching)."""

    page_size: int

    def __post_init__(self) -> None:
        super().__post_init__()
        _require_positive_int(type(self).__name__, "page_size", self.page_size)

    @property
    def prefix_cacheable(self) -> bool:
        return False

    @property
    def page_size_bytes(self) -> int:
        return self.page_size

    @property
    def has_layer_views(self) -> bool:
        """HiSparse lays its pages out itself."""
        return False


@dataclass(frozen=True, kw_only=True)
class HiSparseHotSpec(_HiSparsePageSpec):
    """HiSparse's per-request hot region on the device: a fixed `blocks_per_request` pages, taken only
    once the request reads history from the host."""

    blocks_per_request: int

    def __post_init__(self) -> None:
        super().__post_init__()
        _require_positive_int("HiSparseHotSpec", "blocks_per_request", self.blocks_per_request)

    def max_memory_usage_bytes(self, vllm_config=None, max_in_flight_tokens: int | None = None) -> int:
        return self.blocks_per_request * self.page_size

    def max_num_blocks_per_req(self, vllm_config=None, max_len: int | None = None) -> int:
        """Block-table row length: the hot region, whatever the sequence length."""
        return self.blocks_per_request


@dataclass(frozen=True, kw_only=True)
class HiSparseResidentSpec(_HiSparsePageSpec):
    """HiSparse's device-resident copies of the host-held source pages: a write-back cache whose pages
    are released once their host copy is durable, so one request pins at most its in-flight window."""

    def max_admission_blocks_per_request(self, max_in_flight_tokens: int, max_model_len: int) -> int:
        """Resident pages one request needs to be admitted: its in-flight tokens (capped by the model
        length), not its whole context."""
        return cdiv(min(max_in_flight_tokens, max_model_len), self.block_size)

    def max_memory_usage_bytes(self, vllm_config, max_in_flight_tokens: int | None = None) -> int:
        max_model_len, in_flight = _lengths(vllm_config, max_in_flight_tokens)
        return self.max_admission_blocks_per_request(in_flight, max_model_len) * self.page_size


@dataclass(frozen=True)
class UniformTypeKVCacheSpecs(KVCacheSpec):
    """Layers of one attention type that differ in shape (e.g. head size) but share a block table:
    one group whose page is the sum of the layers' pages."""

    kv_cache_specs: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.kv_cache_specs:
            # The wrapper spans tokens as its layers do, so DCP scales it exactly when it scales them.
            object.__setattr__(self, "dcp_sharded", self.first_spec.dcp_sharded)

    def __hash__(self) -> int:
        return hash((self.block_size, tuple(self.kv_cache_specs.items())))

    @property
    def prefix_cacheable(self) -> bool:
        return all(s.prefix_cacheable for s in self.kv_cache_specs.values())

    @property
    def first_spec(self) -> KVCacheSpec:
        """A representative layer spec (the scheduler's)."""
        return next(iter(self.kv_cache_specs.values()))

    @property
    def has_layer_views(self) -> bool:
        return self.first_spec.has_layer_views

    @property
    def uses_slot_mapping(self) -> bool:
        return self.first_spec.uses_slot_mapping

    @property
    def prefix_replay_tokens(self) -> int:
        return self.first_spec.prefix_replay_tokens

    def max_num_blocks_per_req(self, vllm_config, max_len: int) -> int:
        return self.first_spec.max_num_blocks_per_req(vllm_config, max_len)

    @property
    def page_size_bytes(self) -> int:
        return sum(s.page_size_bytes for s in self.kv_cache_specs.values())

    def max_memory_usage_bytes(self, vllm_config, max_in_flight_tokens: int | None = None) -> int:
        return max((s.max_memory_usage_bytes(vllm_config, max_in_flight_tokens)
                    for s in self.kv_cache_specs.values()), default=0) * len(self.kv_cache_specs)

    @classmethod
    def is_uniform_type(cls, kv_cache_specs: dict) -> bool:
        """Whether the layers can share one block table, as vLLM's spec registry decides: one block size,
        one DCP sharding, and the first layer's `is_uniform_with_collection` over all of them."""
        specs = list(kv_cache_specs.values())
        if not specs:
            return False
        if len({s.block_size for s in specs}) > 1 or len({s.dcp_sharded for s in specs}) > 1:
            return False
        return specs[0].is_uniform_with_collection(kv_cache_specs)

    @classmethod
    def from_specs(cls, kv_cache_specs: dict) -> "UniformTypeKVCacheSpecs | None":
        """The wrapper of these layers, or None when they are not of one type."""
        if not cls.is_uniform_type(kv_cache_specs):
            return None
        block_size = next(iter(kv_cache_specs.values())).block_size
        return cls(block_size=block_size, kv_cache_specs=dict(kv_cache_specs))


def _uniform_type_base(spec: KVCacheSpec) -> type | None:
    """The family a spec shares a same-type group with (vLLM's `uniform_type_base_spec`): the first class
    of its MRO that vLLM registers, mapped to that class's family; None for an unregistered kind."""
    families = {
        FullAttentionSpec: FullAttentionSpec, MLAAttentionSpec: FullAttentionSpec, RSWASpec: FullAttentionSpec,
        HiddenStateCacheSpec: FullAttentionSpec, SinkFullAttentionSpec: FullAttentionSpec,
        SlidingWindowMLASpec: SlidingWindowMLASpec, SlidingWindowSpec: SlidingWindowSpec,
        ChunkedLocalAttentionSpec: ChunkedLocalAttentionSpec, CircularBufferSpec: CircularBufferSpec,
        MambaSpec: MambaSpec, CrossAttentionSpec: CrossAttentionSpec, HiSparseHotSpec: HiSparseHotSpec,
        HiSparseResidentSpec: HiSparseResidentSpec,
    }
    return next((families[c] for c in type(spec).__mro__ if c in families), None)


def iter_layer_specs(kv_cache_spec: KVCacheSpec) -> Collection[KVCacheSpec]:
    """The per-layer specs of a group's spec (the wrapper's layers, or the spec itself)."""
    if isinstance(kv_cache_spec, UniformTypeKVCacheSpecs):
        return kv_cache_spec.kv_cache_specs.values()
    return (kv_cache_spec,)


def is_full_attention_spec(kv_cache_spec: KVCacheSpec) -> bool:
    """Whether every layer of the spec is full attention."""
    layers = iter_layer_specs(kv_cache_spec)
    return len(layers) > 0 and all(isinstance(s, FullAttentionSpec) for s in layers)


_KIND_ORDER = (
    # subclasses before their bases, so a spec gets its most precise kind
    ("SlidingWindowMLASpec", KVCacheSpecKind.SLIDING_WINDOW_MLA),
    ("MLAAttentionSpec", KVCacheSpecKind.MLA_ATTENTION),
    ("SinkFullAttentionSpec", KVCacheSpecKind.SINK_FULL_ATTENTION),
    ("FullAttentionSpec", KVCacheSpecKind.FULL_ATTENTION),
    ("ChunkedLocalAttentionSpec", KVCacheSpecKind.CHUNKED_LOCAL_ATTENTION),
    ("SlidingWindowSpec", KVCacheSpecKind.SLIDING_WINDOW),
    ("MambaSpec", KVCacheSpecKind.MAMBA),
    ("EncoderOnlyAttentionSpec", KVCacheSpecKind.ENCODER_ONLY_ATTENTION),
    ("CrossAttentionSpec", KVCacheSpecKind.CROSS_ATTENTION),
)


def get_kv_cache_spec_kind(kv_cache_spec: KVCacheSpec) -> KVCacheSpecKind:
    """The spec's kind (a wrapper of one kind has that kind; UNKNOWN otherwise)."""
    if isinstance(kv_cache_spec, UniformTypeKVCacheSpecs):
        kinds = {get_kv_cache_spec_kind(s) for s in kv_cache_spec.kv_cache_specs.values()}
        return next(iter(kinds)) if len(kinds) == 1 else KVCacheSpecKind.UNKNOWN
    namespace = globals()
    for name, kind in _KIND_ORDER:
        if isinstance(kv_cache_spec, namespace[name]):
            return kind
    return KVCacheSpecKind.UNKNOWN


def get_kv_cache_spec_sliding_window(kv_cache_spec: KVCacheSpec) -> int | None:
    """The sliding window of a sliding-window spec (or of a wrapper whose layers share one), else None."""
    if isinstance(kv_cache_spec, UniformTypeKVCacheSpecs):
        windows = {get_kv_cache_spec_sliding_window(s) for s in kv_cache_spec.kv_cache_specs.values()}
        return next(iter(windows)) if len(windows) == 1 else None
    if isinstance(kv_cache_spec, SlidingWindowSpec):
        return kv_cache_spec.sliding_window
    return None


def get_mamba_prefill_checkpoint_position(num_tokens: int, hash_block_size: int, drop_eagle_block: bool,
                                          num_hash_lookahead_tokens: int = 0) -> int:
    """The hash boundary at which a prefill of `num_tokens` checkpoints its Mamba state for reuse.

    At least one token (or the hash lookahead) stays after it, to recompute logits and to complete the
    checkpoint's hash; with EAGLE's last-block drop the checkpoint moves one hash block earlier.
    """
    limit = num_tokens if drop_eagle_block else num_tokens - max(1, num_hash_lookahead_tokens)
    position = limit // hash_block_size * hash_block_size
    if drop_eagle_block:
        position -= hash_block_size
    return max(position, 0)


def is_mamba_prefill_checkpoint_valid(query_start: int, query_end: int, checkpoint_position: int,
                                      hash_block_size: int, mamba_block_size: int,
                                      checkpoint_alignment: int | None) -> bool:
    """Whether a prefill chunk [query_start, query_end) can export the checkpoint at `checkpoint_position`."""
    if checkpoint_alignment is None:
        return False
    assert checkpoint_alignment > 0
    initial_state_col = (query_start - 1) // mamba_block_size
    checkpoint_col = cdiv(query_end, mamba_block_size) - 2
    return (query_start % hash_block_size == 0 and checkpoint_col > initial_state_col
            and query_start + hash_block_size <= checkpoint_position
            and query_start < checkpoint_position < query_end
            and (checkpoint_position - query_start) % checkpoint_alignment == 0)
