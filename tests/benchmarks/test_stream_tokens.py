"""The request streams' tokens drawn in bulk are the tokens `random.randrange` draws one call at a time."""

import random

import pytest

from suites.benchmarks import workloads as w


@pytest.mark.parametrize("seed, start, stop, count, chunk_words", [
    (0, 1, 50_000, 5_000, 64),        # the streams' range (16 bits, about a quarter of the words refused)
    (7, 1, 50_000, 1_000, 1 << 16),
    (3, 0, 2, 300, 7),                # one bit, chunks shorter than what is asked
    (5, 10, 10 + (1 << 20) + 3, 2_000, 50),
    (9, 0, (1 << 32) - 1, 500, 33),   # the widest range one 32-bit word covers
    (2, 5, 6, 10, 4),                 # a width of one: every value is `start`
])
def test_bulk_draws_equal_randrange(seed, start, stop, count, chunk_words):
    expected_rng, bulk_rng = random.Random(seed), random.Random(seed)
    expected = [expected_rng.randrange(start, stop) for _ in range(count)]
    assert w.randrange_draws(bulk_rng, start, stop, count, chunk_words) == expected


def test_stream_tokens_are_the_randrange_draws():
    shape = w.StreamShape(num_requests=5, prefix_tokens=48, unique_tokens=32, num_prefixes=3)
    rng = random.Random(11)
    prefixes = tuple(tuple(rng.randrange(1, 50_000) for _ in range(shape.prefix_tokens))
                     for _ in range(shape.num_prefixes))
    uniques = tuple(tuple(rng.randrange(1, 50_000) for _ in range(shape.unique_tokens))
                    for _ in range(shape.num_requests))
    assert w._stream_tokens(shape, 11) == (prefixes, uniques)
