"""Side-by-side timing with pytest-benchmark: one workload on several implementations, rounds interleaved.

`pedantic` on one `benchmark` fixture runs all its rounds back to back, so two implementations timed by two
such calls see different stretches of a shared machine's load. Here every implementation gets its own
pytest-benchmark fixture (its own stats, grouped under the test's name in pytest-benchmark's table) and the
rounds alternate: round 1 of A, round 1 of B, round 2 of A, ... so a burst of load from other jobs lands on
both sides alike and the medians stay comparable.

The rounds are driven through the fixture's runner and stats (pytest-benchmark 4-5 internals `_make_runner`,
`_make_stats` and `_mode`, checked at start so a changed API fails loudly rather than timing nothing).
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from harness.report.passes import MAX_ROUNDS_ENV

__all__ = ["Side", "make_side_fixtures", "run_interleaved", "timed_rounds", "rounds_capped", "side_by_side",
           "record_side"]


def timed_rounds(timing: bool, rounds: int) -> int:
    """`rounds` when timing, capped by $KVCONFORM_BENCHMARK_MAX_ROUNDS (`kvconform report` and CI's vLLM job
    set 1: they want the figures and ratios of the run, not their precision); one untimed pass otherwise."""
    if not timing:
        return 1
    cap = os.environ.get(MAX_ROUNDS_ENV)
    if cap is None:
        return rounds
    if not cap.isdigit() or int(cap) < 1:
        raise ValueError(f"{MAX_ROUNDS_ENV}: {cap!r} is not accepted; expected a whole number >= 1")
    return min(rounds, int(cap))


def rounds_capped() -> bool:
    """Whether $KVCONFORM_BENCHMARK_MAX_ROUNDS caps the rounds (`kvconform report`, CI's vLLM job): such a run
    wants the figures and ratios of its timed rounds, so a workload leaves out an untimed replay that only feeds
    a secondary figure (a request stream's block operations per second; its ratio is on requests/s)."""
    return os.environ.get(MAX_ROUNDS_ENV) is not None


@dataclass
class Side:
    """One implementation's part of a side-by-side workload.

    `setup()` returns the positional arguments of `target` for one round (outside the timed region);
    `fixture` is the pytest-benchmark fixture its rounds are recorded on (None: run once, untimed).
    `freeze`: collect and `gc.freeze()` before each round (what a workload that builds its own state per
    round wants; a microsecond lookup on prepared state is timed without that full-heap walk before it).
    """

    name: str
    setup: Callable[[], Sequence[Any]]
    target: Callable[..., Any]
    fixture: Any = None
    result: Any = None
    freeze: bool = True

    @property
    def stats(self):
        """pytest-benchmark's statistics of this side's rounds (None when nothing was timed)."""
        stats = getattr(self.fixture, "stats", None)
        return stats.stats if stats else None


def make_side_fixtures(request: pytest.FixtureRequest, names: Sequence[str]) -> dict[str, Any] | None:
    """One pytest-benchmark fixture per implementation name for the running test, built as pytest-benchmark
    builds its own `benchmark` fixture; None when pytest-benchmark does not time (disabled, not loaded, or
    under xdist).

    Each is named `<test name>::<implementation>` and grouped under the test's name.
    """
    session = getattr(request.config, "_benchmarksession", None)
    if session is None:  # pytest-benchmark not loaded (-p no:benchmark): run untimed
        return None
    from pytest_benchmark.fixture import BenchmarkFixture

    if session.skip:
        pytest.skip("Benchmarks are skipped (--benchmark-skip was used).")
    if session.disabled:
        return None
    for attr in ("_make_runner", "_make_stats"):
        if not hasattr(BenchmarkFixture, attr):
            raise RuntimeError(f"pytest-benchmark {BenchmarkFixture.__module__}: BenchmarkFixture.{attr} is gone; "
                               "the interleaved runner needs it (pytest-benchmark 4-5)")
    node = request.node
    marker = node.get_closest_marker("benchmark")
    options = dict(session.options, **(marker.kwargs if marker else {}))
    options["group"] = options.get("group") or node.name
    fixtures = {}
    for name in names:
        fixture = BenchmarkFixture(node, add_stats=session.benchmarks.append, logger=session.logger,
                                   warner=node.warn, disabled=False, **options)
        fixture.name = f"{node.name}::{name}"
        fixture.fullname = f"{node.nodeid}::{name}"
        request.addfinalizer(fixture._cleanup)
        fixtures[name] = fixture
    return fixtures


def _one_round(side: Side, stats) -> None:
    args = side.setup()
    if stats is None:
        # Untimed (a test run): no freeze, which only evens out what a timed round pays the collector, while
        # gc.unfreeze() would thaw the heap the session froze after collection (harness.plugins.collector_gc), so
        # that every later collection of the run walked it again.
        side.result = side.target(*args)
        return
    if side.freeze:
        # vLLM's engine freezes its heap after start-up; do the same on both sides, outside the timed region.
        gc.collect()
        gc.freeze()
    try:
        duration, side.result = side.fixture._make_runner(side.target, args, {})(None)
        stats.update(duration)
    finally:
        if side.freeze:
            gc.unfreeze()


def run_interleaved(sides: Sequence[Side], rounds: int) -> None:
    """Run `rounds` rounds of every side in the order A, B, A, B, ... (one untimed pass each when a side has
    no fixture)."""
    if rounds < 1:
        raise ValueError(f"rounds: {rounds!r} is not accepted; expected a whole number >= 1")
    all_stats = []
    for side in sides:
        if side.fixture is not None:
            # what pedantic() sets: marks the fixture used (else pytest-benchmark warns at teardown)
            side.fixture._mode = "run_interleaved(...)"
        all_stats.append(side.fixture._make_stats(1) if side.fixture is not None else None)
    for _ in range(rounds if all(s is not None for s in all_stats) else 1):
        for side, stats in zip(sides, all_stats):
            _one_round(side, stats)


def side_by_side(impls, side_fixtures, make_side, rounds: int, freeze: bool = True) -> list[Side]:
    """Every implementation's (setup, target) from `make_side(impl)`, run with rounds interleaved (`rounds`,
    capped as `timed_rounds` says); the sides in `impls` order (`freeze`: see `Side`)."""
    sides = [Side(impl.name, *make_side(impl), fixture=side_fixtures[impl.name] if side_fixtures else None,
                  freeze=freeze) for impl in impls]
    run_interleaved(sides, timed_rounds(side_fixtures is not None, rounds))
    return sides


def record_side(kvconform_record, side: Side, workload: str, impl, requests=None, block_ops=None) -> None:
    """One results record for `side`'s run of `workload`: its median and rates when it was timed."""
    extra = {}
    stats = side.stats
    if stats:
        median = stats.median
        extra["metrics"] = {"median_s": median,
                            "requests_per_s": requests / median if requests else None,
                            "block_ops_per_s": block_ops / median if block_ops else None,
                            "rounds": stats.rounds}
    kvconform_record(suite="benchmark", cell={"workload": workload, "implementation": impl.name}, **extra)
