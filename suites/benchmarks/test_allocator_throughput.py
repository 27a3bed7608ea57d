"""Allocator throughput (spec section 9) on the reference and, when importable, vLLM — same workloads.

Under xdist pytest-benchmark does not time: each workload then runs once at CI scale and no metrics are
recorded. `gc.freeze()` after setup on both sides mirrors vLLM's engine, which freezes its heap at start.
"""

import gc
import importlib.util
import os

import pytest

from harness.plugins.allocator import load_allocator_target
from suites.benchmarks import workloads as w

IMPLEMENTATIONS = ["reference", "vllm"]
# Caps every workload's timed rounds (e.g. 1 in the real-vLLM CI job, which wants the ratio, not precision).
MAX_ROUNDS_ENV = "KVCONFORM_BENCHMARK_MAX_ROUNDS"


@pytest.fixture(scope="module", params=IMPLEMENTATIONS)
def impl(request):
    """The allocator implementation a workload runs on (vLLM only where it is importable)."""
    if request.param == "vllm" and importlib.util.find_spec("vllm") is None:
        pytest.skip("not applicable: vLLM is not importable in this environment")
    return load_allocator_target(request.param)


def _timing(benchmark) -> bool:
    return not getattr(benchmark, "disabled", False)


def _record(kvconform_record, benchmark, workload, impl, requests=None, block_ops=None):
    extra = {}
    if _timing(benchmark) and benchmark.stats:
        median = benchmark.stats.stats.median
        extra["metrics"] = {"median_s": median,
                            "requests_per_s": requests / median if requests else None,
                            "block_ops_per_s": block_ops / median if block_ops else None}
    kvconform_record(suite="benchmark", cell={"workload": workload, "implementation": impl.name}, **extra)


def _rounds(benchmark, rounds: int) -> int:
    """`rounds` when timing (capped by $KVCONFORM_BENCHMARK_MAX_ROUNDS), else one untimed pass."""
    if not _timing(benchmark):
        return 1
    cap = os.environ.get(MAX_ROUNDS_ENV)
    if cap is None:
        return rounds
    if not cap.isdigit() or int(cap) < 1:
        raise ValueError(f"{MAX_ROUNDS_ENV}: {cap!r} is not accepted; expected a whole number >= 1")
    return min(rounds, int(cap))


def _run(benchmark, setup, fn, rounds):
    def wrapped_setup():
        args = setup()
        gc.collect()
        gc.freeze()
        return args, {}
    try:
        return benchmark.pedantic(fn, setup=wrapped_setup, rounds=_rounds(benchmark, rounds))
    finally:
        gc.unfreeze()


@pytest.mark.benchmark_workload
@pytest.mark.parametrize("k,pairs", [(1, 200_000), (16, 40_000), (256, 4_000)])
def test_pool_churn(benchmark, impl, kvconform_record, k, pairs):
    pairs = pairs if _timing(benchmark) else pairs // 20
    _run(benchmark, lambda: (impl.make_block_pool(100_000, False, 16), k, pairs), w.pool_churn, 5)
    _record(kvconform_record, benchmark, f"pool.churn_k{k}", impl, block_ops=2 * k * pairs)


@pytest.mark.benchmark_workload
def test_pool_steady_k16(benchmark, impl, kvconform_record):
    pairs = 40_000 if _timing(benchmark) else 2_000
    _run(benchmark, lambda: (*w.make_steady_pool(impl), 16, pairs), w.steady_pairs, 5)
    _record(kvconform_record, benchmark, "pool.steady_k16", impl, block_ops=32 * pairs)


@pytest.mark.benchmark_workload
def test_pool_evict_k16(benchmark, impl, kvconform_record):
    _run(benchmark, lambda: (w.make_evict_pool(impl),), w.evict_all, 3)
    _record(kvconform_record, benchmark, "pool.evict_k16", impl, block_ops=99_984)


@pytest.mark.benchmark_workload
@pytest.mark.parametrize("config", ["full", "hybrid"])
def test_request_stream(benchmark, impl, kvconform_record, config):
    shape = w.FULL_SCALE if _timing(benchmark) else w.CI_SCALE

    def setup():
        manager = impl.make_manager(w.STREAM_CONFIGS[config], shape.num_blocks, 1 << 20,
                                    retention_interval=w.STREAM_RETENTION[config])
        return manager, w.make_stream_requests(impl, shape), shape

    _run(benchmark, setup, w.run_stream, 3)
    ops = None
    if _timing(benchmark):
        manager, requests, _ = setup()
        ops = w.count_block_ops(manager.block_pool, lambda: w.run_stream(manager, requests, shape))
    _record(kvconform_record, benchmark, f"stream.{config}", impl, requests=shape.num_requests, block_ops=ops)


@pytest.mark.benchmark_workload
@pytest.mark.parametrize("case", ["hit", "miss"])
def test_lookup_32k(benchmark, impl, kvconform_record, case):
    tokens, hit_req, miss_req = w.lookup_prompts(impl)
    manager = w.prefill_and_free(impl, "full", tokens)
    req = hit_req if case == "hit" else miss_req
    _, hit, _ = manager.get_computed_blocks(req)
    assert hit == (32_752 if case == "hit" else 0), f"32k {case}: expected hit length, got {hit}"
    benchmark.pedantic(manager.get_computed_blocks, args=(req,), rounds=_rounds(benchmark, 20))
    _record(kvconform_record, benchmark, f"lookup32k.{case}", impl, requests=1)


@pytest.mark.parametrize("config", ["full", "hybrid"])
def test_block_tables_identical_to_vllm(kvconform_record, config):
    """The reference hands out exactly vLLM's block ids on the request stream (CI scale)."""
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("not applicable: vLLM is not importable in this environment")
    kvconform_record(suite="allocator", cell={"target": "reference-vs-vllm", "scenario": f"stream.{config}",
                                              "section": "9"})
    ref = w.stream_tables_digest(load_allocator_target("reference"), config, w.CI_SCALE)
    vllm = w.stream_tables_digest(load_allocator_target("vllm"), config, w.CI_SCALE)
    assert ref == vllm, f"{config} stream: reference block tables (digest, calls) {ref} differ from vLLM's {vllm}"
