"""The reference `BlockPool.free_blocks` leaves the same pool behind whichever of its paths a call takes.

`free_blocks` releases a list of this pool's blocks, each held once and bound for the head, in a loop that
only checks and counts down, and hands the rest of any other list (from the first block that needs more:
hashed, shared, foreign, the null block, one already free or listed twice) to a full pass, with the blocks
released before it. The expected pools come from a model written here from vLLM's rules, not from the pool:
each listed block drops one reference (the null block and another pool's blocks are skipped here); one that
reaches 0 joins the queue: at the head, in the given order, when it is unhashed, caching is off or the call
has `evict_first`; at the tail, in the given order, otherwise. A block whose count would go below 0 raises
`AssertionError` (the reference's own guard: vLLM does not check), and the blocks released before it are
on the queue.
"""

import hashlib
import random

import pytest

from reference_impl.kv_cache.block_pool import BlockPool

NUM_BLOCKS = 24


class _Req:
    """What `cache_full_blocks` reads of a request."""

    def __init__(self, tag: str, n: int):
        self.request_id = tag
        self.block_hashes = [hashlib.sha256(f"{tag}:{i}".encode()).digest() for i in range(n)]


def _queue(pool: BlockPool) -> list[int]:
    return [b.block_id for b in pool.free_block_queue.get_all_free_blocks()]


def _model_free(queue: list[int], refs: dict[int, int], hashed: set[int], listed: list[int], caching: bool,
                evict_first: bool) -> tuple[list[int], dict[int, int], bool]:
    """The queue and counts after freeing `listed` (ids; 0 the null block, -1 another pool's block) and
    whether the call raises."""
    refs = dict(refs)
    head, tail = [], []
    raised = False
    for block_id in listed:
        if block_id <= 0:
            continue
        if refs[block_id] < 1:
            raised = True
            break
        refs[block_id] -= 1
        if refs[block_id] == 0:
            (tail if caching and not evict_first and block_id in hashed else head).append(block_id)
    return head + queue + tail, refs, raised


def _scenario(seed: int):
    """A pool in a random state (held blocks, some hashed, some shared, free ones at both ends) and a list to
    free that mixes every kind of block `free_blocks` meets."""
    rng = random.Random(seed)
    caching = rng.random() < 0.8
    pool = BlockPool(NUM_BLOCKS, enable_caching=caching, hash_block_size=4)
    other = BlockPool(4, enable_caching=caching, hash_block_size=4)
    held = pool.get_new_blocks(rng.randrange(8, NUM_BLOCKS - 1))
    # Keys on a pool with caching off too: no engine puts them there, but the rules still say where such a
    # block goes (the head).
    to_cache = [b for b in held if rng.random() < 0.4]
    if to_cache:
        pool.cache_full_blocks(_Req(f"s{seed}", len(to_cache)), to_cache, 0, len(to_cache), 4, 0)
    pool.touch([b for b in held if rng.random() < 0.2])  # shared: ref_cnt 2
    # Some held blocks freed now (to the head or the tail), so the list can name blocks already free.
    freed = [b for b in held if rng.random() < 0.25 and b.ref_cnt == 1]
    pool.free_blocks(freed)
    foreign = other.get_new_blocks(1)[0]
    # Mostly blocks freed once: long runs of the loop's usual list, then one block that needs more.
    listed = [b for b in held if b.ref_cnt >= 1 and rng.random() < 0.7]
    rng.shuffle(listed)
    for _ in range(rng.randrange(3)):
        kind = rng.randrange(5)
        if kind == 3 and listed:  # a block listed twice
            first = rng.randrange(len(listed))
            listed.insert(rng.randrange(first + 1, len(listed) + 1), listed[first])
        elif kind == 4 and freed:  # a block already free
            listed.insert(rng.randrange(len(listed) + 1), rng.choice(freed))
        else:  # the null block, another pool's block, any held block (shared ones among them)
            listed.insert(rng.randrange(len(listed) + 1), [pool.null_block, foreign, rng.choice(held)][kind % 3])
    return pool, foreign, listed, caching, rng.random() < 0.2, rng.choice([list, tuple, iter])


