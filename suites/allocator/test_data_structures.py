"""Spec section 2: blocks, the null block, the free queue, block hashes and the prefix-cache map."""

import os
import pickle
import hashlib

import pytest

from harness.targets.allocator.target import GroupDesc
from suites.allocator.helpers import ids, queue_ids

SECTION = "2"


def oracle_sha256(obj) -> bytes:
    """Independent oracle: SHA-256 of the highest-protocol pickle."""
    return hashlib.sha256(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)).digest()


def oracle_none_hash() -> bytes:
    """NONE_HASH computed independently: SHA-256 of PYTHONHASHSEED or the fixed seed string."""
    return oracle_sha256(os.environ.get("PYTHONHASHSEED", "vllm-none-hash"))


def test_null_block_is_block_0_and_never_handed_out(target):
    pool = target.make_block_pool(6, enable_caching=True, hash_block_size=4)
    assert pool.null_block.block_id == 0 and pool.null_block.is_null, "block 0 must be the null block"
    assert queue_ids(pool) == [1, 2, 3, 4, 5], "initial free queue is ids ascending without the null block"
    got = ids(pool.get_new_blocks(5))
    assert got == [1, 2, 3, 4, 5], f"all usable blocks are handed out head first, never 0; got {got}"
    assert pool.get_num_free_blocks() == 0, "the null block is not counted as free"


def test_get_new_blocks_beyond_free_raises_and_changes_nothing(target):
    pool = target.make_block_pool(4, enable_caching=False, hash_block_size=4)
    with pytest.raises(ValueError, match="Cannot get 4 free blocks from the pool"):
        pool.get_new_blocks(4)
    assert queue_ids(pool) == [1, 2, 3], "a refused get_new_blocks must leave the queue untouched"


@pytest.mark.needs('unhashed_lifo')
def test_unhashed_frees_go_to_head_in_given_order(target):
    pool = target.make_block_pool(8, enable_caching=True, hash_block_size=4)
    blocks = pool.get_new_blocks(3)  # 1, 2, 3
    pool.free_blocks(list(reversed(blocks)))  # tail first: 3, 2, 1
    assert queue_ids(pool) == [3, 2, 1, 4, 5, 6, 7], "unhashed blocks are prepended: 3 becomes the head"
    assert all(b.ref_cnt == 0 for b in blocks), "freed blocks drop to ref_cnt 0"


def _cache(target, pool, blocks, tag, group=0):
    class Req:
        request_id = f"r{tag}"
        block_hashes = [oracle_sha256(("k", tag, i)) for i in range(len(blocks))]
    pool.cache_full_blocks(Req, blocks, 0, len(blocks), pool.hash_block_size, group)
    return Req.block_hashes


@pytest.mark.needs('unhashed_lifo')
def test_hashed_frees_go_to_tail_and_hit_unlinks_from_middle(target):
    pool = target.make_block_pool(8, enable_caching=True, hash_block_size=4)
    cached = pool.get_new_blocks(2)  # 1, 2
    plain = pool.get_new_blocks(1)  # 3
    hashes = _cache(target, pool, cached, "a")
    pool.free_blocks(list(reversed(cached)) + plain)
    assert queue_ids(pool) == [3, 4, 5, 6, 7, 2, 1], \
        "unhashed 3 goes to the head; hashed 2, 1 go to the tail in the given order (tail block first)"
    hit = pool.get_cached_block(hashes[1], [0])
    assert ids(hit) == [2], "a free cached block is still found in the prefix cache"
    pool.touch(hit)
    assert queue_ids(pool) == [3, 4, 5, 6, 7, 1], "touching a free cached block unlinks it from the middle"
    assert hit[0].ref_cnt == 1, "touch takes one reference"


def test_lazy_eviction_when_reused(target):
    pool = target.make_block_pool(3, enable_caching=True, hash_block_size=4)
    blocks = pool.get_new_blocks(2)
    hashes = _cache(target, pool, blocks, "b")
    pool.free_blocks(list(reversed(blocks)))
    assert len(target.cache_entries(pool)) == 2, "freed cached blocks stay in the map (lazy eviction)"
    got = pool.get_new_blocks(1)
    assert ids(got) == [2], "the head (the tail block of the freed request) is reused first"
    assert target.block_key(got[0]) is None, "a reused block loses its key"
    assert pool.get_cached_block(hashes[1], [0]) is None, "its map entry is gone"
    assert ids(pool.get_cached_block(hashes[0], [0])) == [1], "the other cached block is untouched"


def test_usage_excludes_null_block(target):
    pool = target.make_block_pool(5, enable_caching=False, hash_block_size=4)
    pool.get_new_blocks(1)
    assert pool.get_usage() == pytest.approx(0.25), "usage = 1 - free/(num_blocks-1) = 1 - 3/4"


def test_reset_prefix_cache_refused_while_in_use(target):
    pool = target.make_block_pool(4, enable_caching=True, hash_block_size=4)
    blocks = pool.get_new_blocks(2)
    _cache(target, pool, blocks, "c")
    assert pool.reset_prefix_cache() is False, "reset must be refused while a block is in use"
    assert len(target.cache_entries(pool)) == 2, "a refused reset keeps the map"
    pool.free_blocks(blocks)
    assert pool.reset_prefix_cache() is True, "reset succeeds once only the null block is in use"
    assert target.cache_entries(pool) == {}, "reset clears the map"
    assert all(target.block_key(b) is None for b in blocks), "reset clears every block's key"


