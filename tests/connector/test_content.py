"""The reference engine's KV content function against its formula, element by element in plain Python."""

import random

import pytest
import torch

from reference_impl.engine.content import attention_kv


def formula(token: int, position: int, layer: int, head: int, channel: int) -> int:
    """The documented value of one KV element (`reference_impl.engine.content.attention_kv`)."""
    mixed = token * 7919 + position * 104729 + (layer + 1) * 15485863 + head * 32452843 + channel * 49979687
    return mixed % 113 - 56


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("num_tokens,heads,width", [(1, range(0, 1), 8), (16, range(2, 4), 32), (37, range(5, 13), 5)])
def test_attention_kv_follows_its_formula(dtype, num_tokens, heads, width):
    rng = random.Random(num_tokens * 1000 + width)
    tokens = [rng.randrange(0, 200_000) for _ in range(num_tokens)]
    start = rng.randrange(0, 100_000)
    layer = rng.randrange(0, 64)
    got = attention_kv(tokens, range(start, start + num_tokens), layer, heads, width, dtype)
    assert got.shape == (num_tokens, len(heads), width) and got.dtype == dtype
    want = [[[formula(t, start + i, layer, h, c) for c in range(width)] for h in heads] for i, t in enumerate(tokens)]
    assert got.to(torch.int64).tolist() == want, f"attention_kv differs from its formula (layer {layer}, {dtype})"
    again = attention_kv(tokens, range(start, start + num_tokens), layer, heads, width, dtype)
    got.fill_(0)  # a caller writing into one result must not change the next
    assert torch.equal(again, attention_kv(tokens, range(start, start + num_tokens), layer, heads, width, dtype))
