"""KV cache events: `BlockStored`, `BlockRemoved`, `AllBlocksCleared` (vLLM 0.33 `vllm.distributed.kv_events`).

When vLLM is importable and its event classes carry every field the reference fills in, those classes are
used, so code written against vLLM (`isinstance(event, BlockStored)` with vLLM's import) reads the
reference's events unchanged. Otherwise the reference's own equivalents (`kv_event_classes`) are used: same
names, same fields in the same order, same defaults. The choice is made lazily, on first use, because importing
vLLM's module pulls in most of vLLM; `event_classes()` returns the chosen trio.
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

from reference_impl.kv_cache import kv_event_classes

__all__ = [
    "MEDIUM_GPU",
    "MEDIUM_CPU",
    "MEDIUM_STORAGE",
    "EventClasses",
    "event_classes",
]

MEDIUM_GPU = "GPU"
MEDIUM_CPU = "CPU"
MEDIUM_STORAGE = "STORAGE"


class EventClasses(NamedTuple):
    """The event classes in use: vLLM's or the reference's."""

    BlockStored: type
    BlockRemoved: type
    AllBlocksCleared: type
    from_vllm: bool


# Fields the reference fills in; an older vLLM whose classes lack one (0.13 has no group_idx) is not used.
_NEEDED_STORED = frozenset(kv_event_classes.BlockStored.__dataclass_fields__)
_NEEDED_REMOVED = frozenset(kv_event_classes.BlockRemoved.__dataclass_fields__)


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
    own = kv_event_classes
    return EventClasses(own.BlockStored, own.BlockRemoved, own.AllBlocksCleared, False)


def __getattr__(name: str):
    # `from reference_impl.kv_cache.kv_events import BlockStored` gives the class in use, resolved lazily.
    if name in ("BlockStored", "BlockRemoved", "AllBlocksCleared"):
        return getattr(event_classes(), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
