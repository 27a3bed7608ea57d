"""Block pool throughput (spec section 9): get/free churn, a steady half-full cached pool, evicting
allocation, on the reference and, when importable, vLLM, rounds interleaved as in `test_allocator_throughput`
(pool workloads count block operations: a get or a free of one block is one)."""


import pytest

from harness.target_spec import load_allocator_target
from suites.benchmarks import workloads as w
from suites.benchmarks.peer import require_vllm
from suites.benchmarks.interleave import record_side, side_by_side


@pytest.mark.benchmark_workload
@pytest.mark.parametrize("k,pairs", [(1, 200_000), (16, 40_000), (256, 4_000)])
def test_pool_churn(impls, side_fixtures, kvconform_record, k, pairs):
    pairs = pairs if side_fixtures is not None else pairs // 20
    sides = side_by_side(impls, side_fixtures, lambda impl: (
        lambda: (impl.make_block_pool(100_000, False, 16), k, pairs), w.pool_churn), 5)
    for impl, side in zip(impls, sides):
        record_side(kvconform_record, side, f"pool.churn_k{k}", impl, block_ops=2 * k * pairs)


@pytest.mark.benchmark_workload
def test_pool_steady_k16(impls, side_fixtures, kvconform_record):
    pairs = 40_000 if side_fixtures is not None else 2_000
    sides = side_by_side(impls, side_fixtures, lambda impl: (
        lambda: (*w.make_steady_pool(impl), 16, pairs), w.steady_pairs), 5)
    for impl, side in zip(impls, sides):
        record_side(kvconform_record, side, "pool.steady_k16", impl, block_ops=32 * pairs)


@pytest.mark.benchmark_workload
def test_pool_evict_k16(impls, side_fixtures, kvconform_record):
    sides = side_by_side(impls, side_fixtures, lambda impl: (lambda: (w.make_evict_pool(impl),), w.evict_all), 3)
    for impl, side in zip(impls, sides):
        record_side(kvconform_record, side, "pool.evict_k16", impl, block_ops=99_984)


@pytest.mark.parametrize("seed", range(6))
def test_pool_ids_identical_to_vllm(kvconform_record, seed):
    """The reference's pool hands out, hits and queues exactly vLLM's block ids under random pool operations
    (`workloads.pool_ops_digest`): the pool workloads above time identical work on both."""
    require_vllm()
    kvconform_record(suite="allocator", cell={"target": "reference-vs-vllm", "scenario": f"pool.random_ops[{seed}]",
                                              "section": "2"})
    ref_target, vllm_target = load_allocator_target("reference"), load_allocator_target("vllm")
    # The reference follows the newest free order; a release that queues every freed block at the tail
    # hands out other ids by design (N/A, not a difference).
    vllm_target.require("unhashed_lifo")
    evict_first = w.has_evict_first(ref_target) and w.has_evict_first(vllm_target)
    ref = w.pool_ops_digest(ref_target, seed, evict_first)
    vllm = w.pool_ops_digest(vllm_target, seed, evict_first)
    assert ref == vllm, f"pool operations (seed {seed}): the reference's block ids (digest {ref}) differ from vLLM's ({vllm})"
