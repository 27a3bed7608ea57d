"""Spec section 4/5: behaviours of vLLM 0.33's v1/core that the reference once lacked (issue 10).

Each scenario's expected block ids and hit lengths were worked out by hand from vLLM 0.33's rules (written
next to each table) and then confirmed on both targets; they are data, not computed by the allocator.
Run with `--kv-allocator vllm` they gate a vLLM change that breaks EAGLE drops, the Mamba null gap, the
Mamba null pads, `free()` of an empty request, `reserved_blocks` under `full_sequence_must_fit` or the
DCP Mamba block size.
"""

import pytest

from harness.targets.allocator.target import GroupDesc, target_module
from suites.allocator.conftest import require
from suites.allocator.helpers import new_step, prefill, queue_ids, refused, tables

SECTION = "4"


def _ids(new_blocks) -> list[list[int]]:
    return [list(g) for g in new_blocks.get_block_ids()]


# ------------------------------------------------------------------------------------------- freeing
def test_free_of_request_without_blocks_is_a_no_op(target):
    """vLLM's scheduler frees requests aborted while waiting: no blocks, nothing happens, no error."""
    m = target.make_manager([GroupDesc("full", 4)], 8, 100)
    held = target.make_request("held", list(range(5)), 4)
    assert m.allocate_slots(held, 5) is not None
    before = queue_ids(m.block_pool)
    m.free(target.make_request("never-allocated", [1, 2, 3], 4))
    assert queue_ids(m.block_pool) == before, "freeing a request that holds nothing leaves the free queue as it was"
    m.free(held)
    after_first = queue_ids(m.block_pool)
    m.free(held)
    assert queue_ids(m.block_pool) == after_first, "a second free of the same request is a no-op"


# ------------------------------------------------------------------------------------------------ Mamba
# Caching off (freed blocks go to the head of the queue, so reuse is visible); full bs 4 + Mamba bs 4,
# pool of 32 (block 0 null). Per step: (tokens scheduled, new ids per group, Mamba table after the step).
# Mamba ("align") keeps one running state block: positions before it are null, its new entries include
# those null pads; the previous state is freed once the next step starts past it, even across nulls.
MAMBA_STEPS = [
    (12, [[1, 2, 3], [0, 0, 4]], [0, 0, 4]),
    (12, [[5, 6, 7], [0, 0, 8]], [0, 0, 4, 0, 0, 8]),
    # 24 computed: the state at position 2 (block 4) is freed past the null gap at 3..4 and reused at once.
    (1, [[4], [9]], [0, 0, 0, 0, 0, 8, 9]),
    # 25 computed: the state at position 5 (block 8) is freed; no new block is needed.
    (1, [[], []], [0, 0, 0, 0, 0, 0, 9]),
]


@pytest.mark.needs('unhashed_lifo')
def test_mamba_null_pads_and_null_gap_freeing(target):
    m = target.make_manager([GroupDesc("full", 4), GroupDesc("mamba", 4)], 32, 200, enable_caching=False)
    req = target.make_request("m", list(range(40)), 4)
    for step, (n, expected_new, expected_mamba) in enumerate(MAMBA_STEPS):
        out = m.allocate_slots(req, n)
        assert out is not None, f"step {step}: allocation of {n} tokens must fit a pool of 32"
        assert _ids(out) == expected_new, f"step {step}: new ids per group must be {expected_new} (null pads included)"
        assert list(m.get_block_ids("m")[1]) == expected_mamba, f"step {step}: Mamba table must be {expected_mamba}"
        req.num_computed_tokens += n
    assert queue_ids(m.block_pool)[0] == 8, "the freed Mamba state block 8 is reused first"


# Full bs 4 + Mamba bs 4 (hash block 4: whole-block hits only), pool of 24. The owner computes 8 of its 9
# prompt tokens in this step: full [1, 2], Mamba [null, 3], and both are cached at 8 as the step is scheduled.
# The Mamba state at 8 is written by this step's forward pass, so a sibling sharing those 8 tokens, looked up
# in the same step, sees the hit (8 tokens: full [1, 2], Mamba [null, 3]) but must not be scheduled on it: its
# first token would read a state nobody wrote yet. The next step serves it (full 4, Mamba 5 from the head).
@pytest.mark.needs("mamba_align")
def test_mamba_state_cached_this_step_is_not_served_before_the_next(target):
    m = target.make_manager([GroupDesc("full", 4), GroupDesc("mamba", 4)], 24, 256)
    prompt = list(range(1, 10))
    owner = target.make_request("owner", prompt, 4)
    assert _ids(m.allocate_slots(owner, 8)) == [[1, 2], [0, 3]], "owner: full [1, 2], Mamba [null, 3]"
    sibling = target.make_request("sibling", prompt[:8] + [99, 98], 4)
    blocks, hit, _ = m.get_computed_blocks(sibling)
    assert (hit, _ids(blocks)) == (8, [[1, 2], [0, 3]]), "the lookup already sees the blocks cached at 8"
    assert m.allocate_slots(sibling, 2, hit, blocks) is None, \
        "same step: the Mamba state at 8 is not written yet, so the sibling waits for the next step"
    new_step(target, m)
    assert _ids(m.allocate_slots(sibling, 2, hit, blocks)) == [[4], [5]], "next step: the hit is served"


