"""Spec section 8: things a re-implementation must not miss (one test per item)."""

import pytest

from harness.targets.allocator.target import GroupDesc
from suites.allocator.helpers import prefill, queue_ids, tables

SECTION = "8"

HYBRID = [GroupDesc("full", 4), GroupDesc("sliding_window", 4, sliding_window=4)]


@pytest.mark.needs('unhashed_lifo')
def test_item1_hybrid_free_is_group_by_group_tail_first(target):
    m = target.make_manager(HYBRID, 12, 100, enable_caching=False)
    req = target.make_request("r", list(range(10)), 4)
    m.allocate_slots(req, 10)
    assert tables(m, req) == [[1, 2, 3], [4, 5, 6]], "setup"
    m.free(req)
    assert queue_ids(m.block_pool)[:6] == [6, 5, 4, 3, 2, 1], \
        "group 0 frees 3,2,1 to the head, then group 1 prepends 6,5,4 before them"


@pytest.mark.needs('unhashed_lifo')
def test_item2_hit_on_free_cached_block_unlinks_it(target):
    m = target.make_manager([GroupDesc("full", 4)], 10, 100)
    a = target.make_request("a", list(range(9)), 4)
    m.allocate_slots(a, 9)
    m.free(a)
    assert queue_ids(m.block_pool) == [3, 4, 5, 6, 7, 8, 9, 2, 1], "partial block 3 at head; cached 2,1 at tail"
    b = target.make_request("b", list(range(9)), 4)
    prefill(m, b)
    assert tables(m, b) == [[1, 2, 3]], "b reuses cached 1, 2 and takes the head block 3"
    assert queue_ids(m.block_pool) == [4, 5, 6, 7, 8, 9], "hit blocks left the queue"


def test_item3_cached_while_in_use_and_reset_refused(target):
    m = target.make_manager([GroupDesc("full", 4)], 10, 100)
    a = target.make_request("a", list(range(9)), 4)
    m.allocate_slots(a, 9)
    assert len(target.cache_entries(m.block_pool)) == 2, "full blocks are cached at allocation, while in use"
    assert m.reset_prefix_cache() is False, "reset refused while a request holds blocks"


def test_item4_hits_do_not_touch_ref_counts_until_allocation(target):
    m = target.make_manager([GroupDesc("full", 4)], 10, 100)
    a = target.make_request("a", list(range(9)), 4)
    m.allocate_slots(a, 9)
    b = target.make_request("b", list(range(9)), 4)
    blocks, hit, _ = m.get_computed_blocks(b)
    assert hit == 8 and [x.ref_cnt for x in blocks.blocks[0]] == [1, 1], "lookup leaves ref counts alone"


def test_item5_capacity_counts_evictable_hits(target):
    """5 usable blocks; 2 cached free blocks hit; 2 more blocks needed + 2 touched = 4 <= 5 fits, but with
    a 2-block request running (3 free left) the same allocation does not."""
    m = target.make_manager([GroupDesc("full", 4)], 6, 100)
    a = target.make_request("a", list(range(8)), 4)
    m.allocate_slots(a, 8)
    m.free(a)
    o = target.make_request("o", list(range(100, 108)), 4)
    m.allocate_slots(o, 8)
    b = target.make_request("b", list(range(16)), 4)
    blocks, hit, _ = m.get_computed_blocks(b)
    assert hit == 8, "prefix of 2 blocks hits"
    assert m.allocate_slots(b, 8, hit, blocks) is None, "2 new + 2 evictable hits = 4 > 3 free"


def test_item6_window_hit_lists_keep_positions(target):
    m = target.make_manager(HYBRID, 32, 100)
    a = target.make_request("a", list(range(24)), 4)
    m.allocate_slots(a, 24)
    m.free(a)
    b = target.make_request("b", list(range(25)), 4)
    blocks, hit, _ = m.get_computed_blocks(b)
    ids = [list(g) for g in blocks.get_block_ids()]
    assert hit == 24 and len(ids[1]) == 6 and ids[1][:5] == [0] * 5, \
        f"SWA hit list keeps its full positional length with null padding, got {ids[1]}"


def test_item8_hits_are_multiples_of_lcm(target):
    m = target.make_manager([GroupDesc("full", 4), GroupDesc("sliding_window", 8, sliding_window=8)], 64, 100)
    a = target.make_request("a", list(range(30)), 4)
    m.allocate_slots(a, 30)
    m.free(a)
    b = target.make_request("b", list(range(30)), 4)
    _, hit, _ = m.get_computed_blocks(b)
    assert hit % 8 == 0 and hit == 24, f"hit must be a multiple of lcm(4, 8) = 8 (24 here), got {hit}"


def test_item10_last_prompt_token_is_never_a_hit(target):
    m = target.make_manager([GroupDesc("full", 4)], 10, 100)
    a = target.make_request("a", list(range(8)), 4)
    m.allocate_slots(a, 8)
    b = target.make_request("b", list(range(8)), 4)
    _, hit, _ = m.get_computed_blocks(b)
    assert hit == 4, "an identical 8-token prompt hits only 4 tokens (cap num_tokens - 1 = 7, aligned down)"