@pytest.mark.parametrize("seed", range(300))
def test_free_blocks_matches_the_model(seed):
    pool, foreign, listed, caching, evict_first, shape = _scenario(seed)
    ids = [0 if b.is_null else -1 if b is foreign else b.block_id for b in listed]
    hashed = {b.block_id for b in pool.blocks if b.block_hash is not None}
    refs = {b.block_id: b.ref_cnt for b in pool.blocks[1:]}
    want_queue, want_refs, want_raise = _model_free(_queue(pool), refs, hashed, ids, caching, evict_first)
    foreign_ref = foreign.ref_cnt
    where = f"seed {seed}: free_blocks({shape.__name__} of ids {ids}, evict_first={evict_first}, caching={caching})"
    if want_raise:
        with pytest.raises(AssertionError, match="would become negative"):
            pool.free_blocks(shape(listed), evict_first=evict_first)
    else:
        pool.free_blocks(shape(listed), evict_first=evict_first)
        assert foreign.ref_cnt == foreign_ref - ids.count(-1), f"{where}: another pool's block drops its references there"
    got_refs = {b.block_id: b.ref_cnt for b in pool.blocks[1:]}
    assert got_refs == want_refs, f"{where}: reference counts {got_refs}, expected {want_refs}"
    assert _queue(pool) == want_queue, f"{where}: free queue {_queue(pool)}, expected {want_queue}"
    assert pool.get_num_free_blocks() == len(want_queue), f"{where}: free count disagrees with the queue"
    keyed_on_front = [b.block_id for b in pool.free_block_queue.front if b.block_hash is not None]
    assert not caching or not keyed_on_front, \
        f"{where}: keyed blocks {keyed_on_front} sit on front, where handing out skips eviction"
    handed_out = pool.get_new_blocks(pool.get_num_free_blocks())
    assert [b.block_id for b in handed_out] == want_queue, f"{where}: the free queue is handed out head first"
    still_keyed = [b.block_id for b in handed_out if b.block_hash is not None]
    assert not caching or not still_keyed, f"{where}: blocks {still_keyed} were handed out with their prefix-cache keys"


def test_a_block_listed_twice_raises_after_releasing_the_blocks_before_it():
    pool = BlockPool(8, enable_caching=True, hash_block_size=4)
    a, b, c = pool.get_new_blocks(3)  # 1, 2, 3
    with pytest.raises(AssertionError, match="block 2 would become negative"):
        pool.free_blocks([c, b, a, b])
    assert [c.ref_cnt, b.ref_cnt, a.ref_cnt] == [0, 0, 0]
    assert _queue(pool)[:3] == [3, 2, 1], "the three blocks released before the second listing are at the head"
    assert pool.get_num_free_blocks() == 7


@pytest.mark.parametrize("hashed", [True, False], ids=["free-at-the-tail", "free-at-the-head"])
def test_a_block_already_free_raises_after_releasing_the_blocks_before_it(hashed):
    pool = BlockPool(8, enable_caching=True, hash_block_size=4)
    a, b, c = pool.get_new_blocks(3)  # 1, 2, 3
    if hashed:
        pool.cache_full_blocks(_Req("c", 1), [c], 0, 1, 4, 0)
    pool.free_blocks([c])  # block 3: linked at the tail when hashed, on the head's stack otherwise
    with pytest.raises(AssertionError, match="block 3 would become negative"):
        pool.free_blocks([b, a, c])
    assert [b.ref_cnt, a.ref_cnt, c.ref_cnt] == [0, 0, 0]
    assert _queue(pool) == ([2, 1, 4, 5, 6, 7, 3] if hashed else [2, 1, 3, 4, 5, 6, 7]), \
        "the two blocks released before the free one are at the head, the free one where it was"
    assert pool.get_num_free_blocks() == 7
