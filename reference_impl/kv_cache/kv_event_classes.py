"""The reference's own KV cache event classes, used when vLLM is absent (see `kv_events`).

Same class names, fields (in order) and defaults as vLLM 0.33's `vllm.distributed.kv_events`; plain
dataclasses instead of msgspec structs, so the reference needs neither vLLM nor msgspec.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["KVCacheEvent", "BlockStored", "BlockRemoved", "AllBlocksCleared"]


class KVCacheEvent:
    """Base class of the reference's own KV cache events (used when vLLM is absent)."""

    __slots__ = ()


def _seq_key(value):
    return tuple(value) if value is not None else None


@dataclass(eq=True)
class BlockStored(KVCacheEvent):
    """Blocks newly registered in (or reported from) the prefix cache, as one chained run.

    `block_hashes[i]` covers `token_ids[i * block_size:(i + 1) * block_size]` (null or masked-out blocks are
    left out of the hashes but not of the token range); `parent_block_hash` is the hash before the run (None
    at the start of a prompt); `extra_keys` and `lookahead_token_ids` hold one entry per hash.
    """

    block_hashes: list
    parent_block_hash: Any
    token_ids: list
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None
    extra_keys: list | None = None
    group_idx: int | None = None
    kv_cache_spec_kind: str | None = None
    kv_cache_spec_sliding_window: int | None = None
    locality: str | None = None
    ownership: str | None = None
    session_id: str | None = None
    lookahead_token_ids: list | None = None

    # Mutable (the manager annotates spec metadata after the pool emits) yet hashable, as vLLM's: workers'
    # identical events are counted by value when aggregated.
    def __hash__(self) -> int:
        return hash((
            _seq_key(self.block_hashes), self.parent_block_hash, _seq_key(self.token_ids), self.block_size,
            self.lora_id, self.medium, _seq_key(self.extra_keys) if self.extra_keys else None, self.group_idx,
            self.kv_cache_spec_kind, self.kv_cache_spec_sliding_window, self.locality, self.ownership,
            self.session_id,
            tuple(map(tuple, self.lookahead_token_ids)) if self.lookahead_token_ids is not None else None,
        ))


@dataclass(eq=True)
class BlockRemoved(KVCacheEvent):
    """One prefix-cache key dropped (evicted, replaced or invalidated); `group_idx` names its group."""

    block_hashes: list
    medium: str | None
    group_idx: int | None = None
    locality: str | None = None
    ownership: str | None = None

    def __hash__(self) -> int:
        return hash((_seq_key(self.block_hashes), self.medium, self.group_idx, self.locality, self.ownership))


@dataclass(eq=True, frozen=True)
class AllBlocksCleared(KVCacheEvent):
    """The whole prefix cache was reset."""
