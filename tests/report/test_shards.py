"""`--shard K/N` partitions a run, and `kvconform merge` of the shards' results is the unsharded run.

The assignment is checked on synthetic node ids (disjoint, complete, independent of collection order, balanced
by the recorded durations); then a small synthetic suite (passing, failing, skipped and erroring cells, a test
recording two cells) runs in fresh pytest processes unsharded and as three shards (one of them under xdist), and
the merged shards must equal the unsharded run cell for cell (`kvconform diff` exit 0, and the
entries themselves)."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.commands.diff import EXIT_NO_REGRESSION
from harness.plugins.activation import SUITES_DIR
from harness.plugins.shard import shard_id
from harness.report import run_details
from harness.results_model import load_results
from harness.sharding import (DEFAULT_DURATIONS, Durations, Shard, ShardError, assign, durations_from_results,
                              dumps_durations, function_key, load_durations, parse_shard, select)

REPO = Path(__file__).resolve().parents[2]

SUITE = '''
import time
import pytest

@pytest.mark.parametrize("era", ["seed", "v0.33", "v0.34"])
@pytest.mark.parametrize("flag", [None, True, False])
def test_cell(kvconform_record, era, flag):
    outcome = {"resolved_disable_hma": flag, "warnings": [], "error": None, "unknown": None}
    kvconform_record(suite="config", cell={"era": era, "flag": flag}, expected=outcome, actual=outcome)
    assert not (flag is False and era == "seed"), "flag False must not resolve on seed"

@pytest.mark.parametrize("n", range(6))
def test_slow(kvconform_record, n):
    kvconform_record(suite="allocator", cell={"scenario": "slow", "n": n}, actual={"blocks": n})
    if n == 4:
        pytest.skip("not applicable: demo")

@pytest.fixture
def broken():
    raise RuntimeError("setup broke")

def test_setup_error(broken):
    pass

def test_two_records(kvconform_record):
    kvconform_record(suite="connector", cell={"connector": "A", "check": "C01"})
    kvconform_record(suite="connector", cell={"connector": "B", "check": "C01"})
'''
TESTS = 9 + 6 + 1 + 1  # collected tests of SUITE


def test_parse_shard_accepts_k_of_n_only():
    assert parse_shard("2/4") == Shard(2, 4) and str(parse_shard(" 1 / 1 ")) == "1/1"
    for bad in ("0/4", "5/4", "4", "a/b", "1/0", "-1/2", ""):
        with pytest.raises(ShardError, match=r"--shard .*: expected K/N with 1 <= K <= N"):
            parse_shard(bad)


def test_function_key_drops_parameters_and_record_suffix():
    assert function_key("suites/x.py::test_a[p1-p[2]]#1") == "suites/x.py::test_a"
    assert function_key("suites/x.py::Cls::test_b") == "suites/x.py::Cls::test_b"
    assert function_key("suites/x.py::test_c[a#b]") == "suites/x.py::test_c"


def _ids() -> list[str]:
    return ([f"suites/a.py::test_cell[{i}]" for i in range(500)] + [f"suites/b.py::test_slow[{i}]" for i in range(20)]
            + [f"tests/c.py::test_{i}" for i in range(37)])


@pytest.mark.parametrize("count", [1, 2, 3, 4, 7])
def test_shards_partition_every_test_whatever_the_collection_order(count):
    ids = _ids()
    means = Durations(tests={"suites/b.py::test_slow[3]": 9.0},  # tests/c.py: unknown
                      functions={"suites/a.py::test_cell": 0.001, "suites/b.py::test_slow": 2.0})
    shards = [select(ids, Shard(k, count), means) for k in range(1, count + 1)]
    assert sum(len(s) for s in shards) == len(ids) and set().union(*shards) == set(ids)  # disjoint and complete
    shuffled = ids[:]
    random.Random(count).shuffle(shuffled)
    assert assign(shuffled, count, means) == assign(ids, count, means)


def test_shards_balance_recorded_seconds_and_count_unknown_tests_equally():
    ids = _ids()
    functions = {"suites/a.py::test_cell": 0.001, "suites/b.py::test_slow": 2.0}
    shard_of = assign(ids, 4, Durations(tests={}, functions=functions))
    slow = [sum(1 for i in ids if "test_slow" in i and shard_of[i] == k) for k in range(1, 5)]
    assert slow == [5, 5, 5, 5]  # the 40 s of slow tests spread evenly, not by count
    weight = {i: functions.get(function_key(i), (0.5 + 40) / 520) for i in ids}  # unknown: the known tests' mean
    loads = [sum(weight[i] for i in ids if shard_of[i] == k) for k in range(1, 5)]
    assert max(loads) - min(loads) <= 0.08  # within one unknown test's weight
    # A test recorded by name weighs its own seconds: one 30 s test fills a shard of its own.
    heavy = assign(ids, 4, Durations(tests={"tests/c.py::test_0": 30.0}, functions=functions))
    alone = heavy["tests/c.py::test_0"]
    assert [i for i in ids if heavy[i] == alone] == ["tests/c.py::test_0"]
    # Without durations, equal counts: within one test of each other.
    even = [sum(1 for k in assign(ids, 4).values() if k == shard) for shard in range(1, 5)]
    assert max(even) - min(even) <= 1 and sum(even) == len(ids)


def test_durations_file_round_trip(tmp_path):
    entries = [{"id": "suites/x.py::test_a[1]", "duration": 0.25}, {"id": "suites/x.py::test_a[2]", "duration": 0.15},
               {"id": "suites/x.py::test_a[2]#1", "duration": 0.15}, {"id": "suites/x.py::test_a[3]", "duration": 4.0},
               {"id": "tests/y.py::test_b", "duration": 0.3}]
    content = durations_from_results(entries)
    assert content == {"tests": {"suites/x.py::test_a[3]": 4.0},
                       "functions": {"suites/x.py::test_a": {"tests": 2, "seconds": 0.4},
                                     "tests/y.py::test_b": {"tests": 1, "seconds": 0.3}}}
    path = tmp_path / "durations.json"
    path.write_text(dumps_durations(content, source="demo"))
    durations = load_durations(path)
    assert durations.known("suites/x.py::test_a[3]") == 4.0 and durations.known("suites/x.py::test_a[9]") == 0.2
    assert durations.known("tests/y.py::test_b") == 0.3 and durations.known("tests/y.py::test_c") is None
    path.write_text(json.dumps({"format": "kvconform-durations", "functions": {"t": {"tests": 0, "seconds": 1}}}))
    with pytest.raises(ShardError, match=r"functions\['t'\] is .*accepted"):
        load_durations(path)
    path.write_text(json.dumps({"format": "kvconform-durations", "functions": {}, "tests": {"t": "slow"}}))
    with pytest.raises(ShardError, match=r"tests\['t'\] is \"slow\"; accepted: seconds >= 0"):
        load_durations(path)
    path.write_text("[]")
    with pytest.raises(ShardError, match="not a durations file"):
        load_durations(path)


def test_the_shipped_durations_file_loads_and_covers_the_suites():
    durations = load_durations(DEFAULT_DURATIONS)
    suites = {key.split("/", 2)[1] for key in [*durations.tests, *durations.functions] if key.startswith("suites/")}
    assert {"config", "allocator", "connector", "benchmarks"} <= suites


def _pytest(directory: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args], cwd=directory,
                          capture_output=True, text=True, timeout=300)


def _kvconform(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=120)


def _cells(path: Path) -> list[tuple]:
    return sorted((e["id"], e["suite"], json.dumps(e["cell"], sort_keys=True), e["status"], json.dumps(e["actual"]),
             e["message"]) for e in load_results(path).results)


def test_merged_shards_equal_the_unsharded_run(tmp_path):
    (tmp_path / "test_demo.py").write_text(SUITE)
    durations = tmp_path / "durations.json"  # the slow tests are heavy: they must spread over the shards
    durations.write_text(dumps_durations({"functions": {"test_demo.py::test_slow": {"tests": 6, "seconds": 60.0},
                                                        "test_demo.py::test_cell": {"tests": 9, "seconds": 0.09}}},
                                         source="demo"))
    xdist = ("-p", "no:xdist")
    whole = _pytest(tmp_path, *xdist, "--kvconform-results", "whole.json")
    assert whole.returncode == 1, whole.stdout[-2000:]  # a failing cell and an erroring test
    parts, ran = [], []
    for k in (1, 2, 3):
        # shard 2 under pytest-xdist: every worker must pick the same shard as a plain process would
        done = _pytest(tmp_path, *(("-n", "2") if k == 2 else xdist), "--shard", f"{k}/3", "--shard-durations", str(durations),
                       "--kvconform-results", f"shard{k}.json")
        assert done.returncode in (0, 1), done.stdout[-2000:] + done.stderr[-2000:]
        document = load_results(tmp_path / f"shard{k}.json")
        assert document.run_info["shard"] == f"{k}/3"
        ids = {e["id"].split("#")[0] for e in document.results}
        assert sum("test_slow" in i for i in ids) == 2  # 60 s of slow tests: 20 s per shard
        ran.append(ids)
        parts.append(str(tmp_path / f"shard{k}.json"))
    assert sum(len(ids) for ids in ran) == TESTS and len(set().union(*ran)) == TESTS
    merged = tmp_path / "merged.json.gz"
    assert _kvconform("merge", *parts, "-o", str(merged)).returncode == 0
    diff = _kvconform("diff", str(tmp_path / "whole.json"), str(merged))
    assert diff.returncode == EXIT_NO_REGRESSION, diff.stdout + diff.stderr
    assert _cells(merged) == _cells(tmp_path / "whole.json")
    shown = run_details(load_results(merged))  # the HTML report's run lines name each shard
    assert [line.partition(":")[0] for line in shown if line.startswith("Run ")] == \
        ["Run 1 (shard 1/3)", "Run 2 (shard 2/3)", "Run 3 (shard 3/3)"]


def test_bad_shard_options_are_one_line(tmp_path):
    (tmp_path / "test_demo.py").write_text(SUITE)
    done = _pytest(tmp_path, "-p", "no:xdist", "--shard", "4/3")
    assert done.returncode == 4 and "--shard 4/3: expected K/N with 1 <= K <= N" in done.stderr
    done = _pytest(tmp_path, "-p", "no:xdist", "--shard-durations", "nope.json")
    assert done.returncode == 4 and "--shard-durations: only used with --shard K/N" in done.stderr
    done = _kvconform("report", "--shard", "1/2", "--shard-durations", str(tmp_path / "nope.json"))
    assert done.returncode == 2 and done.stderr.strip().endswith("nope.json: no such file"), done.stderr
    done = _kvconform("durations", str(tmp_path / "test_demo.py"), "-o", str(tmp_path / "d.json"))
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "kvconform durations: results file" in done.stderr



def test_a_suite_test_is_sharded_by_its_path_under_suites_whatever_the_rootdir():
    """Machines whose suites lie elsewhere (a checkout, an installed package) get other node ids for the same test;
    the shard is cut, and the durations looked up, on its path under `suites/`."""
    path = SUITES_DIR / "config" / "test_matrix.py"
    ids = [shard_id(SimpleNamespace(path=path, nodeid=f"{prefix}test_matrix.py::test_config_cell[seed-1]"))
           for prefix in ("suites/config/", "", "../venv/lib/python3.11/site-packages/suites/config/")]
    assert ids == ["suites/config/test_matrix.py::test_config_cell[seed-1]"] * 3
    assert load_durations(DEFAULT_DURATIONS).known(ids[0]) is not None
    elsewhere = SimpleNamespace(path=REPO / "tests" / "test_x.py", nodeid="tests/test_x.py::test_y")
    assert shard_id(elsewhere) == "tests/test_x.py::test_y"
