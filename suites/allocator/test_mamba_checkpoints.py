"""Spec section 4.5: Mamba prefill checkpoints (vLLM 0.33's `num_prefill_checkpoint_blocks`).

A Mamba ("align") table holds the running state at the chunk's last column. With checkpoint blocks the
worker also exports the state at a hash boundary inside the chunk into the column just below, and the
manager keys that block by the prefix hash at the checkpoint position, so a later prompt can resume there.

The checkpoint position of a chunk ending at token E (hash/alignment block h):
  without EAGLE: floor((E - max(1, lookahead)) / h) * h   (a token stays to recompute logits; a lookahead
                 hash needs that many tokens past its block);
  with EAGLE:    floor(E / h) * h - h                     (EAGLE's replay drop).
It is exported (and a block reserved) only when the chunk starts on a hash boundary, the position lies
inside the chunk at least one hash block past its start, on the checkpoint alignment, and its column
(ceil(E / bs) - 2) is past the chunk's initial state column. Under sparse retention (interval 0) only the
chunk reaching the prefill end reserves one.

Every expected value below was worked out by hand from those rules (the working is next to each table)
and then confirmed on both targets; none is computed by the allocator. All groups use 16-token blocks and
16-token hashes, so hits are block aligned on both targets whatever their fine-grained hit support.
"""

import pytest

from harness.targets.allocator.target import GroupDesc
from suites.allocator.helpers import new_step, prefill, tables

SECTION = "4"

BS = 16
POOL = 64


def _groups(checkpoint_blocks: int = 1) -> list[GroupDesc]:
    mamba = GroupDesc("mamba", BS, num_prefill_checkpoint_blocks=checkpoint_blocks,
                      prefill_checkpoint_alignment=BS if checkpoint_blocks else None)
    return [GroupDesc("full", BS), mamba]


def _prompt(n: int, offset: int = 0) -> list[int]:
    return list(range(1 + offset, n + 1 + offset))


def _mamba_keyed_hashes(target, manager, request) -> list[int]:
    """Indices i of the request's block hashes that the Mamba group (id 1) has cached, i.e. positions
    (i + 1) * 16 a later prompt can resume its Mamba state at."""
    pool = manager.block_pool
    return [i for i, h in enumerate(request.block_hashes) if pool.get_cached_block(h, [1]) is not None]


def _prefill_to(target, manager, request, chunk_ends: list[int]) -> None:
    """Prefill `request` (no prefix hit) in chunks ending at `chunk_ends`, one scheduling step each."""
    for end in chunk_ends:
        out = manager.allocate_slots(request, end - request.num_computed_tokens)
        assert out is not None, f"the chunk ending at {end} must fit the pool"
        request.num_computed_tokens = end
        new_step(target, manager)


def _replay_hit(target, manager, prompt: list[int], request_id: str) -> int:
    _, hit, _ = manager.get_computed_blocks(target.make_request(request_id, prompt, BS))
    return hit


# ------------------------------------------------------------------------------- one-chunk prefill
# 100-token prompt in one chunk: position floor(99/16)*16 = 96, column ceil(100/16)-2 = 5 (tokens 80..96,
# so the block ends on its own state). First allocation: full attention takes 7 blocks (ids 1..7), Mamba
# the checkpoint and the running state (ids 8, 9) with nulls before them. Without checkpoint blocks the
# only state is the running one at column 6 (past the 96 cache limit), so nothing Mamba is cached and
# an identical prompt hits nothing.
ONE_CHUNK = [
    # (checkpoint blocks, Mamba table, Mamba keyed hash indices, identical-prompt hit)
    (1, [0, 0, 0, 0, 0, 8, 9], [5], 96),
    (0, [0, 0, 0, 0, 0, 0, 8], [], 0),
]


@pytest.mark.parametrize("checkpoint_blocks,table,keyed,hit", ONE_CHUNK, ids=["checkpoint", "no-checkpoint"])
def test_one_chunk_prefill_checkpoint(target, checkpoint_blocks, table, keyed, hit):
    m = target.make_manager(_groups(checkpoint_blocks), POOL, 512)
    req = target.make_request("producer", _prompt(100), BS)
    prefill(m, req, use_hits=False)
    got = tables(m, req)
    assert got[0] == list(range(1, 8)), f"full attention holds 7 blocks 1..7, got {got[0]}"
    assert got[1] == table, f"Mamba table must be {table} (checkpoint column 5, running state 6), got {got[1]}"
    assert _mamba_keyed_hashes(target, m, req) == keyed, \
        f"Mamba must be keyed only at hash indices {keyed} (the checkpoint at 96 tokens)"
    m.free(req)
    got_hit = _replay_hit(target, m, _prompt(100), "replay")
    assert got_hit == hit, f"an identical prompt resumes at {hit} tokens, got {got_hit}"


