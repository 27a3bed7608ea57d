"""Deterministic KV content: what the "model" writes, so every byte a connector moves can be checked.

Attention KV at (token, position, layer, head, channel) and the Mamba state after a prefix are pure
functions of their inputs. Each of the 113 residues an element can take maps to a value that uses its dtype's
full precision (`_value_table`): float16 values need all 10 mantissa bits (bfloat16 cannot hold them),
bfloat16 values lie beyond float16's range, float32 values need mantissa bits neither of those has. A
connector that moves KV through another dtype (a store in half precision, a typed copy between layouts)
therefore changes the values, and the reads that check them see it.
"""

from __future__ import annotations

import functools
import hashlib
from array import array
from typing import Sequence

import torch

_VALUES = 113  # distinct values per element
CANARY_VALUE = -120  # an integer: never one of the full-precision values below


def model_salt(model: str) -> int:
    """The content salt of a model name (0..112, stable across processes)."""
    return int.from_bytes(hashlib.sha256(model.encode()).digest()[:8], "little") % _VALUES


def attention_kv(tokens: Sequence[int], positions: Sequence[int], layer: int, heads: Sequence[int],
                 width: int, dtype: torch.dtype, salt: int = 0) -> torch.Tensor:
    """KV rows for `tokens` at `positions`: shape [len(tokens), len(heads), width] in `dtype`.

    Element (i, j, k) is the `_value_table` entry of residue
    `(t_i*7919 + p_i*104729 + salt + (layer+1)*15485863 + h_j*32452843 + k*49979687) mod 113` (`salt`: the
    model's, `model_salt`). It is computed as a per-token residue plus a cached per-(head, channel) residue, looked up in a
    table of the 226 possible sums (the same values, about 3x faster for the block-sized calls the worker
    makes on every write and read-back check).
    """
    row = torch.tensor([(t * 7919 + p * 104729 + salt) % _VALUES for t, p in zip(tokens, positions)],
                       dtype=torch.int64)
    return _value_table(dtype)[row[:, None, None] + _channel_residues(layer, tuple(heads), width)]


@functools.lru_cache(maxsize=1024)
def _channel_residues(layer: int, heads: tuple[int, ...], width: int) -> torch.Tensor:
    """[1, len(heads), width]: the layer, head and channel terms of `attention_kv` mod 113 (never written)."""
    h = torch.tensor(heads, dtype=torch.int64)[:, None]
    c = torch.arange(width, dtype=torch.int64)[None, :]
    return (((layer + 1) * 15485863 + h * 32452843 + c * 49979687) % _VALUES)[None]


# Per dtype: (mantissa bits the values need, exponent offset). A value is +-(1 + m / 2**bits) * 2**(offset + r // 16)
# with m odd, so it needs every one of `bits` mantissa bits; the offsets put bfloat16 and float32 values beyond
# float16's largest finite value (65504), float16's within its normal range.
_FULL_PRECISION = {torch.float16: (10, -4), torch.bfloat16: (7, 20), torch.float32: (23, 20),
                   torch.float64: (52, 20)}


def full_precision_value(residue: int, dtype: torch.dtype) -> float:
    """The value of `residue` (0..112) in `dtype`: exact in `dtype`, not in the narrower float dtypes (for
    another dtype, e.g. an integer state, the residue less 56)."""
    if dtype not in _FULL_PRECISION:
        return float(residue - _VALUES // 2)
    bits, offset = _FULL_PRECISION[dtype]
    odd = 2 * (residue * 29 % (1 << (bits - 1))) + 1  # odd: the lowest mantissa bit is set
    sign = -1.0 if residue % 2 else 1.0
    # (odd, exponent, sign) differs for every residue, so the 113 values are distinct in every dtype.
    return sign * (1.0 + odd / (1 << bits)) * 2.0 ** (offset + residue // 16)


@functools.lru_cache(maxsize=None)
def _value_table(dtype: torch.dtype) -> torch.Tensor:
    """The value of each residue sum 0..225 in `dtype` (never written)."""
    values = [full_precision_value(r % _VALUES, dtype) for r in range(2 * _VALUES)]
    return torch.tensor(values, dtype=torch.float64).to(dtype)


def prefix_digest(tokens: Sequence[int]) -> bytes:
    """A digest of a token prefix (stable across processes)."""
    return hashlib.sha256(array("q", tokens).tobytes()).digest()


def mamba_state(tokens: Sequence[int], layer: int, shapes: Sequence[Sequence[int]],
                dtypes: Sequence[torch.dtype], rank: int = 0, salt: int = 0) -> list[torch.Tensor]:
    """The Mamba state tensors after consuming `tokens` (one tensor per state shape; `salt`: the model's)."""
    seed = int.from_bytes(prefix_digest(tokens)[:6], "little") + (layer + 1) * 7 + rank * 1000003 + salt
    states = []
    for index, (shape, dtype) in enumerate(zip(shapes, dtypes)):
        numel = 1
        for dim in shape:
            numel *= dim
        base = torch.arange(numel, dtype=torch.int64) * 2654435761 + seed + index * 97
        states.append(_value_table(dtype)[base % _VALUES].reshape(tuple(shape)))
    return states


def next_token(tokens: Sequence[int], vocab_size: int) -> int:
    """The token the "model" samples after `tokens`."""
    return (sum(tokens[-4:]) * 31 + len(tokens) * 17) % vocab_size
