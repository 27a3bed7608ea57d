"""The cyclic garbage collector in a kvconform session: the heap built before the tests is frozen.

After collection a kvconform process holds a few hundred thousand long-lived objects (the imported modules, torch
in the allocator and connector suites, the collected items) that no test frees. CPython's collector walked all of
them again at each full collection (about 15 a process, 2 of the 3 CPU-s of collector time per xdist worker of
`kvconform report`'s allocator and connector pass); `gc.freeze()` after collection moves them out of its reach, and
a young-generation threshold of `YOUNG_THRESHOLD` allocations (CPython's is 700) makes the collections of the
objects the tests build fewer. Garbage is still collected: a cycle the tests drop is freed by the next
collection, which only comes later. What a test checks does not change.

Not in a process that times benchmarks (pytest-benchmark on, not under xdist, a benchmark module collected): a
timed round runs under the collector's defaults there, as in the engines it compares, and each round
freezes the heap itself (`suites.benchmarks.interleave`). Nor in a session kvconform takes no part in
(`harness.plugins.activation`).
"""

from __future__ import annotations

import gc

import pytest

from harness.plugins.activation import SUITES_DIR, is_active

#: allocations (less deallocations) between two collections of the youngest generation
YOUNG_THRESHOLD = 10_000
BENCHMARKS_DIR = SUITES_DIR / "benchmarks"


def times_benchmarks(session: pytest.Session) -> bool:
    """Whether this process times benchmarks: pytest-benchmark times (on, not skipped; it turns itself off under
    xdist) and a collected test is one of the benchmark suite's."""
    timing = getattr(session.config, "_benchmarksession", None)
    if timing is None or timing.disabled or timing.skip:
        return False
    return any(BENCHMARKS_DIR in item.path.parents for item in session.items)


def freeze_heap() -> None:
    """Collect, move every object this process holds out of the collector's reach (`gc.freeze`), and make the
    young generation's collections rarer (`YOUNG_THRESHOLD`)."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, older, oldest)


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    if not is_active(session.config) or times_benchmarks(session):
        return
    freeze_heap()
