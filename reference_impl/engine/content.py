"""Deterministic KV content: what the "model" writes, so every byte a connector moves can be checked.

Attention KV at (token, position, layer, head, channel) and the Mamba state after a prefix are pure
functions of their inputs. Values are small integers, exact in every float dtype the presets use.
"""

from __future__ import annotations

import functools
import hashlib
from array import array
from typing import Sequence

import torch

_VALUES = 113  # distinct values per element; the canary value (-120) is outside [-56, 56]
CANARY_VALUE = -120


def attention_kv(tokens: Sequence[int], positions: Sequence[int], layer: int, heads: Sequence[int],
                 width: int, dtype: torch.dtype) -> torch.Tensor:
    """KV rows for `tokens` at `positions`: shape [len(tokens), len(heads), width] in `dtype`.

    Element (i, j, k) is `(t_i*7919 + p_i*104729 + (layer+1)*15485863 + h_j*32452843 + k*49979687) mod 113`,
    less 56. It is computed as a per-token residue plus a cached per-(head, channel) residue, looked up in a
    table of the 226 possible sums (the same values, about 3x faster for the block-sized calls the worker
    makes on every write and read-back check).
    """
    row = torch.tensor([(t * 7919 + p * 104729) % _VALUES for t, p in zip(tokens, positions)], dtype=torch.int64)
    return _value_table(dtype)[row[:, None, None] + _channel_residues(layer, tuple(heads), width)]


@functools.lru_cache(maxsize=1024)
def _channel_residues(layer: int, heads: tuple[int, ...], width: int) -> torch.Tensor:
    """[1, len(heads), width]: the layer, head and channel terms of `attention_kv` mod 113 (never written)."""
    h = torch.tensor(heads, dtype=torch.int64)[:, None]
    c = torch.arange(width, dtype=torch.int64)[None, :]
    return (((layer + 1) * 15485863 + h * 32452843 + c * 49979687) % _VALUES)[None]


@functools.lru_cache(maxsize=None)
def _value_table(dtype: torch.dtype) -> torch.Tensor:
    """The value of each residue sum 0..225 in `dtype` (never written)."""
    return ((torch.arange(2 * _VALUES, dtype=torch.int64) % _VALUES) - _VALUES // 2).to(dtype)


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
