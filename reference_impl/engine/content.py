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
    model's, `model_salt`). Row i depends on its token only through the per-token residue
    `(t_i*7919 + p_i*104729 + salt) mod 113`, so it is one of 113 rows, looked up in a per-(layer, heads, width,
    dtype) table of them (`_rows_by_residue`): the same values, without an element-wise computation per call (the
    worker makes one on every write and read-back check).
    """
    return attention_rows(token_residues(tokens, positions, salt), layer, heads, width, dtype)


def token_residues(tokens: Sequence[int], positions: Sequence[int], salt: int = 0) -> torch.Tensor:
    """The per-token residues `(t_i*7919 + p_i*104729 + salt) mod 113` of `attention_kv` (int64, one per token):
    the same for every layer, so a caller that needs several layers' rows computes them once."""
    return torch.tensor([(t * 7919 + p * 104729 + salt) % _VALUES for t, p in zip(tokens, positions)],
                        dtype=torch.int64)


def attention_rows(residues: torch.Tensor, layer: int, heads: Sequence[int], width: int,
                   dtype: torch.dtype) -> torch.Tensor:
    """`attention_kv`'s rows of `layer` for tokens whose `token_residues` are `residues`."""
    # index_select, not `table[residues]`: advanced indexing is about 10x slower for these small rows
    return _rows_by_residue(layer, tuple(heads), width, dtype).index_select(0, residues)


@functools.lru_cache(maxsize=1024)
def _rows_by_residue(layer: int, heads: tuple[int, ...], width: int, dtype: torch.dtype) -> torch.Tensor:
    """[113, len(heads), width]: row r is `attention_kv`'s row of a token whose per-token residue is r (never
    written)."""
    h = torch.tensor(heads, dtype=torch.int64)[None, :, None]
    c = torch.arange(width, dtype=torch.int64)[None, None, :]
    r = torch.arange(_VALUES, dtype=torch.int64)[:, None, None]
    return _value_table(dtype)[(r + (layer + 1) * 15485863 + h * 32452843 + c * 49979687) % _VALUES]


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
