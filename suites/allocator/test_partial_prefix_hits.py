"""Spec section 4: fine-grained partial prefix-cache hits (vLLM 0.33, full attention + Mamba "align").

When a Mamba "align" group's block is larger than the hash block (and every other cacheable group can look
hits up inside a block), hits land on any hash boundary instead of the scheduler block: a prompt's last
hash boundary is registered as a *partial entry* on the block that holds it, a later request hitting it
copies that block before writing into it (copy-on-write), the request that registered it moves the entry
to a private copy when it keeps running, and a state registered this step is not hit before the next.

Every expected id and length below was worked out by hand from those rules (the working is next to each
scenario) and then confirmed on both targets; they are data, not computed by the allocator. Run with
`--kv-allocator vllm` they gate a vLLM change that breaks partial hits.
"""

import pytest

from harness.targets.allocator.target import GroupDesc

SECTION = "4"
pytestmark = pytest.mark.needs('partial_prefix_hits')


def _ids(blocks) -> list[list[int]]:
    return [list(g) for g in blocks.get_block_ids()]


def _copies(manager) -> tuple[list[tuple[int, int]], list]:
    copies, retained = manager.take_kv_cache_block_copies()
    return [(c.src_block_id, c.dst_block_id) for c in copies], retained


# -------------------------------------------------------------------------- the 1249-token example
# Full attention bs 16 + Mamba bs 544, hash block 16 (the gcd), scheduler block 544 (the lcm); 200 blocks.
# Step 1 computes 1248 tokens: full attention takes blocks 1..78, Mamba its running state 79 at position
# 2 ([null, null, 79]). The prompt's last hash boundary, (1249 - 1) // 16 * 16 = 1248, is where the step
# ends, so state 79 is registered there (1248 % 544 = 160: a partial entry inside the block).
# Step 2 computes token 1249: full attention needs block 80; the owner keeps writing state 79, so the
# entry moves to a private copy 81 and the copy 79 -> 81 is queued. A resend of the prompt then hits 1248
# tokens (the lookup may reach 1248 = 1249 - 1): full blocks 1..78 and the copy 81 at Mamba position 2.
# Without partial hits a hit must end on a 544 boundary holding a Mamba state: none, so 0.
LONG_PROMPT = 1249


def test_mamba_partial_hit_on_the_prompt_hash_boundary(target):
    m = target.make_manager([GroupDesc("full", 16), GroupDesc("mamba", 544)], 200, 4096)
    assert m.coordinator.enable_partial_hash_hits, "Mamba 544 > hash block 16 with full attention: partial hits"
    prompt = list(range(LONG_PROMPT))
    first = target.make_request("first", prompt, 16)
    step1 = m.allocate_slots(first, 1248)
    assert _ids(step1) == [list(range(1, 79)), [0, 0, 79]], "step 1: full blocks 1..78, Mamba [null, null, 79]"
    first.num_computed_tokens = 1248
    m.new_step_starts()
    step2 = m.allocate_slots(first, 1)
    assert _ids(step2) == [[80], []], "step 2: one full block; the owner stays on its Mamba state block"
    copies, retained = _copies(m)
    assert copies == [(79, 81)], "the partial entry moves to a private copy 81 of the running state 79"
    first.num_computed_tokens = LONG_PROMPT
    m.new_step_starts()
    m.free(first)
    m.block_pool.free_blocks(retained)

    blocks, hit, _ = m.get_computed_blocks(target.make_request("second", prompt, 16))
    assert hit == 1248, f"a resend hits the prompt's last hash boundary (1248 tokens), got {hit}"
    assert _ids(blocks) == [list(range(1, 79)), [0, 0, 81]], "full blocks 1..78 and the Mamba copy at position 2"


# ------------------------------------------------------------------------------- copy-on-write on a hit
# Full attention bs 4 + Mamba bs 4, hash block 2 (scheduler block 4), 24 blocks. Prompt of 7 tokens,
# 6 computed: full attention [1, 2], Mamba [null, 3]. Full blocks: block 1 (tokens 0..3). The prompt's
# last hash boundary is 6 (a resend hits at most 7 - 1 = 6): full block 2 and Mamba state 3 get partial
# entries at 6. Freed tail first: the free queue ends 2, 1, 3 (hashed blocks go to the tail).
# A request sharing the 7 prompt tokens plus one hits 6: full [1, 2] (2 via its partial entry) and Mamba
# [null, 3]. Both tails are shared and only valid up to token 6: each group copies its own onto a fresh
# block from the queue head (full 4, then Mamba 5), the copies keep the sources alive until they run.
PROMPT7 = [0, 0, 1, 1, 2, 2, 3]