def test_checkpoint_reservation_counts_at_admission(target):
    """The checkpoint block is part of the allocation estimate: 7 full + 2 Mamba blocks for a 100-token
    chunk, so a pool with 9 usable blocks admits it and one with 8 does not (without checkpoint blocks,
    Mamba needs 1 and 8 suffice)."""
    cases = [(1, 10, True), (1, 9, False), (0, 9, True)]
    for checkpoint_blocks, pool, fits in cases:
        m = target.make_manager(_groups(checkpoint_blocks), pool, 512)
        req = target.make_request("r", _prompt(100), BS)
        out = m.allocate_slots(req, 100)
        assert (out is not None) == fits, \
            f"checkpoint blocks={checkpoint_blocks}, pool of {pool} ({pool - 1} usable): " \
            f"the 100-token chunk {'fits' if fits else 'must not fit'}"


# --------------------------------------------------------------------------- chunked prefill, retention
# 100-token prompt in chunks 0..32, 32..64, 64..100.
# Dense retention (None): every chunk reserves its checkpoint: chunk 1 at 16 (column 0), chunk 2 at 48
# (column 2), chunk 3 at 96 (column 5); running states end at 32 and 64 and are cached at their block
# ends too. Mamba keys: 16, 32, 48, 64, 96 -> hash indices 0, 1, 2, 3, 5.
# Sparse retention (0): only the chunk reaching the prefill end (100) reserves one (96); intermediate
# states are kept only at the replay boundary 99 -> block 5. Mamba keys: index 5 only.
# Without checkpoint blocks (dense): running states at 32 and 64 only -> indices 1, 3.
# A prompt sharing the first 50 tokens (hash limit 48) resumes at the longest keyed Mamba state <= 48;
# the identical prompt at the longest <= 96.
CHUNKED = [
    # (checkpoint blocks, retention interval, keyed indices, identical hit, 50-shared hit)
    (1, None, [0, 1, 2, 3, 5], 96, 48),
    (1, 0, [5], 96, 0),
    (0, None, [1, 3], 64, 32),
]


@pytest.mark.parametrize("checkpoint_blocks,retention,keyed,hit_same,hit_shared", CHUNKED,
                         ids=["checkpoint-dense", "checkpoint-sparse", "no-checkpoint-dense"])
def test_chunked_prefill_checkpoints_follow_retention(target, checkpoint_blocks, retention, keyed, hit_same,
                                                      hit_shared):
    m = target.make_manager(_groups(checkpoint_blocks), POOL, 512, retention_interval=retention)
    prompt = _prompt(100)
    req = target.make_request("producer", prompt, BS)
    _prefill_to(target, m, req, [32, 64, 100])
    assert _mamba_keyed_hashes(target, m, req) == keyed, \
        f"retention={retention}: Mamba must be keyed at hash indices {keyed}"
    m.free(req)
    got = _replay_hit(target, m, prompt, "same")
    assert got == hit_same, f"retention={retention}: an identical prompt resumes at {hit_same} tokens, got {got}"
    shared = prompt[:50] + [1000 + i for i in range(50)]
    got = _replay_hit(target, m, shared, "shared")
    assert got == hit_shared, \
        f"retention={retention}: a prompt sharing 50 tokens resumes at {hit_shared} tokens, got {got}"


# ------------------------------------------------------------------------------ EAGLE, lookahead
# EAGLE: position floor(100/16)*16 - 16 = 80, still exported into column 5 (its block spans 80..96, so
# the block is keyed one block early: hash index 4, 80 tokens). The identical prompt's full attention
# proves 96 and drops one block -> 80, where the checkpoint waits.
# Lookahead hashes (no EAGLE): a 97-token prompt with 2 lookahead tokens checkpoints at
# floor(95/16)*16 = 80 (the 96 boundary's hash needs tokens 96..98, one past the prompt); with 0 or 1
# lookahead, or a 98-token prompt, at 96. The checkpoint is always column 5 (ceil(97 or 98/16) - 2).
# The hash content does not decide where the key lands, so requests here hash without lookahead.
POSITION_CASES = [
    # (name, prompt tokens, use_eagle, lookahead, keyed index, identical hit)
    ("eagle", 100, True, 0, 4, 80),
    ("lookahead0", 97, False, 0, 5, 96),
    ("lookahead1", 97, False, 1, 5, 96),
    ("lookahead2", 97, False, 2, 4, 80),
    ("lookahead2-98", 98, False, 2, 5, 96),
]


