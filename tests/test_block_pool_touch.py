"""The reference `BlockPool.touch` takes free blocks out of the queue without relinking its `front` stack.

A prefix hit on a free block must cost what the touched blocks cost: a hit on a cached block freed to the tail
(linked) leaves the blocks freed to the head where they are, on `front`; a hit on a block that sits on `front`
takes just that block off it. The queue orders below are worked out by hand from vLLM's rules (unhashed and
`evict_first` frees go to the head in the given order, hashed frees to the tail; a touched free block leaves
the queue, the others keep their order); `suites/benchmarks` checks the same orders against vLLM itself.
"""

import hashlib

import pytest

from reference_impl.kv_cache.block_pool import BlockPool


class _Req:
    """What `cache_full_blocks` reads of a request."""

    def __init__(self, tag: str, n: int):
        self.request_id = tag
        self.block_hashes = [hashlib.sha256(f"{tag}:{i}".encode()).digest() for i in range(n)]


def _cache(pool: BlockPool, blocks, tag: str) -> list[bytes]:
    req = _Req(tag, len(blocks))
    pool.cache_full_blocks(req, blocks, 0, len(blocks), pool.hash_block_size, 0)
    return req.block_hashes


def _queue(pool: BlockPool) -> list[int]:
    return [b.block_id for b in pool.free_block_queue.get_all_free_blocks()]


def _front(pool: BlockPool) -> list[int]:
    """`front` from its top (the head of the queue) down."""
    return [b.block_id for b in reversed(pool.free_block_queue.front)]


def test_hit_on_a_tail_block_leaves_front_unlinked():
    pool = BlockPool(10, enable_caching=True, hash_block_size=4)
    cached = pool.get_new_blocks(2)  # 1, 2 (off the new pool's front)
    hashes = _cache(pool, cached, "a")
    pool.free_blocks(list(reversed(cached)))  # hashed: 2, 1 to the tail
    assert _queue(pool) == [3, 4, 5, 6, 7, 8, 9, 2, 1]
    pool.touch(pool.get_cached_block(hashes[0], [0]))  # block 1
    assert _queue(pool) == [3, 4, 5, 6, 7, 8, 9, 2], "the touched block leaves; the others keep their order"
    assert _front(pool) == [3, 4, 5, 6, 7, 8, 9], "the blocks at the head stay on front, not linked in"
    assert pool.get_num_free_blocks() == 8
    assert cached[0].ref_cnt == 1 and cached[0].prev_free_block is None and cached[0].next_free_block is None


def test_keyed_blocks_freed_to_the_head_are_linked_and_a_hit_unlinks_them():
    pool = BlockPool(10, enable_caching=True, hash_block_size=4)
    tail = pool.get_new_blocks(1)  # 1
    _cache(pool, tail, "t")
    pool.free_blocks(tail)  # hashed: to the tail (linked)
    held = pool.get_new_blocks(2)  # 2, 3
    hashes = _cache(pool, held, "h")
    pool.free_blocks(list(reversed(held)), evict_first=True)  # 3, 2 to the head, 3 the head
    assert _queue(pool) == [3, 2, 4, 5, 6, 7, 8, 9, 1]
    assert _front(pool) == [], "keyed blocks never sit on front: front is linked in and they are linked before it"
    pool.touch(pool.get_cached_block(hashes[0], [0]))  # block 2, linked between 3 and 4
    assert _queue(pool) == [3, 4, 5, 6, 7, 8, 9, 1]
    assert pool.get_num_free_blocks() == 8
    assert [b.block_id for b in pool.get_new_blocks(2)] == [3, 4], "the head is handed out first, as before"
    assert pool.get_cached_block(hashes[1], [0]) is None, "block 3's key was evicted as it was handed out"


def test_a_free_block_on_front_is_linked_in_before_it_takes_a_key():
    pool = BlockPool(10, enable_caching=True, hash_block_size=4)
    blocks = pool.get_new_blocks(2)  # 1, 2
    pool.free_blocks(list(reversed(blocks)))  # unhashed: 2, 1 to the head (front)
    assert _front(pool)[:2] == [2, 1]
    hashes = _cache(pool, [blocks[1]], "f")  # block 2, free, takes a key
    assert _front(pool) == [], "front was linked in first"
    assert _queue(pool) == [2, 1, 3, 4, 5, 6, 7, 8, 9], "in the same order"
    assert pool.get_cached_block(hashes[0], [0]) == [blocks[1]]
    again = pool.get_new_blocks(1)
    assert again == [blocks[1]] and again[0].block_hash is None, "handed out from the head, its key evicted"
    assert pool.get_cached_block(hashes[0], [0]) is None


def test_blocks_handed_out_past_front_carry_no_prev_link():
    # A linked block handed out and freed to the head must be found on front by a later hit.
    pool = BlockPool(6, enable_caching=True, hash_block_size=4)
    blocks = pool.get_new_blocks(5)  # 1..5, the whole pool
    hashes = _cache(pool, blocks, "a")
    pool.free_blocks(list(reversed(blocks)))  # hashed: 5, 4, 3, 2, 1 to the tail (linked)
    again = pool.get_new_blocks(3)  # 5, 4, 3 from the linked list (their keys evicted)
    assert [b.block_id for b in again] == [5, 4, 3]
    assert all(b.prev_free_block is None for b in again)
    pool.free_blocks(list(reversed(again)))  # unhashed now: 3, 4, 5 to the head, 3 the head
    assert _queue(pool) == [3, 4, 5, 2, 1]
    pool.touch(pool.get_cached_block(hashes[1], [0]))  # block 2, linked
    pool.touch([again[1]])  # block 4, on front
    assert _queue(pool) == [3, 5, 1]
    assert _front(pool) == [3, 5]


def test_remove_of_a_block_that_is_not_free_raises():
    pool = BlockPool(4, enable_caching=False, hash_block_size=4)
    block = pool.get_new_blocks(1)[0]
    with pytest.raises(RuntimeError, match="not free"):
        pool.free_block_queue.remove(block)
    assert _queue(pool) == [2, 3], "a refused remove changes nothing"


def test_a_free_block_on_front_is_linked_in_before_it_takes_a_partial_key():
    pool = BlockPool(10, enable_caching=True, hash_block_size=4)
    blocks = pool.get_new_blocks(2)  # 1, 2
    pool.free_blocks(list(reversed(blocks)))  # unhashed: 2, 1 to the head (front)
    key = pool.cache_partial_block(_Req("p", 1), blocks[1], 4, 0, 16)  # block 2, free, 4 of its 16 tokens
    assert _front(pool) == [], "front was linked in first"
    assert _queue(pool) == [2, 1, 3, 4, 5, 6, 7, 8, 9], "in the same order"
    again = pool.get_new_blocks(1)
    assert again == [blocks[1]] and again[0].block_hash is None, "handed out from the head, its key evicted"
    assert pool.cached_block_hash_to_block.get_one_block(key) is None