def _full_mamba_4(target):
    return target.make_manager([GroupDesc("full", 4), GroupDesc("mamba", 4)], 24, 256, hash_block_size=2)


def test_partial_hit_copies_each_shared_tail_block(target):
    m = _full_mamba_4(target)
    owner = target.make_request("owner", PROMPT7, 2)
    assert _ids(m.allocate_slots(owner, 6)) == [[1, 2], [0, 3]], "owner: full [1, 2], Mamba [null, 3]"
    m.free(owner)
    m.new_step_starts()

    req = target.make_request("sibling", PROMPT7 + [3], 2)
    blocks, hit, _ = m.get_computed_blocks(req)
    assert hit == 6, f"the hit ends on the partial entries at token 6, got {hit}"
    assert _ids(blocks) == [[1, 2], [0, 3]], "full [1, 2] and Mamba [null, 3] (both tails via partial entries)"
    new = m.allocate_slots(req, 2, hit, blocks)
    assert _ids(new) == [[4], [5]], "each group's only new block is the private copy of its shared tail"
    assert _ids(m.get_blocks("sibling")) == [[1, 4], [0, 5]], "the copies replace the shared tails in the tables"
    copies, retained = _copies(m)
    assert copies == [(2, 4), (3, 5)], "copies queued: full 2 -> 4, Mamba 3 -> 5"
    pool = m.block_pool
    assert [pool.blocks[i].ref_cnt for i in (2, 3, 4, 5)] == [1, 1, 2, 2], \
        "until the copies run, each source keeps the hit's reference and each copy holds one extra"
    pool.free_blocks(retained)
    assert [pool.blocks[i].ref_cnt for i in (2, 3, 4, 5)] == [0, 0, 1, 1], "releasing the copy endpoints"
    assert pool.blocks[2].block_hash_num_tokens == 6, "the source keeps its partial entry at 6 for others"
    assert pool.blocks[5].block_hash_num_tokens == 8, "the filled Mamba copy is cached as the full state at 8"


def test_partial_hit_of_a_state_cached_this_step_waits_for_the_next_step(target):
    """The owner's state at 6 is written by this step's forward pass: a sibling is deferred, not served."""
    m = _full_mamba_4(target)
    owner = target.make_request("owner", PROMPT7, 2)
    assert m.allocate_slots(owner, 6) is not None
    sibling = target.make_request("sibling", PROMPT7 + [3], 2)
    blocks, hit, _ = m.get_computed_blocks(sibling)
    assert hit == 6, f"the lookup already sees the partial entries at 6, got {hit}"
    assert m.allocate_slots(sibling, 2, hit, blocks) is None, "same step: the Mamba state is not written yet"
    m.new_step_starts()
    assert m.allocate_slots(sibling, 2, hit, blocks) is not None, "next step: the hit is served"


def test_running_owner_moves_its_partial_entry_to_a_copy(target):
    """The owner keeps writing its running state (the worker's table is append-only): the entry moves.

    Owner computed 6 of 7 (full [1, 2], Mamba [null, 3]); computing token 7 needs no new full block
    (cdiv(7, 4) = 2), and Mamba takes one block, 4, from the queue head for the copy 3 -> 4.
    """
    m = _full_mamba_4(target)
    owner = target.make_request("owner", PROMPT7, 2)
    assert m.allocate_slots(owner, 6) is not None
    owner.num_computed_tokens = 6
    m.new_step_starts()
    assert _ids(m.allocate_slots(owner, 1)) == [[], []], "no new table entries: the owner stays on state 3"
    assert _ids(m.get_blocks("owner")) == [[1, 2], [0, 3]]
    copies, _ = _copies(m)
    assert copies == [(3, 4)], "the Mamba partial entry is preserved by copying state 3 into block 4"
    pool = m.block_pool
    assert pool.blocks[3].block_hash is None, "the running state block gave up its entry"
    assert pool.blocks[4].block_hash_num_tokens == 6, "the copy now carries the entry at 6"


# --------------------------------------------------------------------------------- when hits stay coarse
# (groups, hash block, partial hits enabled). A sliding-window group cannot look hits up inside a block,
# and a Mamba block no larger than the hash block has no interior boundary: hits stay on the scheduler block.
ENABLE_CASES = [
    ("full2+mamba8", [GroupDesc("full", 2), GroupDesc("mamba", 8)], 2, True),
    ("full2+mamba8+swa4", [GroupDesc("full", 2), GroupDesc("mamba", 8),
                           GroupDesc("sliding_window", 4, sliding_window=4)], 2, False),
    ("full8+mamba8", [GroupDesc("full", 8), GroupDesc("mamba", 8)], 8, False),
]


