"""Spec section 6: KVCacheBlocks and KVCacheManager API shapes, allocate_slots algorithm."""

import pytest

from harness.targets.allocator.target import GroupDesc
from suites.allocator.helpers import allocate, queue_ids, tables

SECTION = "6"


@pytest.mark.parametrize("new,lookahead,max_len,blocks", [(3, 2, 1000, 2), (3, 4, 1000, 2), (3, 6, 1000, 3),
                                                          (98, 8, 100, 25)])
def test_lookahead_slots(target, new, lookahead, max_len, blocks):
    """bs 4, empty request: blocks = cdiv(min(new + lookahead, max_model_len), 4)."""
    m = target.make_manager([GroupDesc("full", 4)], 64, max_len)
    req = target.make_request("l", list(range(new)), 4)
    out = m.allocate_slots(req, new, num_lookahead_tokens=lookahead)
    assert len(out.get_block_ids()[0]) == blocks, f"{new} new + {lookahead} lookahead -> {blocks} blocks"


@pytest.mark.needs('block_ids_by_group')
def test_get_block_ids_one_list_per_group(target):
    m = target.make_manager([GroupDesc("full", 4), GroupDesc("sliding_window", 4, sliding_window=4)], 16, 100)
    req = target.make_request("g", list(range(5)), 4)
    new = m.allocate_slots(req, 5)
    assert [list(g) for g in new.get_block_ids()] == [[1, 2], [3, 4]], "groups allocate in group order"
    assert [list(g) for g in m.get_block_ids("g")] == [[1, 2], [3, 4]], "get_block_ids: one list per group"
    assert [list(g) for g in new.get_block_ids(group_ids=(1,))] == [[3, 4]], "group_ids selects groups"
    assert m.empty_kv_cache_blocks.get_block_ids(allow_none=True) is None, "allow_none on all-empty -> None"
    assert [list(g) for g in (new + new).get_block_ids()] == [[1, 2, 1, 2], [3, 4, 3, 4]], "+ is group-wise"


def test_allocate_slots_rejects_nothing_to_do(target):
    m = target.make_manager([GroupDesc("full", 4)], 16, 100)
    req = target.make_request("z", list(range(5)), 4)
    with pytest.raises(ValueError, match="num_new_tokens must be greater than 0"):
        m.allocate_slots(req, 0)


def test_failed_allocation_returns_none_and_changes_nothing(target):
    """Pool of 7 usable blocks; a cached 16-token prefix (4 blocks, freed) is hit by a request needing
    4 + 3 more blocks than exist: None, and queue, ref counts and map are exactly as before."""
    m = target.make_manager([GroupDesc("full", 4)], 8, 1000)
    a = target.make_request("a", list(range(16)), 4)
    m.allocate_slots(a, 16)
    m.free(a)
    other = target.make_request("o", list(range(500, 508)), 4)
    m.allocate_slots(other, 8)  # holds 2 blocks: 5 free left, 4 of them cached
    pool = m.block_pool
    before = (queue_ids(pool), [b.ref_cnt for b in pool.blocks], target.cache_entries(pool))
    b = target.make_request("b", list(range(16)) + list(range(900, 916)), 4)
    hits, hit, _ = m.get_computed_blocks(b)
    assert hit == 16, "the 16-token prefix is a hit"
    assert m.allocate_slots(b, 16, hit, hits) is None, "16 more tokens need 4 new blocks + 4 touched > 5 free"
    after = (queue_ids(pool), [b.ref_cnt for b in pool.blocks], target.cache_entries(pool))
    assert after == before, "a failed allocation must not touch hits, ref counts, the queue or the map"


def test_external_computed_tokens_get_fresh_blocks(target):
    """A connector's tokens get fresh blocks the request alone holds, on every release: passed as
    num_external_computed_tokens, or (0.13, which lacks it) counted into num_new_tokens as its scheduler did."""
    m = target.make_manager([GroupDesc("full", 4)], 16, 100)
    req = target.make_request("e", list(range(13)), 4)
    assert allocate(target, m, req, 4, external=8) is not None
    assert tables(m, req) == [[1, 2, 3]], "8 external tokens take blocks 1, 2; 4 new tokens block 3"
    assert [m.block_pool.blocks[i].ref_cnt for i in (1, 2, 3)] == [1, 1, 1], "held by the request alone"


@pytest.mark.needs('external_computed_tokens')
def test_external_computed_tokens_are_not_returned_as_new(target):
    m = target.make_manager([GroupDesc("full", 4)], 16, 100)
    req = target.make_request("e", list(range(13)), 4)
    out = m.allocate_slots(req, 4, num_external_computed_tokens=8)
    assert out.get_block_ids()[0] == [3], "only the blocks for new tokens are returned as new"
