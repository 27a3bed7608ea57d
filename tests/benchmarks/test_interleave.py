"""The side-by-side runner alternates implementations round by round and records each side's own rounds."""

from __future__ import annotations

import gc

import pytest

from suites.benchmarks.interleave import Side, rounds_capped, run_interleaved, timed_rounds


class _Stats:
    def __init__(self):
        self.durations = []

    def update(self, duration):
        self.durations.append(duration)


class _FakeBenchmarkFixture:
    """pytest-benchmark's runner/stats hooks, with a clock that ticks once per timed call."""

    def __init__(self):
        self.made_stats = []

    def _make_runner(self, target, args, kwargs):
        def runner(loops_range):
            assert loops_range is None, "one call per round"
            return 1.0, target(*args, **kwargs)
        return runner

    def _make_stats(self, iterations):
        stats = _Stats()
        self.made_stats.append(stats)
        return stats


def _logging_side(name, log, fixture):
    return Side(name, setup=lambda: (name,), target=lambda tag: log.append(tag) or tag, fixture=fixture)


def test_rounds_alternate_a_b_a_b():
    log: list[str] = []
    a, b = _FakeBenchmarkFixture(), _FakeBenchmarkFixture()
    run_interleaved([_logging_side("A", log, a), _logging_side("B", log, b)], rounds=3)
    assert log == ["A", "B", "A", "B", "A", "B"], f"rounds must alternate per round, ran {log}"
    assert [len(f.made_stats) for f in (a, b)] == [1, 1], "one statistics series per side"
    assert a.made_stats[0].durations == [1.0] * 3 and b.made_stats[0].durations == [1.0] * 3, \
        "every timed round lands in its own side's statistics"


def test_untimed_runs_each_side_once():
    log: list[str] = []
    run_interleaved([_logging_side("A", log, None), _logging_side("B", log, None)], rounds=5)
    assert log == ["A", "B"], f"without pytest-benchmark timing each side runs once, ran {log}"


def test_rounds_must_be_positive():
    with pytest.raises(ValueError, match="rounds: 0"):
        run_interleaved([], rounds=0)


@pytest.mark.parametrize("cap,timing,rounds,expected", [
    (None, True, 3, 3), ("1", True, 3, 1), ("5", True, 3, 3), (None, False, 3, 1), ("2", False, 3, 1)])
def test_timed_rounds_follow_the_cap(monkeypatch, cap, timing, rounds, expected):
    if cap is None:
        monkeypatch.delenv("KVCONFORM_BENCHMARK_MAX_ROUNDS", raising=False)
    else:
        monkeypatch.setenv("KVCONFORM_BENCHMARK_MAX_ROUNDS", cap)
    assert timed_rounds(timing, rounds) == expected, f"cap {cap}, timing {timing}: {rounds} rounds asked"


def test_a_round_cap_leaves_out_secondary_replays(monkeypatch):
    monkeypatch.delenv("KVCONFORM_BENCHMARK_MAX_ROUNDS", raising=False)
    assert not rounds_capped(), "the benchmarks' own command records every figure"
    monkeypatch.setenv("KVCONFORM_BENCHMARK_MAX_ROUNDS", "1")
    assert rounds_capped()


@pytest.mark.parametrize("cap", ["0", "x", "-1", ""])
def test_a_bad_round_cap_names_the_variable(monkeypatch, cap):
    monkeypatch.setenv("KVCONFORM_BENCHMARK_MAX_ROUNDS", cap)
    with pytest.raises(ValueError, match=f"KVCONFORM_BENCHMARK_MAX_ROUNDS: {cap!r} is not accepted; expected a whole"):
        timed_rounds(True, 3)


def test_an_untimed_pass_leaves_the_frozen_heap_frozen():
    # The session freezes its heap after collection (harness.plugins.collector_gc); a benchmark run as a test must
    # not thaw it, or every later collection of the run walks the whole heap again.
    kept = [object() for _ in range(10)] + [[] for _ in range(10)]
    was_frozen = gc.get_freeze_count()
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        assert frozen > 0, "gc.freeze() froze nothing: the check below could not fail"
        run_interleaved([_logging_side("A", [], None), _logging_side("B", [], None)], rounds=1)
        assert gc.get_freeze_count() == frozen, "the untimed pass unfroze the heap the session froze"
    finally:
        if not was_frozen:
            gc.unfreeze()
    del kept