def test_cache_key_is_hash_plus_group_id_big_endian(target):
    pool = target.make_block_pool(4, enable_caching=True, hash_block_size=4)
    blocks = pool.get_new_blocks(1)

    class Req:
        request_id = "k"
        block_hashes = [b"abc"]
    pool.cache_full_blocks(Req, blocks, 0, 1, 4, 258)
    assert list(target.cache_entries(pool)) == [bytes.fromhex("61626300000102")], \
        "key = hash bytes + group id as 4 bytes big-endian (b'abc', 258 -> 616263 00000102)"


def test_duplicate_keys_keep_both_blocks(target):
    pool = target.make_block_pool(4, enable_caching=True, hash_block_size=4)
    a, b = pool.get_new_blocks(1), pool.get_new_blocks(1)
    _cache(target, pool, a, "same")
    _cache(target, pool, b, "same")
    entries = target.cache_entries(pool)
    assert list(entries.values()) == [[1, 2]], "allocation never de-duplicates: both blocks sit under one key"
    assert ids(pool.get_cached_block(next(iter(entries))[:-4], [0])) == [1], "lookup returns the first inserted"


def test_reuse_evicts_each_key_while_a_shared_key_stays_on_its_other_block(target):
    pool = target.make_block_pool(6, enable_caching=True, hash_block_size=4)
    shared, other = pool.get_new_blocks(1), pool.get_new_blocks(1)  # 1, 2
    keys_shared = _cache(target, pool, shared, "same")
    keys_other = _cache(target, pool, other, "other")
    twin = pool.get_new_blocks(1)  # 3, held: the second block under the shared key
    _cache(target, pool, twin, "same")
    pool.free_blocks(other + shared)  # both cached: to the tail, 2 then 1
    got = pool.get_new_blocks(5 - 1)  # 4, 5 (never used), then 2 and 1, evicted as they are handed out
    assert ids(got) == [4, 5, 2, 1], "unused blocks first, then the cached ones in the order they were freed"
    assert all(target.block_key(b) is None for b in got), "every block handed out lost its key"
    assert pool.get_cached_block(keys_other[0], [0]) is None, "a key with one block leaves the map with it"
    assert ids(pool.get_cached_block(keys_shared[0], [0])) == [3], "a shared key stays, on the block still holding it"


@pytest.mark.needs('default_none_hash_seed')
def test_hash_chain_matches_independent_oracle(target):
    tokens = list(range(100, 155))  # 55 tokens, hash block 16 -> 3 full blocks
    req = target.make_request("h", tokens, 16)
    assert len(req.block_hashes) == 3, "only full blocks are hashed: 55 tokens / 16 -> 3 hashes"
    parent = oracle_none_hash()
    for i in range(3):
        parent = oracle_sha256((parent, tuple(tokens[i * 16:(i + 1) * 16]), None))
        assert req.block_hashes[i] == parent, f"hash {i} must be H((parent, tokens, None)) chained from NONE_HASH"
    req.append_output_token_ids(list(range(9)))
    assert len(req.block_hashes) == 4, "appending 9 tokens completes a 4th block, hashed eagerly"


@pytest.mark.needs('default_none_hash_seed', 'tagged_extra_keys')
def test_extra_keys_lora_every_block_salt_first_block(target):
    tokens = list(range(32))
    req = target.make_request("x", tokens, 16, lora=("ad", 1, "/p"), cache_salt="s")
    h0 = oracle_sha256((oracle_none_hash(), tuple(tokens[:16]), (("lora", "ad", "/p"), ("cache_salt", "s"))))
    h1 = oracle_sha256((h0, tuple(tokens[16:]), (("lora", "ad", "/p"),)))
    assert req.block_hashes == [h0, h1], "extra keys are tagged tuples; the salt only keys the block at token 0"
    plain = target.make_request("y", tokens, 16)
    assert plain.block_hashes[0] != h0, "LoRA and salt change the key"


@pytest.mark.needs('coarse_hash_last_fine')
def test_coarse_block_uses_last_fine_hash(target):
    manager = target.make_manager([GroupDesc("full", 4), GroupDesc("full", 8)], 32, 1000,
                                  hash_block_size=4, scheduler_block_size=8)
    req = target.make_request("c", list(range(17)), 4)
    assert len(req.block_hashes) == 4, "17 tokens at hash block 4 -> 4 fine hashes"
    manager.allocate_slots(req, 17)
    entries = target.cache_entries(manager.block_pool)
    fine = req.block_hashes
    group1 = sorted(k[:-4] for k in entries if k[-4:] == (1).to_bytes(4, "big"))
    assert group1 == sorted([fine[1], fine[3]]), "coarse hash j = fine hash (j+1)*k-1: [A,B,C,D] k=2 -> [B,D]"


@pytest.mark.needs('unpin_blocks')
def test_unpinned_blocks_count_as_free_and_report_their_reuse(target):
    """`unpin_blocks` (vLLM 0.33, HiSparse residency): the block loses a reference but stays readable; at
    ref_cnt 0 it joins the tail of the free queue (reused last), and the callback fires once, when
    `get_new_blocks` hands it out. Pool of 8: blocks 1-3 taken, queue 4..7; unpinning 2 -> queue 4..7, 2."""
    pool = target.make_block_pool(8, enable_caching=True, hash_block_size=4)
    blocks = pool.get_new_blocks(3)  # 1, 2, 3
    reused = []
    pool.unpin_blocks([blocks[1]], reused.append)
    assert blocks[1].ref_cnt == 0 and pool.get_num_free_blocks() == 5, "an unpinned block counts as free"
    assert queue_ids(pool) == [4, 5, 6, 7, 2], "an unpinned block is reused last (queue tail)"
    assert ids(pool.get_new_blocks(4)) == [4, 5, 6, 7] and reused == [], "no callback before its reuse"
    assert ids(pool.get_new_blocks(1)) == [2]
    assert ids(reused) == [2], "the callback fires once, with the block, when the pool hands it out"
