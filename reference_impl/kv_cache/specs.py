"""Layer specs (`KVCacheSpec` family) and the KV cache configuration types, named as in vLLM 0.33 `v1`.

A layer spec says what one attention (or Mamba) layer needs from the block pool: tokens per block and the
bytes of one block of that layer (`page_size_bytes`). `KVCacheGroupSpec` gathers layers sharing one block
table; `KVCacheConfig` is the whole plan (pool size, tensors, groups, resolved knobs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import ClassVar

import torch

__all__ = [
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
    "cdiv",
]


def cdiv(a: int, b: int) -> int:
    """Ceiling division of non-negative integers."""
    return -(-a // b)


def _require_positive_int(owner: str, name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{owner}.{name} must be a positive integer, got {value!r}")


@dataclass(frozen=True, kw_only=True)
class KVCacheSpec:
    """Base of all layer specs: `block_size` tokens per block."""

    block_size: int

    def __post_init__(self) -> None:
        _require_positive_int(type(self).__name__, "block_size", self.block_size)

    @property
    def page_size_bytes(self) -> int:
        """Bytes of one block of one layer."""
        raise NotImplementedError

    def max_memory_usage_bytes(self, max_model_len: int, max_in_flight_tokens: int | None = None) -> int:
        """Worst-case bytes one request needs from this layer."""
        raise NotImplementedError

    def validate_for_model_len(self, max_model_len: int) -> None:
        """Raise ValueError when the spec cannot serve `max_model_len` (window larger than the model length)."""

    @classmethod
    def merge(cls, specs: list["KVCacheSpec"]) -> "KVCacheSpec":
        """Merge equal specs into one; ValueError when they differ."""
        first = specs[0]
        for other in specs[1:]:
            if other != first:
                raise ValueError(f"cannot merge different KV cache specs {first!r} and {other!r}")
        return first


@dataclass(frozen=True, kw_only=True)
class AttentionSpec(KVCacheSpec):
    """An attention layer: `num_kv_heads` x `head_size` per token for K (and `head_size_v` for V)."""

    num_kv_heads: int
    head_size: int
    dtype: torch.dtype
    head_size_v: int | None = None
    page_size_padded: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        name = type(self).__name__
        _require_positive_int(name, "num_kv_heads", self.num_kv_heads)
        _require_positive_int(name, "head_size", self.head_size)
        if self.head_size_v is not None:
            _require_positive_int(name, "head_size_v", self.head_size_v)
        if not isinstance(self.dtype, torch.dtype):
            raise ValueError(f"{name}.dtype must be a torch.dtype, got {self.dtype!r}")
        if self.page_size_padded is not None:
            _require_positive_int(name, "page_size_padded", self.page_size_padded)
            if self.page_size_padded < self.real_page_size_bytes:
                raise ValueError(
                    f"{name}.page_size_padded ({self.page_size_padded}) is smaller than the page "
                    f"({self.real_page_size_bytes} bytes)"
                )

    @property
    def real_page_size_bytes(self) -> int:
        """Unpadded bytes of one block: K and V for every token, head and element."""
        head_v = self.head_size if self.head_size_v is None else self.head_size_v
        return self.block_size * self.num_kv_heads * (self.head_size + head_v) * self.dtype.itemsize

    @property
    def page_size_bytes(self) -> int:
        return self.page_size_padded if self.page_size_padded is not None else self.real_page_size_bytes

    def max_memory_usage_bytes(self, max_model_len: int, max_in_flight_tokens: int | None = None) -> int:
        return cdiv(max_model_len, self.block_size) * self.page_size_bytes


@dataclass(frozen=True, kw_only=True)
class FullAttentionSpec(AttentionSpec):
    """Full attention; records `sliding_window` / `attention_chunk_size` when a local layer was promoted."""

    sliding_window: int | None = None
    attention_chunk_size: int | None = None

    @classmethod
    def merge(cls, specs: list["KVCacheSpec"]) -> "KVCacheSpec":
        # Full-attention layers that differ only in the recorded window/chunk still share a group.
        if not all(isinstance(s, FullAttentionSpec) for s in specs):
            raise ValueError("FullAttentionSpec.merge needs full-attention specs only")
        stripped = {replace(s, sliding_window=None, attention_chunk_size=None) for s in specs}
        if len(stripped) != 1:
            raise ValueError(f"cannot merge full-attention specs with different shapes: {sorted(map(repr, stripped))}")
        windows = {s.sliding_window for s in specs} - {None}
        chunks = {s.attention_chunk_size for s in specs} - {None}
        if len(windows) > 1 or len(chunks) > 1:
            raise ValueError("cannot merge full-attention specs recording different windows or chunk sizes")
        return replace(
            specs[0],
            sliding_window=next(iter(windows), None),
            attention_chunk_size=next(iter(chunks), None),
        )


@dataclass(frozen=True, kw_only=True)
class SlidingWindowSpec(AttentionSpec):
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

    def max_admission_blocks(self, max_model_len: int, max_in_flight_tokens: int) -> int:
        """Blocks one request can hold at once (the +1: the window need not start on a block boundary)."""
        tokens = min(self.sliding_window - 1 + self.extra_retained_tokens + max_in_flight_tokens, max_model_len)
        return cdiv(tokens, self.block_size) + 1

    def max_memory_usage_bytes(self, max_model_len: int, max_in_flight_tokens: int | None = None) -> int:
        in_flight = max_model_len if max_in_flight_tokens is None else max_in_flight_tokens
        return self.max_admission_blocks(max_model_len, in_flight) * self.page_size_bytes


@dataclass(frozen=True, kw_only=True)
class ChunkedLocalAttentionSpec(AttentionSpec):
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

    def max_admission_blocks(self, max_model_len: int, max_in_flight_tokens: int) -> int:
        """Blocks one request can hold at once."""
        return cdiv(min(self.attention_chunk_size + max_in_flight_tokens, max_model_len), self.block_size)

    def max_memory_usage_bytes(self, max_model_len: int, max_in_flight_tokens: int | None = None) -> int:
        in_flight = max_model_len if max_in_flight_tokens is None else max_in_flight_tokens
        return self.max_admission_blocks(max_model_len, in_flight) * self.page_size_bytes


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
    page_size_padded: int | None = None
    mamba_type: str = "mamba2"
    mamba_cache_mode: str = "align"
    num_speculative_blocks: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        if len(self.shapes) != len(self.dtypes) or not self.shapes:
            raise ValueError(
                f"MambaSpec.shapes and MambaSpec.dtypes must be non-empty and of equal length, "
                f"got {len(self.shapes)} shapes and {len(self.dtypes)} dtypes"
            )
        if self.mamba_cache_mode not in ("align", "none"):
            raise ValueError(f"MambaSpec.mamba_cache_mode must be 'align' or 'none', got {self.mamba_cache_mode!r}")
        if not isinstance(self.num_speculative_blocks, int) or self.num_speculative_blocks < 0:
            raise ValueError(
                f"MambaSpec.num_speculative_blocks must be a non-negative integer, got {self.num_speculative_blocks!r}"
            )
        if self.page_size_padded is not None and self.page_size_padded < self.real_page_size_bytes:
            raise ValueError(
                f"MambaSpec.page_size_padded ({self.page_size_padded}) is smaller than the state "
                f"({self.real_page_size_bytes} bytes)"
            )

    @property
    def real_page_size_bytes(self) -> int:
        """Bytes of the state tensors of one snapshot."""
        return sum(math.prod(shape) * dtype.itemsize for shape, dtype in zip(self.shapes, self.dtypes))

    @property
    def page_size_bytes(self) -> int:
        return self.page_size_padded if self.page_size_padded is not None else self.real_page_size_bytes

    def max_memory_usage_bytes(self, max_model_len: int, max_in_flight_tokens: int | None = None) -> int:
        pages = (2 if self.mamba_cache_mode == "align" else 1) + self.num_speculative_blocks
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
    role: str = "main"


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

    def __post_init__(self) -> None:
        if isinstance(self.num_blocks, bool) or not isinstance(self.num_blocks, int) or self.num_blocks < 1:
            raise ValueError(
                f"KVCacheConfig.num_blocks must be an integer >= 1 (block 0 is the null block), got {self.num_blocks!r}"
            )
        rti = self.prefix_cache_retention_interval
        if rti is not None and (isinstance(rti, bool) or not isinstance(rti, int) or rti < 0):
            raise ValueError(
                f"KVCacheConfig.prefix_cache_retention_interval must be None or a non-negative integer, got {rti!r}"
            )
