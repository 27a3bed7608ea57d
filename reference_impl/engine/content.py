"""Deterministic KV content: what the "model" writes, so every byte a connector moves can be checked.

Attention KV at (token, position, layer, head, channel) and the Mamba state after a prefix are pure
functions of their inputs. Values are small integers, exact in every float dtype the presets use.
"""

from __future__ import annotations

import hashlib
from array import array
from typing import Sequence

import torch

_VALUES = 113  # distinct values per element; the canary value (-120) is outside [-56, 56]
CANARY_VALUE = -120


def attention_kv(tokens: Sequence[int], positions: Sequence[int], layer: int, heads: Sequence[int],
                 width: int, dtype: torch.dtype) -> torch.Tensor:
    """KV rows for `tokens` at `positions`: shape [len(tokens), len(heads), width] in `dtype`."""
    t = torch.as_tensor(list(tokens), dtype=torch.int64)[:, None, None]
    p = torch.as_tensor(list(positions), dtype=torch.int64)[:, None, None]
    h = torch.as_tensor(list(heads), dtype=torch.int64)[None, :, None]
    c = torch.arange(width, dtype=torch.int64)[None, None, :]
    mixed = t * 7919 + p * 104729 + (layer + 1) * 15485863 + h * 32452843 + c * 49979687
    return ((mixed % _VALUES) - _VALUES // 2).to(dtype)


def prefix_digest(tokens: Sequence[int]) -> bytes:
    """A digest of a token prefix (stable across processes)."""
    return hashlib.sha256(array("q", tokens).tobytes()).digest()


def mamba_state(tokens: Sequence[int], layer: int, shapes: Sequence[Sequence[int]],
                dtypes: Sequence[torch.dtype], rank: int = 0) -> list[torch.Tensor]:
    """The Mamba state tensors after consuming `tokens` (one tensor per state shape)."""
    seed = int.from_bytes(prefix_digest(tokens)[:6], "little") + (layer + 1) * 7 + rank * 1000003
    states = []
    for index, (shape, dtype) in enumerate(zip(shapes, dtypes)):
        numel = 1
        for dim in shape:
            numel *= dim
        base = torch.arange(numel, dtype=torch.int64) * 2654435761 + seed + index * 97
        states.append(((base % _VALUES) - _VALUES // 2).to(dtype).reshape(tuple(shape)))
    return states


def next_token(tokens: Sequence[int], vocab_size: int) -> int:
    """The token the "model" samples after `tokens`."""
    return (sum(tokens[-4:]) * 31 + len(tokens) * 17) % vocab_size
