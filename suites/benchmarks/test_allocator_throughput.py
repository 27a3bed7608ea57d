"""Allocator throughput (spec section 9): request streams and 32k-token prompt lookups through the
`KVCacheManager`, on the reference and, when importable, vLLM, same workloads (the block pool's own
workloads: `test_block_pool_throughput`).

Each test times both implementations in one process with their rounds interleaved (reference, vLLM,
reference, vLLM, ...; `suites.benchmarks.interleave`), so load from other jobs on a shared machine lands on
both sides alike; each side has its own pytest-benchmark statistics (grouped under the test's name) and its
own results record. Under xdist or `--benchmark-disable` pytest-benchmark does not time: each workload then
runs once at CI scale and no metrics are recorded. `gc.freeze()` after setup on both sides mirrors vLLM's
engine, which freezes its heap at start. A stream's block operations per second come from an instrumented,
untimed replay of the stream (as long as a timed round again), left out where the rounds are capped
(`kvconform report`, CI's vLLM job): those rows give requests/s, the figure their ratio is taken on.
"""


import pytest

from harness.target_spec import load_allocator_target
from suites.benchmarks import workloads as w
from suites.benchmarks.peer import require_vllm
from suites.benchmarks.interleave import record_side, rounds_capped, side_by_side

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

    sides = side_by_side(impls, side_fixtures, lambda impl: (make_setup(impl), w.run_stream), 3)
    for impl, side in zip(impls, sides):
        ops = None
        if side.stats and not rounds_capped():
            manager, requests, *_ = make_setup(impl)()
            ops = w.count_block_ops(manager.block_pool,
                                    lambda m=manager, r=requests: w.run_stream(m, r, shape, config=config))
        record_side(kvconform_record, side, f"stream.{config}", impl, requests=shape.num_requests, block_ops=ops)


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

    sides = side_by_side(impls, side_fixtures, make_side, 20, freeze=False)
    for impl, side in zip(impls, sides):
        record_side(kvconform_record, side, f"lookup32k.{case}", impl, requests=1)


def test_vllm_peer_loads():
    """The peer every ratio needs: vLLM's allocator target builds here (else the workloads above time the
    reference alone, and this skip says why no ratio is shown)."""
    require_vllm()
    target = load_allocator_target("vllm")
    assert target.name.startswith("vllm-"), f"the vLLM target should name its release, got {target.name!r}"


@pytest.mark.parametrize("config", STREAMS)
def test_block_tables_identical_to_vllm(kvconform_record, config):
    """The reference hands out exactly vLLM's block ids on the request stream (CI scale)."""
    require_vllm()
    kvconform_record(suite="allocator", cell={"target": "reference-vs-vllm", "scenario": f"stream.{config}",
                                              "section": "9"})
    vllm_target = load_allocator_target("vllm")
    vllm_target.require("unhashed_lifo")  # another free order hands out other ids by design (N/A)
    ref = w.stream_tables_digest(load_allocator_target("reference"), config, w.CI_SCALE)
    vllm = w.stream_tables_digest(vllm_target, config, w.CI_SCALE)
    assert ref == vllm, f"{config} stream: reference block tables (digest, calls) {ref} differ from vLLM's {vllm}"
