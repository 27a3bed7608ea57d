"""Fixtures of the side-by-side allocator benchmarks (`test_allocator_throughput`, `test_block_pool_throughput`)."""

import pytest

from harness.peer import peer_importable
from harness.target_spec import load_allocator_target
from suites.benchmarks.interleave import make_side_fixtures

IMPLEMENTATIONS = ["reference", "vllm"]


@pytest.fixture(scope="module")
def impls():
    """The implementations every workload runs on, reference first (vLLM only where it is importable)."""
    names = [n for n in IMPLEMENTATIONS if n != "vllm" or peer_importable()]
    return [load_allocator_target(n) for n in names]


@pytest.fixture
def side_fixtures(request, impls):
    """One pytest-benchmark fixture per implementation (None when pytest-benchmark does not time)."""
    return make_side_fixtures(request, [impl.name for impl in impls])
