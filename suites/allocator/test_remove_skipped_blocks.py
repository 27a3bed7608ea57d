"""Spec sections 4.3, 4.4, 4.6: `remove_skipped_blocks` of sliding window, chunked local attention and R-SWA.

Every table was worked out by hand from vLLM 0.33's rules (written next to each one): the skipped prefix
(or R-SWA's gap) is replaced by the null block (id 0) and its blocks are freed, highest position first.
Caching is off so freed blocks go to the head of the free queue, where their order is visible.
"""

import pytest

from harness.targets.allocator.target import GroupDesc
from suites.allocator.helpers import queue_ids, remove_skipped, tables

SECTION = "4"


def _admit(target, groups, num_tokens, request_id="s"):
    m = target.make_manager(groups, 16, 200, enable_caching=False)
    req = target.make_request(request_id, list(range(1, num_tokens + 1)), 4)
    assert m.allocate_slots(req, num_tokens) is not None, f"{num_tokens} tokens fit a pool of 16"
    assert tables(m, req) == [list(range(1, num_tokens // 4 + 1))], "fresh blocks are handed out 1, 2, ..."
    return m, req


# Sliding window 8, bs 4, a 20-token prompt (blocks 1..5). After n computed tokens the next token sees
# tokens n-7..n, so n - 7 tokens are skipped and (n - 7) // 4 whole blocks are freed.
SWA_STEPS = [
    (4, [1, 2, 3, 4, 5]),   # nothing skipped
    (11, [0, 2, 3, 4, 5]),  # tokens 0..3 skipped: block 1
    (14, [0, 2, 3, 4, 5]),  # token 7 (in block 2) still in the window
    (15, [0, 0, 3, 4, 5]),  # tokens 0..7 skipped: block 2 too
    (20, [0, 0, 0, 4, 5]),  # 13 skipped: 3 whole blocks
]


@pytest.mark.needs('unhashed_lifo')
def test_sliding_window_frees_the_prefix_outside_the_window(target):
    m, req = _admit(target, [GroupDesc("sliding_window", 4, sliding_window=8)], 20)
    for n, expected in SWA_STEPS:
        remove_skipped(target, m, req.request_id, n)
        assert tables(m, req) == [expected], f"after {n} computed tokens the SWA table is {expected}"
    assert queue_ids(m.block_pool)[:3] == [3, 2, 1], "each freed block was prepended: the latest (3) first"


@pytest.mark.needs('unhashed_lifo')
def test_sliding_window_frees_several_blocks_highest_position_first(target):
    """One call freeing blocks 1..3 at once hands them back tail first: 3 is reused first."""
    m, req = _admit(target, [GroupDesc("sliding_window", 4, sliding_window=8)], 20)
    remove_skipped(target, m, req.request_id, 20)
    assert tables(m, req) == [[0, 0, 0, 4, 5]]
    assert queue_ids(m.block_pool)[:4] == [3, 2, 1, 6], "freed 3, 2, 1 sit at the head in that order"


# Chunked local attention, chunk 8, bs 4: every token of earlier chunks is skipped, n // 8 * 8 tokens.
CHUNKED_STEPS = [
    (7, [1, 2, 3, 4, 5]),   # still in chunk 0
    (8, [0, 0, 3, 4, 5]),   # chunk 0 (blocks 1, 2) skipped
    (15, [0, 0, 3, 4, 5]),
    (16, [0, 0, 0, 0, 5]),  # chunks 0 and 1 skipped
    (20, [0, 0, 0, 0, 5]),  # block 5 holds the current chunk
]


def test_chunked_local_attention_frees_earlier_chunks(target):
    m, req = _admit(target, [GroupDesc("chunked_local", 4, attention_chunk_size=8)], 20)
    for n, expected in CHUNKED_STEPS:
        remove_skipped(target, m, req.request_id, n)
        assert tables(m, req) == [expected], f"after {n} computed tokens the table is {expected}"


# R-SWA, window 8, bs 4: the prompt stays; decode blocks wholly inside
# [cdiv(prompt, 4) * 4, max(prompt, n - 8)) are the gap. (processed tokens n, prompt length, table)
RSWA_STEPS = [
    (28, None, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]),   # no prompt length: no gap
    (20, 16, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]),     # window starts at 16: empty gap
    (28, 16, [1, 2, 3, 4, 0, 6, 7, 8, 9, 10]),     # gap [16, 20): block index 4
    (36, 16, [1, 2, 3, 4, 0, 0, 0, 8, 9, 10]),     # gap [16, 28): indexes 5, 6 join
]


def test_rswa_frees_the_gap_between_prompt_and_window(target):
    m, req = _admit(target, [GroupDesc("rswa", 4, rswa_window=8)], 40)
    for n, prompt, expected in RSWA_STEPS:
        remove_skipped(target, m, req.request_id, n, prompt)
        assert tables(m, req) == [expected], f"processed {n}, prompt {prompt}: table {expected}"


def test_rswa_gap_starts_after_a_partial_prompt_block(target):
    """A prompt of 18 ends inside block index 4, which stays; the gap is indexes 5..7 ([20, 32))."""
    m, req = _admit(target, [GroupDesc("rswa", 4, rswa_window=8)], 40)
    remove_skipped(target, m, req.request_id, 40, 18)
    assert tables(m, req) == [[1, 2, 3, 4, 5, 0, 0, 0, 9, 10]]


# Allocation frees the gap itself: a 16-token prompt (blocks 1..4) decodes one token per step. Before the
# step at t computed tokens the gap [16, max(16, t - 8)) is freed, then cdiv(t + 1, 4) blocks are needed.
# t=16, 20, 24 add blocks 5, 6, 7; t=28 frees block 5 (index 4) and reuses it at index 7; t=32 frees
# block 6 (index 5) and reuses it at index 8 (a freed block is reused first: LIFO reuse without caching).
@pytest.mark.needs('unhashed_lifo')
def test_rswa_gap_freed_and_reused_during_decode(target):
    m = target.make_manager([GroupDesc("rswa", 4, rswa_window=8)], 16, 200, enable_caching=False)
    req = target.make_request("d", list(range(1, 17)), 4)
    assert m.allocate_slots(req, 16) is not None
    req.num_computed_tokens = 16
    for t in range(16, 33):
        req.append_output_token_ids([1000 + t])  # the token sampled by the previous step
        assert m.allocate_slots(req, 1) is not None, f"decode step at {t} fits"
        req.num_computed_tokens += 1
    assert tables(m, req) == [[1, 2, 3, 4, 0, 0, 7, 5, 6]], "gap blocks 5 and 6 were freed and reused"


@pytest.mark.parametrize("n", [0, 7, 40])
def test_full_attention_never_skips(target, n):
    m, req = _admit(target, [GroupDesc("full", 4)], 20)
    remove_skipped(target, m, req.request_id, n)
    assert tables(m, req) == [[1, 2, 3, 4, 5]], "full attention keeps every block until the request ends"
