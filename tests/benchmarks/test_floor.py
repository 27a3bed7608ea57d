"""The floors of `suites.benchmarks.floor`: the minimal steady pool does the steady workload's whole work (the
reference's block ids, counts and queue, pair by pair) and refuses any state outside it; the command times every
side and refuses a round count below one."""

from __future__ import annotations

import pytest

from harness.target_spec import load_allocator_target
from suites.benchmarks import floor
from suites.benchmarks import workloads as w

# 2,002 blocks: the ring holds 62 allocations of 16, and 17 free blocks stay on the stack past them, so every
# allocation of the steady state comes off the stack (with 2,000 only 15 would: the next allocation evicts).
NUM_BLOCKS = 2002


def _state(pool):
    return ([b.ref_cnt for b in pool.blocks], [b.block_id for b in pool.free_block_queue.get_all_free_blocks()])


def test_minimal_pool_does_what_the_reference_does_in_the_steady_state():
    reference = load_allocator_target("reference")
    pool_a, ring_a = floor.steady_state(reference, NUM_BLOCKS)
    pool_b, ring_b = floor.steady_state(reference, NUM_BLOCKS)
    minimal = floor.MinimalSteadyPool(pool_b)
    assert _state(pool_a) == _state(pool_b), "two pools turned alike start alike"
    for pair in range(3 * len(ring_a)):
        w.steady_pairs(pool_a, ring_a, 16, 1)
        w.steady_pairs(minimal, ring_b, 16, 1)
        got, want = [b.block_id for b in ring_b[-1]], [b.block_id for b in ring_a[-1]]
        assert got == want, f"pair {pair}: the minimal pool handed out {got}, the reference {want}"
    assert _state(pool_a) == _state(pool_b), "counts and free queue agree after three turns of the ring"


def test_minimal_pool_refuses_states_outside_the_steady_state():
    reference = load_allocator_target("reference")
    fresh, ring = w.make_steady_pool(reference, NUM_BLOCKS)
    with pytest.raises(AssertionError, match="outside the steady state"):
        floor.MinimalSteadyPool(fresh).free_blocks(ring[0])  # the ring's first allocations are cached
    pool, ring = floor.steady_state(reference, NUM_BLOCKS)
    minimal = floor.MinimalSteadyPool(pool)
    shared = ring.popleft()
    pool.touch(shared[:1])
    with pytest.raises(AssertionError, match="outside the steady state"):
        minimal.free_blocks(shared)
    with pytest.raises(AssertionError, match="hands out blocks from the free stack"):
        minimal.get_new_blocks(len(pool.free_block_queue.front) + 1)


def test_steady_sides_time_each_side_on_its_own_pool():
    sides = floor.steady_sides(NUM_BLOCKS)
    assert {"reference", "minimal", "lists"} <= set(sides), f"sides timed: {sorted(sides)}"
    figures = floor.interleaved_medians(sides, 1)
    assert all(value > 0 for value in figures.values()), f"every side timed some work: {figures}"


def test_a_round_count_below_one_is_refused(capsys):
    with pytest.raises(SystemExit) as exit_info:
        floor.main(["steady", "--rounds", "0"])
    assert exit_info.value.code == 2
    assert "--rounds: 0 is not accepted; expected a whole number >= 1" in capsys.readouterr().err
