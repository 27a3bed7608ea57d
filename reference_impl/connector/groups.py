"""How a connector sees the KV cache groups: per group its kind, block size, window and layers.

Specs are recognised by vLLM's class names (and a few attributes), so the same code reads vLLM's own
`KVCacheConfig` and kvconform's allocator config.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

FULL = "full_attention"
SLIDING = "sliding_window"
MAMBA = "mamba"

_FULL_NAMES = {"FullAttentionSpec", "MLAAttentionSpec", "SinkFullAttentionSpec", "HiddenStateCacheSpec"}
_SLIDING_NAMES = {"SlidingWindowSpec", "SlidingWindowMLASpec"}
_MAMBA_NAMES = {"MambaSpec"}


@dataclass(frozen=True)
class GroupInfo:
    """One transferable KV cache group as a connector needs it."""

    group_id: int
    kind: str
    block_size: int
    layer_names: tuple[str, ...]
    sliding_window: int | None = None
    dtype: str = ""  # the KV dtype(s), part of every store key (`spec_dtype`)

    def chunk_tail_tokens(self, chunk_size: int) -> int:
        """Tokens of each chunk this group needs stored: all for full attention, the window tail for SWA."""
        if self.kind == SLIDING:
            return min(chunk_size, self.sliding_window - 1) if self.sliding_window > 1 else 1
        return chunk_size

    def window_chunks(self, chunk_size: int) -> int:
        """How many chunks ending at a hit this group needs: -1 means all (full attention)."""
        if self.kind == FULL:
            return -1
        if self.kind == SLIDING:
            return max(1, math.ceil((self.sliding_window - 1) / chunk_size))
        return 1


def spec_dtype(spec) -> str:
    """The dtype of a group's KV (attention) or states (Mamba: one per state tensor), as text for store keys:
    another deployment's objects in another dtype must never match."""
    return str(getattr(spec, "dtype", None) or getattr(spec, "dtypes", ""))


def _spec_kind(spec) -> str:
    name = type(spec).__name__
    if name == "UniformTypeKVCacheSpecs":
        inner = list(getattr(spec, "kv_cache_specs", {}).values())
        kinds = {_spec_kind(s) for s in inner}
        if len(kinds) == 1:
            return kinds.pop()
        raise ValueError(f"UniformTypeKVCacheSpecs mixing kinds {sorted(kinds)} is not supported")
    if name in _FULL_NAMES:
        return FULL
    if name in _SLIDING_NAMES:
        return SLIDING
    if name in _MAMBA_NAMES:
        return MAMBA
    raise ValueError(
        f"kv_cache_spec {name} is not supported by this connector "
        "(accepted: full attention, sliding window, Mamba in 'align' or 'all' mode)"
    )


def transfer_groups(kv_cache_config) -> list[GroupInfo]:
    """The groups a prefix-cache connector stores and loads.

    Groups with `enable_kv_transfer=False` or a non-prefix-cacheable spec (scratch) are skipped;
    unsupported specs (cross-attention, chunked local, Mamba mode 'none') raise ValueError at start-up.
    """
    groups = []
    for group_id, group in enumerate(kv_cache_config.kv_cache_groups):
        spec = group.kv_cache_spec
        if not getattr(group, "enable_kv_transfer", True) or not getattr(spec, "prefix_cacheable", True):
            continue
        kind = _spec_kind(spec)
        if kind == MAMBA:
            mode = getattr(spec, "mamba_cache_mode", "align")
            if mode not in ("align", "all"):
                raise ValueError(
                    f"kv_cache_groups[{group_id}]: Mamba mamba_cache_mode={mode!r} cannot be prefix cached "
                    "(accepted: 'align', 'all')"
                )
        window = getattr(spec, "sliding_window", None) if kind == SLIDING else None
        groups.append(GroupInfo(group_id, kind, int(spec.block_size), tuple(group.layer_names), window,
                                spec_dtype(spec)))
    return groups


def fold_hit_chunks(presence: dict[int, list[bool]], windows: dict[int, int], max_chunks: int) -> int:
    """The largest m <= max_chunks such that every group can serve a hit of m chunks.

    `presence[g][j]` says group g holds its object for chunk j; `windows[g]` is -1 (needs every chunk
    before m), k > 0 (needs chunks m-k .. m-1). Windowed groups make servability non-monotone in m, so
    every candidate is tested from the top down.
    """
    for m in range(max_chunks, 0, -1):
        if all(_servable(presence[g], windows[g], m) for g in presence):
            return m
    return 0


def _servable(present: list[bool], window: int, m: int) -> bool:
    if m > len(present):
        return False
    start = 0 if window < 0 else max(0, m - window)
    return all(present[start:m])