def test_mamba_block_size_not_scaled_by_dcp(target):
    """Decode context parallelism spreads attention blocks over the ranks (block span x world size); a
    Mamba state is replicated, so its block size stays the spec's."""
    m = target.make_manager([GroupDesc("full", 4), GroupDesc("mamba", 8)], 32, 200, dcp_world_size=2)
    spans = [mgr.block_size for mgr in m.coordinator.single_type_managers]
    assert spans == [8, 8], f"DCP 2: full attention spans 4 x 2 = 8 tokens, Mamba stays 8; got {spans}"


def test_coordinator_lists_each_groups_block_span(target):
    """`group_block_sizes`: the span one block of each group covers as allocated, in group order (DCP 2:
    full attention of block 2 spans 4 tokens; Mamba of block 8 stays 8)."""
    require(target, "group_block_sizes")
    m = target.make_manager([GroupDesc("full", 2), GroupDesc("mamba", 8)], 32, 200, dcp_world_size=2)
    assert tuple(m.coordinator.group_block_sizes) == (4, 8)


# ------------------------------------------------------------------------------------------------ EAGLE
def _hit_after_identical_prompt(target, groups, prompt_len, use_eagle):
    m = target.make_manager(groups, 64, 200, use_eagle=use_eagle)
    prompt = list(range(1, prompt_len + 1))
    first = target.make_request("first", prompt, 4)
    prefill(m, first, use_hits=False)
    m.free(first)
    blocks, hit, _ = m.get_computed_blocks(target.make_request("second", prompt, 4))
    return blocks, hit


# (groups, prompt tokens, hit without EAGLE, hit with EAGLE). The lookup may reach prompt_len - 1 tokens;
# EAGLE then drops one block so the drafter recomputes it. Hybrid full + SWA (bs 4, window 8): both
# groups look one block past the candidate and drop it, landing on 28 (a SWA hit needs 2 + 1 blocks).
# Full bs 8 + SWA bs 4 (hits align at 8): full drops its last block (32 -> 24); SWA looks up to 28, finds
# 3 contiguous blocks ending at block 6, drops one and stays aligned at 24 (6 x 4), which full then keeps.
EAGLE_CASES = [
    ("full", [GroupDesc("full", 4)], 17, 16, 12),
    ("full-mid-block", [GroupDesc("full", 4)], 19, 16, 12),
    ("full+swa", [GroupDesc("full", 4), GroupDesc("sliding_window", 4, sliding_window=8)], 33, 32, 28),
    ("full8+swa4", [GroupDesc("full", 8), GroupDesc("sliding_window", 4, sliding_window=8)], 33, 32, 24),
]


@pytest.mark.parametrize("name,groups,prompt_len,hit_plain,hit_eagle", EAGLE_CASES, ids=[c[0] for c in EAGLE_CASES])
def test_eagle_drops_last_hit_block(target, name, groups, prompt_len, hit_plain, hit_eagle):
    _, hit = _hit_after_identical_prompt(target, groups, prompt_len, use_eagle=False)
    assert hit == hit_plain, f"{name}: without EAGLE the hit is {hit_plain} tokens, got {hit}"
    blocks, hit = _hit_after_identical_prompt(target, groups, prompt_len, use_eagle=True)
    assert hit == hit_eagle, f"{name}: EAGLE drops the last hit block: {hit_eagle} tokens, got {hit}"
    assert len(blocks.get_block_ids()[0]) == hit_eagle // groups[0].block_size, \
        "full attention keeps exactly the blocks of the hit"


