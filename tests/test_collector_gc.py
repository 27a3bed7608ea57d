"""The collector setting of kvconform sessions stays out of processes that time benchmarks
(`harness.plugins.collector_gc`)."""

from __future__ import annotations

from types import SimpleNamespace

from harness.plugins.activation import SUITES_DIR
from harness.plugins.collector_gc import BENCHMARKS_DIR, times_benchmarks


def _session(items, *, timing=True, disabled=False, skip=False):
    benchmarks = SimpleNamespace(disabled=disabled, skip=skip) if timing else None
    config = SimpleNamespace(_benchmarksession=benchmarks)
    return SimpleNamespace(config=config, items=[SimpleNamespace(path=path) for path in items])


BENCH = BENCHMARKS_DIR / "test_allocator_throughput.py"
OTHER = SUITES_DIR / "allocator" / "test_state_machine.py"


def test_a_timed_benchmark_module_keeps_the_defaults():
    assert times_benchmarks(_session([OTHER, BENCH]))


def test_benchmarks_that_time_nothing_do_not_count():
    # under xdist pytest-benchmark turns itself off; -p no:benchmark removes it; --benchmark-skip skips
    assert not times_benchmarks(_session([BENCH], disabled=True))
    assert not times_benchmarks(_session([BENCH], timing=False))
    assert not times_benchmarks(_session([BENCH], skip=True))


def test_a_session_without_benchmark_modules_is_tuned():
    assert not times_benchmarks(_session([OTHER]))
    assert not times_benchmarks(_session([]))
