"""Allocator throughput (spec section 9) on the reference and, when importable, vLLM, same workloads.

Each test times both implementations in one process with their rounds interleaved (reference, vLLM,
reference, vLLM, ...; `suites.benchmarks.interleave`), so load from other jobs on a shared machine lands on
both sides alike; each side has its own pytest-benchmark statistics (grouped under the test's name) and its
own results record. Under xdist or `--benchmark-disable` pytest-benchmark does not time: each workload then
runs once at CI scale and no metrics are recorded. `gc.freeze()` after setup on both sides mirrors vLLM's
engine, which freezes its heap at start.
"""

import importlib.util

import pytest

from harness.plugins.allocator import load_allocator_target
from suites.benchmarks import workloads as w
from suites.benchmarks.interleave import Side, make_side_fixtures, run_interleaved, timed_rounds

IMPLEMENTATIONS = ["reference", "vllm"]


@pytest.fixture(scope="module")
def impls():
    """The implementations every workload runs on, reference first (vLLM only where it is importable)."""
    names = [n for n in IMPLEMENTATIONS if n != "vllm" or importlib.util.find_spec("vllm") is not None]
    return [load_allocator_target(n) for n in names]


@pytest.fixture
def side_fixtures(request, impls):
    """One pytest-benchmark fixture per implementation (None when pytest-benchmark does not time)."""
    return make_side_fixtures(request, [impl.name for impl in impls])


def _record(kvconform_record, side: Side, workload, impl, requests=None, block_ops=None):
    extra = {}
    stats = side.stats
    if stats:
        median = stats.median
        extra["metrics"] = {"median_s": median,
                            "requests_per_s": requests / median if requests else None,
                            "block_ops_per_s": block_ops / median if block_ops else None,
                            "rounds": stats.rounds}
    kvconform_record(suite="benchmark", cell={"workload": workload, "implementation": impl.name}, **extra)


def _side_by_side(impls, side_fixtures, make_side, rounds, freeze=True) -> list[Side]:
    """Every implementation's (setup, target) from `make_side(impl)`, run with rounds interleaved; the sides
    in `impls` order (`freeze`: see `Side`)."""
    sides = [Side(impl.name, *make_side(impl), fixture=side_fixtures[impl.name] if side_fixtures else None,
                  freeze=freeze) for impl in impls]
    run_interleaved(sides, timed_rounds(side_fixtures is not None, rounds))
    return sides


@pytest.mark.benchmark_workload
@pytest.mark.parametrize("k,pairs", [(1, 200_000), (16, 40_000), (256, 4_000)])
def test_pool_churn(impls, side_fixtures, kvconform_record, k, pairs):
    pairs = pairs if side_fixtures is not None else pairs // 20
    sides = _side_by_side(impls, side_fixtures, lambda impl: (
        lambda: (impl.make_block_pool(100_000, False, 16), k, pairs), w.pool_churn), 5)
    for impl, side in zip(impls, sides):
        _record(kvconform_record, side, f"pool.churn_k{k}", impl, block_ops=2 * k * pairs)


@pytest.mark.benchmark_workload
def test_pool_steady_k16(impls, side_fixtures, kvconform_record):
    pairs = 40_000 if side_fixtures is not None else 2_000
    sides = _side_by_side(impls, side_fixtures, lambda impl: (
        lambda: (*w.make_steady_pool(impl), 16, pairs), w.steady_pairs), 5)
    for impl, side in zip(impls, sides):
        _record(kvconform_record, side, "pool.steady_k16", impl, block_ops=32 * pairs)


@pytest.mark.benchmark_workload
def test_pool_evict_k16(impls, side_fixtures, kvconform_record):
    sides = _side_by_side(impls, side_fixtures, lambda impl: (lambda: (w.make_evict_pool(impl),), w.evict_all), 3)
    for impl, side in zip(impls, sides):
        _record(kvconform_record, side, "pool.evict_k16", impl, block_ops=99_984)


STREAMS = list(w.STREAMS)


@pytest.mark.benchmark_workload
@pytest.mark.parametrize("config", STREAMS)
def test_request_stream(impls, side_fixtures, kvconform_record, config):
    shape = w.FULL_SCALE if side_fixtures is not None else w.CI_SCALE

    def make_setup(impl):
        def setup():
            return (w.make_stream_manager(impl, config, shape), w.make_stream_requests(impl, shape, config=config),
                    shape, None, config)
        return setup

    sides = _side_by_side(impls, side_fixtures, lambda impl: (make_setup(impl), w.run_stream), 3)
    for impl, side in zip(impls, sides):
        ops = None
        if side.stats:
            manager, requests, *_ = make_setup(impl)()
            ops = w.count_block_ops(manager.block_pool,
                                    lambda m=manager, r=requests: w.run_stream(m, r, shape, config=config))
        _record(kvconform_record, side, f"stream.{config}", impl, requests=shape.num_requests, block_ops=ops)


@pytest.mark.benchmark_workload
@pytest.mark.parametrize("case", ["hit", "miss"])
def test_lookup_32k(impls, side_fixtures, kvconform_record, case):
    def make_side(impl):
        tokens, hit_req, miss_req = w.lookup_prompts(impl)
        manager = w.prefill_and_free(impl, "full", tokens)
        req = hit_req if case == "hit" else miss_req
        _, hit, _ = manager.get_computed_blocks(req)
        assert hit == (32_752 if case == "hit" else 0), f"32k {case} on {impl.name}: expected hit length, got {hit}"
        return (lambda: (req,)), manager.get_computed_blocks

    sides = _side_by_side(impls, side_fixtures, make_side, 20, freeze=False)
    for impl, side in zip(impls, sides):
        _record(kvconform_record, side, f"lookup32k.{case}", impl, requests=1)


def test_vllm_peer_loads():
    """The peer every ratio needs: vLLM's allocator target builds here (else the workloads above time the
    reference alone, and this skip says why no ratio is shown)."""
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("not applicable: vLLM is not importable in this environment")
    target = load_allocator_target("vllm")
    assert target.name.startswith("vllm-"), f"the vLLM target should name its release, got {target.name!r}"


@pytest.mark.parametrize("config", STREAMS)
def test_block_tables_identical_to_vllm(kvconform_record, config):
    """The reference hands out exactly vLLM's block ids on the request stream (CI scale)."""
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("not applicable: vLLM is not importable in this environment")
    kvconform_record(suite="allocator", cell={"target": "reference-vs-vllm", "scenario": f"stream.{config}",
                                              "section": "9"})
    ref = w.stream_tables_digest(load_allocator_target("reference"), config, w.CI_SCALE)
    vllm = w.stream_tables_digest(load_allocator_target("vllm"), config, w.CI_SCALE)
    assert ref == vllm, f"{config} stream: reference block tables (digest, calls) {ref} differ from vLLM's {vllm}"
