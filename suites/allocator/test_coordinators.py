"""Spec section 5: hybrid coordinator — fixed-point longest common hit, alignment of caching."""

import pytest

from harness.targets.allocator.target import GroupDesc
from suites.allocator.helpers import tables

SECTION = "5"

# bs 4: full / SWA needing 2 blocks (window 8) / SWA needing 4 blocks (window 16).
THREE_GROUPS = [GroupDesc("full", 4), GroupDesc("sliding_window", 4, sliding_window=8),
                GroupDesc("sliding_window", 4, sliding_window=16)]
N = [0] * 10
ROWS = [
    # evicted (group, position) pairs, hit blocks, expected ids per group
    ((), 10, [list(range(1, 11)), [0] * 8 + [19, 20], [0] * 6 + [27, 28, 29, 30]]),
    (((2, 7),), 7, [list(range(1, 8)), [0] * 5 + [16, 17], [0, 0, 0, 24, 25, 26, 27]]),
    (((1, 8),), 8, [list(range(1, 9)), [0] * 6 + [17, 18], [0] * 4 + [25, 26, 27, 28]]),
    (((1, 8), (2, 5)), 5, [list(range(1, 6)), [0, 0, 0, 14, 15], [0, 22, 23, 24, 25]]),
    (((2, 6), (1, 4)), 4, [list(range(1, 5)), [0, 0, 13, 14], [21, 22, 23, 24]]),
    (((0, 3),), 3, [[1, 2, 3], [0, 12, 13], [21, 22, 23]]),
]


@pytest.mark.parametrize("evicted,hit_blocks,expected", ROWS, ids=["none", "swa4-b7", "swa2-b8",
                                                                    "swa2-b8+swa4-b5", "swa4-b6+swa2-b4",
                                                                    "full-b3"])
def test_fixed_point_longest_common_hit(target, evicted, hit_blocks, expected):
    """A 40-token prompt was computed (ids: full 1..10, SWA2 11..20, SWA4 21..30) and freed; some cached
    blocks are evicted; the identical prompt + 1 token must hit the longest length every group supports."""
    m = target.make_manager(THREE_GROUPS, 64, 1000)
    prompt = list(range(1, 41))
    first = target.make_request("a", prompt, 4)
    m.allocate_slots(first, 40)
    owned = tables(m, first)
    assert owned == [list(range(1, 11)), list(range(11, 21)), list(range(21, 31))], "setup block ids"
    m.free(first)
    m.evict_blocks({owned[g][p] for g, p in evicted})
    second = target.make_request("b", prompt + [99], 4)
    blocks, hit, _ = m.get_computed_blocks(second)
    assert hit == hit_blocks * 4, f"evicting {evicted}: expected a {hit_blocks}-block hit, got {hit // 4}"
    assert [list(g) for g in blocks.get_block_ids()] == expected, f"hit tables after evicting {evicted}"


@pytest.mark.needs("scheduler_block_size")  # before it, every full block of each group is cached
def test_hybrid_caching_rounds_down_to_scheduler_block(target):
    """full(bs32) + SWA(bs16): after 112 tokens SWA caches hashes 0..5 (96 tokens), full caches 3 blocks."""
    m = target.make_manager([GroupDesc("full", 32), GroupDesc("sliding_window", 16, sliding_window=64)], 64, 1000)
    req = target.make_request("r", list(range(113)), 16)
    m.allocate_slots(req, 112)
    keys = target.cache_entries(m.block_pool)
    per_group = [sum(1 for k in keys if k[-4:] == g.to_bytes(4, "big")) for g in (0, 1)]
    assert per_group == [3, 6], f"cached blocks per group must be [3, 6] (rounded to 96 tokens), got {per_group}"


@pytest.mark.parametrize("retention,positions", [
    # Dense caching rounds down to the scheduler block (32 tokens) only where the manager has one.
    pytest.param(None, [3, 7, 11, 15], id="dense", marks=pytest.mark.needs("scheduler_block_size")),
    pytest.param(0, [11], id="sparse-0"), pytest.param(64, [7, 11, 15], id="interval-64")])
def test_sliding_window_retention_decides_cached_blocks(target, retention, positions):
    """full(bs32) + SWA(bs8, window 8), 128-token prompt: which SWA positions get a prefix-cache key."""
    m = target.make_manager([GroupDesc("full", 32), GroupDesc("sliding_window", 8, sliding_window=8)], 64, 1000,
                            retention_interval=retention)
    req = target.make_request("r", list(range(128)), 8)
    m.allocate_slots(req, 128)
    swa = m.get_blocks(req.request_id).blocks[1]
    cached = [i for i, b in enumerate(swa) if not b.is_null and target.block_key(b) is not None]
    assert cached == positions, f"retention {retention}: SWA blocks cached at {positions}, got {cached}"


def test_shared_prefix_boundary_reports_uncached_common_prefix(target):
    """Sparse retention: a prompt sharing only the first 64 of 128 tokens hits 0 in the hybrid, and the
    boundary says where full attention alone could have hit (64)."""
    m = target.make_manager([GroupDesc("full", 16), GroupDesc("sliding_window", 16, sliding_window=32)], 64, 1000,
                            retention_interval=0)
    first = target.make_request("a", list(range(128)), 16)
    m.allocate_slots(first, 128)
    m.free(first)
    second = target.make_request("b", list(range(64)) + list(range(1000, 1064)), 16)
    _, hit, boundary = m.get_computed_blocks(second)
    assert (hit, boundary) == (0, 64), f"expected hit 0 and shared_prefix_boundary 64, got {(hit, boundary)}"