def test_partial_hits_need_mamba_align_and_fine_grained_groups(target):
    for name, groups, hbs, expected in ENABLE_CASES:
        m = target.make_manager(groups, 64, 256, hash_block_size=hbs)
        got = m.coordinator.enable_partial_hash_hits
        assert got is expected, f"{name}: enable_partial_hash_hits must be {expected}, got {got}"


# ------------------------------------------------------------------------------ connector-facing lookup
# Full attention bs 4 + Mamba bs 8, hash block 4 (partial hits on), 32 blocks. The owner computes 16 of a
# 17-token prompt: full attention [1, 2, 3, 4] (all cached), Mamba [null, 5] with state 5 cached as the
# full state after 16 tokens (it already carries the key at 16, so no partial entry is added). A request
# sharing those 16 tokens then hits 16 in both groups: nothing diverges. With state 5 evicted, Mamba's own
# hit is 0 while full attention's stays 16: the connector lookup reports full attention's 16 with each
# group's own blocks and flags the divergence; the reconciled lookup hits 0.
@pytest.mark.needs('connector_lookup')
def test_connector_lookup_reports_full_attention_hit_and_divergence(target):
    m = target.make_manager([GroupDesc("full", 4), GroupDesc("mamba", 8)], 32, 256, hash_block_size=4)
    owner_prompt = list(range(1, 18))
    owner = target.make_request("owner", owner_prompt, 4)
    assert _ids(m.allocate_slots(owner, 16)) == [[1, 2, 3, 4], [0, 5]]
    m.free(owner)
    m.new_step_starts()
    req = target.make_request("later", owner_prompt[:16] + list(range(100, 108)), 4)

    blocks, hit, boundary, diverged = m.get_computed_blocks_for_connector(req)
    assert (_ids(blocks), hit, boundary, diverged) == ([[1, 2, 3, 4], [0, 5]], 16, 0, False), \
        "both groups hit 16: the per-group lookup agrees and nothing diverges"

    m.evict_blocks({5})
    blocks, hit, boundary, diverged = m.get_computed_blocks_for_connector(req)
    assert (_ids(blocks), hit, boundary, diverged) == ([[1, 2, 3, 4], []], 16, 0, True), \
        "Mamba lost its state: full attention's 16 is reported, flagged as diverged"
    _, reconciled, _ = m.get_computed_blocks(req)
    assert reconciled == 0, "the reconciled hit needs a Mamba state: 0"


# The scheduler's use of that lookup: a local hit with a partial tail past the scheduler block (8) is cut back
# to the block boundary when a connector offers more than the tail (`truncate_computed_blocks`). The owner
# computes 12 of a 13-token prompt: full attention [1, 2, 3], Mamba [null, 4] (state 4 keyed at 12, the
# prompt's last hash boundary). With state 4 evicted, the connector lookup reports full attention's 12 and
# Mamba's empty hit (diverged). Cut at 8: full attention keeps [1, 2]; Mamba keeps what it has, nothing (the
# connector supplies the state at the endpoint); a Mamba group holding fewer blocks than 8 // 8 is no error.
@pytest.mark.needs('connector_lookup')
def test_cutting_a_diverged_connector_hit_keeps_what_mamba_has(target):
    m = target.make_manager([GroupDesc("full", 4), GroupDesc("mamba", 8)], 32, 256, hash_block_size=4)
    prompt = list(range(1, 14))
    owner = target.make_request("owner", prompt, 4)
    assert _ids(m.allocate_slots(owner, 12)) == [[1, 2, 3], [0, 4]]
    m.free(owner)
    m.new_step_starts()
    m.evict_blocks({4})
    req = target.make_request("later", prompt[:12] + list(range(100, 108)), 4)
    blocks, hit, _, diverged = m.get_computed_blocks_for_connector(req)
    assert (_ids(blocks), hit, diverged) == ([[1, 2, 3], []], 12, True), "full attention's 12, Mamba empty"
    assert _ids(m.truncate_computed_blocks(blocks, 8)) == [[1, 2], []], \
        "cut at the scheduler block: full attention's first 2 blocks, Mamba's (empty) hit as it is"
    assert _ids(blocks) == [[1, 2, 3], []], "cutting is pure slicing: the lookup result is not changed"
