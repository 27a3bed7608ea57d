"""How a connector sees the KV cache groups: per group its kind, block size, window and layers.

Specs are recognised by vLLM's class names (and a few attributes), so the same code reads vLLM's own
`KVCacheConfig` and kvconform's allocator config.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

FULL = "full_attention"
SLIDING = "sliding_window"
CHUNKED = "chunked_local_attention"
MAMBA = "mamba"

_FULL_NAMES = {"FullAttentionSpec", "MLAAttentionSpec", "SinkFullAttentionSpec", "HiddenStateCacheSpec"}
_SLIDING_NAMES = {"SlidingWindowSpec", "SlidingWindowMLASpec"}
_CHUNKED_NAMES = {"ChunkedLocalAttentionSpec"}
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
    attention_chunk_size: int | None = None  # chunked local attention: a token attends within its chunk

    def chunk_tail_tokens(self, chunk_size: int) -> int:
        """Tokens of each chunk this group needs stored: all for full attention and chunked local attention (a hit
        inside an attention chunk reads all of it before the hit), the window tail for SWA."""
        if self.kind == SLIDING:
            return min(chunk_size, self.sliding_window - 1) if self.sliding_window > 1 else 1
        return chunk_size

    def window_chunks(self, chunk_size: int):
        """Which chunks ending at a hit this group needs: -1 means all (full attention), k > 0 the last k; for
        chunked local attention, where that depends on the hit, `first_chunk` of the hit (a callable)."""
        if self.kind == FULL:
            return -1
        if self.kind == SLIDING:
            return max(1, math.ceil((self.sliding_window - 1) / chunk_size))
        if self.kind == CHUNKED:
            return lambda m: self.first_chunk(m, chunk_size)
        return 1

    def first_chunk(self, m: int, chunk_size: int) -> int:
        """The first chunk a hit of `m` chunks needs of this group: 0 (full attention), the window's first
        (sliding window, Mamba: the last one), or the one holding the start of the hit's attention chunk
        (chunked local attention: the next token attends within [hit // size * size, hit))."""
        if self.kind == CHUNKED:
            return m * chunk_size // self.attention_chunk_size * self.attention_chunk_size // chunk_size
        window = self.window_chunks(chunk_size)
        return 0 if window < 0 else max(0, m - window)


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
    if name in _CHUNKED_NAMES:
        return CHUNKED
    if name in _MAMBA_NAMES:
        return MAMBA
    raise ValueError(
        f"kv_cache_spec {name} is not supported by this connector "
        "(accepted: full attention, sliding window, chunked local attention, Mamba in 'align' or 'all' mode)"
    )


def transfer_groups(kv_cache_config) -> list[GroupInfo]:
    """The groups a prefix-cache connector stores and loads.

    Groups with `enable_kv_transfer=False` or a non-prefix-cacheable spec (scratch) are skipped;
    unsupported specs (cross-attention, Mamba mode 'none') raise ValueError at start-up.
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
        chunk = getattr(spec, "attention_chunk_size", None) if kind == CHUNKED else None
        groups.append(GroupInfo(group_id, kind, int(spec.block_size), tuple(group.layer_names), window,
                                spec_dtype(spec), chunk))
    return groups


def fold_hit_chunks(presence: dict[int, list[bool]], windows: dict[int, int], max_chunks: int) -> int:
    """The largest m <= max_chunks such that every group can serve a hit of m chunks.

    `presence[g][j]` says group g holds its object for chunk j; `windows[g]` is -1 (needs every chunk
    before m), k > 0 (needs chunks m-k .. m-1), or a callable m -> the first chunk needed (chunked local
    attention, `GroupInfo.window_chunks`). Windowed groups make servability non-monotone in m, so every
    candidate is tested from the top down.
    """
    for m in range(max_chunks, 0, -1):
        if all(_servable(presence[g], windows[g], m) for g in presence):
            return m
    return 0


def drafter_reads_last_block(vllm_config) -> bool:
    """Whether the engine runs an EAGLE-style drafter (EAGLE, EAGLE-3, MTP: `speculative_config.use_eagle()`): it
    needs the hidden states of a prefix hit's last block, which no cache holds, so a hit (local or a connector's)
    must leave that block to recompute."""
    spec = getattr(vllm_config, "speculative_config", None)
    use_eagle = getattr(spec, "use_eagle", None)
    return bool(callable(use_eagle) and use_eagle())


def _servable(present: list[bool], window, m: int) -> bool:
    if m > len(present):
        return False
    start = window(m) if callable(window) else 0 if window < 0 else max(0, m - window)
    return all(present[start:m])
