"""KV cache events: `BlockStored`, `BlockRemoved`, `AllBlocksCleared` (vLLM 0.33 `vllm.distributed.kv_events`).

When vLLM is importable and its event classes carry every field the reference fills in, those classes are
used, so code written against vLLM (`isinstance(event, BlockStored)` with vLLM's import) reads the
reference's events unchanged. Otherwise the reference's own equivalents below are used: same class names,
same fields in the same order, same defaults. The choice is made lazily, on first use, because importing
vLLM's module pulls in most of vLLM; `event_classes()` returns the chosen trio.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, NamedTuple

__all__ = [
    "MEDIUM_GPU",
    "MEDIUM_CPU",
    "MEDIUM_STORAGE",
    "EventClasses",
    "event_classes",
    "ReferenceBlockStored",
    "ReferenceBlockRemoved",
    "ReferenceAllBlocksCleared",
]

MEDIUM_GPU = "GPU"
MEDIUM_CPU = "CPU"
MEDIUM_STORAGE = "STORAGE"


class ReferenceKVCacheEvent:
    """Base class of the reference's own KV cache events (used when vLLM is absent)."""

    __slots__ = ()


def _seq_key(value):
    return tuple(value) if value is not None else None


@dataclass(eq=True)
class ReferenceBlockStored(ReferenceKVCacheEvent):
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
class ReferenceBlockRemoved(ReferenceKVCacheEvent):
    """One prefix-cache key dropped (evicted, replaced or invalidated); `group_idx` names its group."""

    block_hashes: list
    medium: str | None
    group_idx: int | None = None
    locality: str | None = None
    ownership: str | None = None

    def __hash__(self) -> int:
        return hash((_seq_key(self.block_hashes), self.medium, self.group_idx, self.locality, self.ownership))


@dataclass(eq=True, frozen=True)
class ReferenceAllBlocksCleared(ReferenceKVCacheEvent):
    """The whole prefix cache was reset."""


class EventClasses(NamedTuple):
    """The event classes in use: vLLM's or the reference's."""

    BlockStored: type
    BlockRemoved: type
    AllBlocksCleared: type
    from_vllm: bool


# Fields the reference fills in; an older vLLM whose classes lack one (0.13 has no group_idx) is not used.
_NEEDED_STORED = frozenset(f for f in ReferenceBlockStored.__dataclass_fields__)
_NEEDED_REMOVED = frozenset(f for f in ReferenceBlockRemoved.__dataclass_fields__)


def _struct_fields(cls) -> frozenset:
    names = getattr(cls, "__struct_fields__", None)
    if names is None:
        names = getattr(cls, "__dataclass_fields__", {})
    return frozenset(names)


@lru_cache(maxsize=1)
def event_classes() -> EventClasses:
    """vLLM's event classes when vLLM is importable and has every field, else the reference's."""
    try:
        from vllm.distributed.kv_events import AllBlocksCleared, BlockRemoved, BlockStored
    except Exception:  # absent, or present but not importable here (missing optional dependency)
        pass
    else:
        if _NEEDED_STORED <= _struct_fields(BlockStored) and _NEEDED_REMOVED <= _struct_fields(BlockRemoved):
            return EventClasses(BlockStored, BlockRemoved, AllBlocksCleared, True)
    return EventClasses(ReferenceBlockStored, ReferenceBlockRemoved, ReferenceAllBlocksCleared, False)


def __getattr__(name: str):
    # `from reference_impl.kv_cache.kv_events import BlockStored` gives the class in use, resolved lazily.
    if name in ("BlockStored", "BlockRemoved", "AllBlocksCleared"):
        return getattr(event_classes(), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