# ------------------------------------------------------------------------------------- admission checks
# Full bs 4, pool of 11 (10 usable), a 40-token prompt (10 blocks). full_sequence_must_fit checks the whole
# sequence against the free pool; reserved_blocks only holds back blocks from the current chunk (8 tokens).
RESERVED_CASES = [
    (2, [[1, 2]]),   # whole 10 <= 10 free; chunk 2 <= 10 - 2
    (8, [[1, 2]]),   # chunk 2 <= 10 - 8
    (9, None),       # chunk 2 > 10 - 9: refused
]


@pytest.mark.parametrize("reserved,expected", RESERVED_CASES, ids=[f"reserved{r}" for r, _ in RESERVED_CASES])
@pytest.mark.needs('reserved_blocks')
def test_reserved_blocks_apply_to_the_chunk_only(target, reserved, expected):
    m = target.make_manager([GroupDesc("full", 4)], 11, 100, enable_caching=False)
    req = target.make_request("r", list(range(40)), 4)
    out = m.allocate_slots(req, 8, full_sequence_must_fit=True, reserved_blocks=reserved)
    got = None if out is None else _ids(out)
    assert got == expected, f"reserved_blocks={reserved}: expected {expected}, got {got}"


# Sliding window 8, bs 4, one budget of 8 tokens a step (`max_in_flight_tokens`), pool of 16 (15 usable),
# caching off. Request A (40-token prompt) is prefilled in chunks of 8, 8, 8 and 4 (other requests share the
# budget). After n computed tokens, n - 7 tokens are outside the window: (n - 7) // 4 whole blocks are null.
#   chunk to 8: 2 real blocks; to 16: 4; to 24: blocks 0, 1 freed, 4 real; to 28: blocks 2, 3 freed,
#   7 table entries, 3 real (positions 4..6); 12 free.
# B then takes the 12 free blocks (48 tokens). A's next chunk of 8 (28 -> 36) frees position 4 (21 tokens
# skipped: 5 whole blocks) and needs positions 7 and 8: 2 blocks, 1 free. The allocation must be refused
# (None: the scheduler waits or preempts), never a crash; once B is freed it succeeds: 4 real blocks.
SWA_BUDGET_CHUNKS = [(8, 2), (8, 4), (8, 4), (4, 3)]


def _real_blocks(manager, request) -> int:
    return sum(block_id != 0 for block_id in tables(manager, request)[0])


def test_sliding_window_chunk_the_pool_cannot_hold_is_refused(target):
    m = target.make_manager([GroupDesc("sliding_window", 4, sliding_window=8)], 16, 100, enable_caching=False,
                            max_in_flight_tokens=8)
    a = target.make_request("a", list(range(40)), 4)
    for n, real in SWA_BUDGET_CHUNKS:
        assert m.allocate_slots(a, n) is not None, f"chunk of {n} at {a.num_computed_tokens} fits"
        a.num_computed_tokens += n
        assert _real_blocks(m, a) == real, f"after {a.num_computed_tokens} computed: {real} real blocks"
    assert m.block_pool.get_num_free_blocks() == 12
    b = target.make_request("b", list(range(48)), 4)
    assert m.allocate_slots(b, 48) is not None and m.block_pool.get_num_free_blocks() == 0
    assert m.allocate_slots(a, 8) is None, "2 blocks needed, 1 free (position 4 left the window): refused"
    assert tables(m, a)[0][:5] == [0] * 5 and m.block_pool.get_num_free_blocks() == 1, \
        "the refused step still frees what left the window, and allocates nothing"
    m.free(b)
    assert m.allocate_slots(a, 8) is not None
    assert _real_blocks(m, a) == 4, "positions 5..8 hold the window and the chunk"


# ------------------------------------------------------------------------------------------- requests
def test_request_carries_connector_params(target):
    """Connectors and HiSparse's admission read and set a connector's `kv_transfer_params` on vLLM's
    request: None unless the sampling parameters carry some; P/D sets `do_remote_prefill`."""
    req = target.make_request("r", list(range(5)), 4)
    assert req.kv_transfer_params is None
    req.kv_transfer_params = {"do_remote_prefill": True}
    assert req.kv_transfer_params == {"do_remote_prefill": True}