@pytest.mark.parametrize("name,n,use_eagle,lookahead,keyed,hit", POSITION_CASES, ids=[c[0] for c in POSITION_CASES])
def test_checkpoint_position_rules(target, name, n, use_eagle, lookahead, keyed, hit):
    m = target.make_manager(_groups(), POOL, 512, use_eagle=use_eagle, num_hash_lookahead_tokens=lookahead)
    req = target.make_request("producer", _prompt(n), BS)
    prefill(m, req, use_hits=False)
    table = tables(m, req)[1]
    assert table[:5] == [0] * 5 and 0 not in table[5:], \
        f"{name}: the checkpoint sits at column 5 and the running state after it, got Mamba table {table}"
    assert _mamba_keyed_hashes(target, m, req) == [keyed], \
        f"{name}: the checkpoint block is keyed at hash index {keyed} ({(keyed + 1) * BS} tokens) and nowhere else"
    checkpoint_block = m.get_blocks(req.request_id).blocks[1][5]
    assert checkpoint_block.block_hash_num_tokens == (keyed + 1) * BS, \
        f"{name}: the key covers {(keyed + 1) * BS} tokens"
    m.free(req)
    got = _replay_hit(target, m, _prompt(n), "replay")
    assert got == hit, f"{name}: an identical prompt resumes at {hit} tokens, got {got}"


def test_prompt_checkpoint_survives_decode_under_sparse_retention(target):
    """Under sparse retention the prefill-end chunk's checkpoint is the prompt's own and is kept. Decode
    steps start off a hash boundary (100, 101, ...), so they export no checkpoint, and freeing the
    checkpoint block once the running state has moved on keeps its key (a free cached block is evicted
    only when reused). Prompt 100 in one chunk (keyed at 96), then 4 decode tokens: index 5 stays keyed."""
    m = target.make_manager(_groups(), POOL, 512, retention_interval=0)
    req = target.make_request("producer", _prompt(100), BS)
    prefill(m, req, use_hits=False)
    assert _mamba_keyed_hashes(target, m, req) == [5], "the prompt's checkpoint at 96 is kept"
    for token in range(4):
        req.append_output_token_ids(5000 + token)
        assert m.allocate_slots(req, 1) is not None, "a decode token fits"
        req.num_computed_tokens += 1
        new_step(target, m)
    assert _mamba_keyed_hashes(target, m, req) == [5], \
        "decode steps publish no Mamba state under sparse retention; only the prompt's checkpoint stays"


# ------------------------------------------------------------------ sparse retention replay boundaries
# Full 16 + Mamba 16 (no checkpoint blocks), retention 0, a 64-token prompt in 16-token chunks: each
# chunk's running state ends on its block, and sparse retention keeps only the states at the replay
# boundaries. Without EAGLE that is the resend limit 63 -> block ending at 48 (hash index 2). With EAGLE
# a hit ends one block below what it proved: a resend (limit 63 -> 48 - 16 = 32) and a longer prompt
# (limit 64 -> 64 - 16 = 48) both stay reachable: indices 1 and 2.
# Where an identical resend lands under EAGLE is the release's lookup, not retention's: vLLM 0.33 and later
# let full attention prove one block past the logits limit (up to the prompt's hashed 64 tokens), drop it
# and resume at 48; 0.31.0 caps that proof at the limit 63 (kv_cache_coordinator.py, `min(curr_hit_length +
# eagle_margin, max_cache_hit_length)`), proves 48 and resumes at 32, the resend boundary it retains for
# exactly that. The property checked is retention's: the resend resumes at a kept boundary, exactly where
# the same resend resumes under dense retention (sparse retention costs it nothing).
REPLAY_CASES = [
    # (use_eagle, keyed indices under sparse retention)
    (False, [2]),
    (True, [1, 2]),
]


def _resend_after_chunked_prefill(target, use_eagle: bool, retention: int | None) -> tuple[list[int], int]:
    """Prefill the 64-token prompt in 16-token chunks under `retention` and free it: (the Mamba group's keyed
    hash indices, the hit of an identical resend)."""
    m = target.make_manager(_groups(checkpoint_blocks=0), POOL, 512, retention_interval=retention,
                            use_eagle=use_eagle)
    prompt = _prompt(64)
    req = target.make_request("producer", prompt, BS)
    _prefill_to(target, m, req, [16, 32, 48, 64])
    keyed = _mamba_keyed_hashes(target, m, req)
    m.free(req)
    return keyed, _replay_hit(target, m, prompt, "resend")


@pytest.mark.parametrize("use_eagle,keyed", REPLAY_CASES, ids=["plain", "eagle"])
def test_sparse_retention_keeps_replay_boundary_states(target, use_eagle, keyed):
    got_keyed, got = _resend_after_chunked_prefill(target, use_eagle, 0)
    assert got_keyed == keyed, \
        f"use_eagle={use_eagle}: sparse retention keeps Mamba states only at hash indices {keyed}"
    kept = [(index + 1) * BS for index in keyed]
    assert got in kept, f"use_eagle={use_eagle}: an identical resend resumes at a kept boundary {kept}, got {got}"
    _, dense = _resend_after_chunked_prefill(target, use_eagle, None)
    assert got == dense, \
        f"use_eagle={use_eagle}: an identical resend resumes where it does under dense retention ({dense}), got {got}"
