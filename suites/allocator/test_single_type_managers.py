"""Spec section 4: single-type managers (window skipping, hit searches per attention type)."""

import pytest

from harness.targets.allocator.target import GroupDesc
from suites.allocator.helpers import queue_ids, remove_skipped, tables

SECTION = "4"


@pytest.mark.needs('unhashed_lifo')
def test_sliding_window_nulls_and_frees_out_of_window_blocks(target):
    """bs 2, window 4, a 22-token request holding blocks 1..11 (caching off, so frees are unhashed)::

        n=5  -> [0, 2, 3, ...]     n=7 -> [0, 0, 3, ...]     n=11 -> [0, 0, 0, 0, 5, ..., 11]
    """
    m = target.make_manager([GroupDesc("sliding_window", 2, sliding_window=4)], 40, 1000, enable_caching=False)
    req = target.make_request("s", list(range(22)), 2)
    m.allocate_slots(req, 4)
    req.num_computed_tokens = 4
    expected = {5: [0, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11], 6: [0, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11],
                7: [0, 0, 3, 4, 5, 6, 7, 8, 9, 10, 11], 11: [0, 0, 0, 0, 5, 6, 7, 8, 9, 10, 11]}
    m.allocate_slots(req, 18)  # table covers all 22 tokens: blocks 1..11 (1,2 already held)
    for n in (5, 6, 7, 11):
        req.num_computed_tokens = n
        remove_skipped(target, m, req.request_id, n)
        assert tables(m, req)[0] == expected[n], f"after {n} computed tokens the window keeps {expected[n]}"
    assert queue_ids(m.block_pool)[:4] == [4, 3, 2, 1], "freed unhashed window blocks reach the head as 4,3,2,1"


PATTERNS = [
    # (cached flags by block, hit tokens, table: 'n' = null, 'i' = the block id at that position)
    ("1", 2, "i"),
    ("11", 4, "ii"),
    ("111", 6, "nii"),
    ("110100110111", 24, "n" * 10 + "ii"),
    ("11010011000", 16, "n" * 6 + "ii"),
    ("110100110001", 16, "n" * 6 + "ii"),
]


@pytest.mark.parametrize("pattern,hit_tokens,shape", PATTERNS, ids=[p[0] for p in PATTERNS])
def test_sliding_window_hit_search_right_to_left(target, pattern, hit_tokens, shape):
    """bs 2, window 4 => a hit needs 2 contiguous cached blocks at its end; a run from block 0 also counts."""
    n = len(pattern)
    m = target.make_manager([GroupDesc("sliding_window", 2, sliding_window=4)], 64, 1000)
    prompt = list(range(1, 2 * n + 2))
    first = target.make_request("a", prompt, 2)
    m.allocate_slots(first, len(prompt))
    owned = tables(m, first)[0]
    m.free(first)
    m.evict_blocks({owned[i] for i, f in enumerate(pattern) if f == "0"})
    second = target.make_request("b", prompt, 2)
    blocks, hit, _ = m.get_computed_blocks(second)
    assert hit == hit_tokens, f"pattern {pattern}: expected a hit of {hit_tokens} tokens, got {hit}"
    expect = [0 if c == "n" else owned[i] for i, c in enumerate(shape)]
    assert blocks.get_block_ids()[0] == expect, f"pattern {pattern}: hit table must be {expect} (nulls before the run)"


def test_chunked_local_hit_before_chunk_start_is_all_null(target):
    """chunk 4, bs 2, max length 20: every block before token 20 is null without a lookup -> 20 tokens."""
    m = target.make_manager([GroupDesc("chunked_local", 2, attention_chunk_size=4)], 32, 1000)
    req = target.make_request("c", list(range(21)), 2)
    blocks, hit, _ = m.get_computed_blocks(req)
    assert hit == 20, f"an empty cache still yields a 20-token all-null hit, got {hit}"
    assert blocks.get_block_ids()[0] == [0] * 10, "ten null blocks"
