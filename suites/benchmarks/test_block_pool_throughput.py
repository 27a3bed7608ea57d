"""Block pool throughput (spec section 9): get/free churn, a steady half-full cached pool, evicting
allocation, on the reference and, when importable, vLLM, rounds interleaved as in `test_allocator_throughput`
(pool workloads count block operations: a get or a free of one block is one)."""

import pytest

from suites.benchmarks import workloads as w
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