# ------------------------------------------------------------------------------------------ KV events
# Sliding window 4, bs 4, pool of 16, events on. The 8-token prompt is stored in one BlockStored (two
# hashes, no parent, tokens 1..8). Decoding tokens 9..12 one at a time nulls the blocks that leave the
# window (after 11 computed, 8 tokens are skipped: both prompt blocks); the step that fills block 2 stores
# it with tokens 9..12 and, as parent, the hash of block 1 (the previous block of the token chain), whether
# or not block 1 is still in the table. A consumer (a KV-aware router) chains stored blocks by that parent.
def test_sliding_window_decode_stores_blocks_chained_to_their_parent(target):
    m = target.make_manager([GroupDesc("sliding_window", 4, sliding_window=4)], 16, 100, enable_kv_cache_events=True)
    req = target.make_request("d", list(range(1, 9)), 4)
    prefill(m, req, use_hits=False)
    for token in range(9, 13):
        req.append_output_token_ids(token)
        assert m.allocate_slots(req, 1) is not None, f"decoding token {token} fits a pool of 16"
        req.num_computed_tokens += 1
    assert tables(m, req) == [[0, 0, 3]], "both prompt blocks left the window; block 3 holds tokens 9..12"
    stored = [e for e in m.take_events() if type(e).__name__ == "BlockStored"]
    assert [(len(e.block_hashes), list(e.token_ids)) for e in stored] == [(2, list(range(1, 9))),
                                                                         (1, [9, 10, 11, 12])]
    assert stored[0].parent_block_hash is None, "the prompt's first block has no parent"
    assert stored[1].parent_block_hash == stored[0].block_hashes[-1], "block 2's parent is block 1's hash"


# ----------------------------------------------------------------------- encoder-decoder and zeroing
# vLLM 0.33's own tests of the same rules (`test_scheduler.py::test_cross_attn_*`,
# `test_prefix_replay.py::test_kv_load_zeroing_respects_loaded_groups`) run on the reference in the
# upstream job (docs/upstream-tests.md).
@pytest.mark.needs("cross_attention")
def test_cross_attention_table_is_sized_by_the_encoder_input(target):
    """Self attention (bs 16) + cross attention (bs 16): a 100-token decoder prompt over a 200-token
    encoder input takes ceil(100/16) = 7 self-attention blocks (ids 1-7) and ceil(200/16) = 13
    cross-attention blocks (ids 8-20), whatever the decoder's length; a decode step adds none to the
    cross table. Cross attention is never prefix-cached."""
    layer = dict(num_kv_heads=1, head_size=1, dtype="float32")
    manager = target.make_manager([GroupDesc("full", 16, **layer), GroupDesc("cross_attention", 16, **layer)], 64,
                                  1024, enable_caching=False)
    cross_manager = target_module(target, "v1.core.single_type_kv_cache_manager").CrossAttentionManager
    assert isinstance(manager.coordinator.single_type_managers[1], cross_manager)
    req = target.make_request("enc-dec", list(range(100)), 16)
    new = manager.allocate_slots(req, 100, num_encoder_tokens=200)
    assert _ids(new) == [list(range(1, 8)), list(range(8, 21))]
    req.num_computed_tokens = 100
    req.append_output_token_ids(7)
    assert _ids(manager.allocate_slots(req, 1)) == [[], []], "token 101 fits block 7"
    with pytest.raises(NotImplementedError):
        cross_manager.find_longest_cache_hit([], 16, [1], manager.block_pool,
                                             manager.kv_cache_config.kv_cache_groups[1].kv_cache_spec, False, 16)


@pytest.mark.needs("kv_cache_zeroing")
def test_new_attention_blocks_are_recorded_for_zeroing(target):
    """A full-attention + Mamba model needs zeroing (a Mamba state is read before it is fully written):
    the worker zeroes the attention group's new blocks, each step's ids drained once. A 40-token prompt
    (bs 16) takes attention blocks 1-3; the Mamba state blocks are not attention and not zeroed.
    Re-recording from token 16 (a failed load) yields blocks 2 and 3 again; an unaligned start is
    refused."""
    m = target.make_manager([GroupDesc("full", 16), GroupDesc("mamba", 16)], 64, 1000)
    assert m.kv_cache_config.needs_kv_cache_zeroing
    req = target.make_request("z", list(range(40)), 16)
    new = m.allocate_slots(req, 40)
    assert new.get_block_ids()[0] == [1, 2, 3]
    assert m.take_new_block_ids() == [1, 2, 3]
    assert m.take_new_block_ids() == [], "drained"
    m.record_blocks_for_zeroing("z", 16)
    assert m.take_new_block_ids() == [2, 3]
    with refused(target, strict_match="start_token 8 is not a multiple"):
        m.record_blocks_for_zeroing("z", 8)
    plain = target.make_manager([GroupDesc("full", 16)], 64, 1000)
    plain.allocate_slots(target.make_request("p", list(range(40)), 16), 40)
    assert plain.take_new_block_ids() == [], "a uniform-precision attention model zeroes nothing"
