"""The reference engine's KV content function against its formula, element by element in plain Python, and the
full-precision property of its values (a round trip through another dtype changes every one)."""

import random

import pytest
import torch

from reference_impl.engine.content import attention_kv, mamba_state, model_salt

# (mantissa bits, exponent offset) per dtype, as the content module documents them
SCHEME = {torch.float16: (10, -4), torch.bfloat16: (7, 20), torch.float32: (23, 20)}


def formula(token: int, position: int, layer: int, head: int, channel: int, dtype=torch.float16, salt: int = 0) -> float:
    """The documented value of one KV element (`reference_impl.engine.content.attention_kv`)."""
    mixed = token * 7919 + position * 104729 + salt + (layer + 1) * 15485863 + head * 32452843 + channel * 49979687
    residue = mixed % 113
    bits, offset = SCHEME[dtype]
    odd = 2 * (residue * 29 % 2 ** (bits - 1)) + 1
    return (-1) ** residue * (1 + odd / 2 ** bits) * 2.0 ** (offset + residue // 16)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("num_tokens,heads,width", [(1, range(0, 1), 8), (16, range(2, 4), 32), (37, range(5, 13), 5)])
def test_attention_kv_follows_its_formula(dtype, num_tokens, heads, width):
    rng = random.Random(num_tokens * 1000 + width)
    tokens = [rng.randrange(0, 200_000) for _ in range(num_tokens)]
    start = rng.randrange(0, 100_000)
    layer = rng.randrange(0, 64)
    got = attention_kv(tokens, range(start, start + num_tokens), layer, heads, width, dtype)
    assert got.shape == (num_tokens, len(heads), width) and got.dtype == dtype
    want = [[[formula(t, start + i, layer, h, c, dtype) for c in range(width)] for h in heads] for i, t in enumerate(tokens)]
    assert got.to(torch.float64).tolist() == want, f"attention_kv differs from its formula (layer {layer}, {dtype})"
    again = attention_kv(tokens, range(start, start + num_tokens), layer, heads, width, dtype)
    got.fill_(0)  # a caller writing into one result must not change the next
    assert torch.equal(again, attention_kv(tokens, range(start, start + num_tokens), layer, heads, width, dtype))


@pytest.mark.parametrize("dtype, narrower", [(torch.float16, [torch.bfloat16]), (torch.bfloat16, [torch.float16]),
                                             (torch.float32, [torch.float16, torch.bfloat16])])
def test_values_use_the_full_precision_of_their_dtype(dtype, narrower):
    """Every value is finite, the 113 values are distinct, and none survives a trip through another dtype that
    cannot hold it exactly (so a connector storing KV in another dtype is seen by the reads that check it)."""
    values = attention_kv(list(range(113)), [0] * 113, 0, [0], 1, dtype).flatten()
    assert torch.isfinite(values).all() and len(set(values.tolist())) == 113
    for other in narrower:
        assert not (values.to(other).to(dtype) == values).any(), f"a {dtype} value is exact in {other}"
    state = mamba_state([1, 2, 3], 0, [(4, 8)], [dtype])[0]
    assert state.dtype == dtype and all(not (state.to(o).to(dtype) == state).any() for o in narrower)


def test_another_model_computes_other_kv_for_the_same_tokens():
    a, b = model_salt("kvconform/a"), model_salt("kvconform/b")
    assert a != b and model_salt("kvconform/a") == a
    one = attention_kv([5, 6], [0, 1], 0, [0, 1], 4, torch.float16, a)
    assert not torch.equal(one, attention_kv([5, 6], [0, 1], 0, [0, 1], 4, torch.float16, b))
    assert one[0, 0, 0].item() == formula(5, 0, 0, 0, 0, torch.float16, a)
