"""Deterministic shards of a test run (`--shard K/N`), balanced by recorded durations.

A run split over N machines runs shard 1/N, ..., N/N of the same collection; every test lands in exactly one
shard, and the shards' results files merge (`kvconform merge`) into the unsharded run's cells. The assignment
depends only on the tests' node ids and the durations file, never on collection order, hash seeds or the
machine:

1. every test gets a weight: its own recorded seconds where it is slow (at least `SLOW_TEST_SECONDS`: the few
   hundred end-to-end checks that hold most of the time, each listed by node id), else the recorded mean seconds
   per test of its test function (keyed `path::function`, parameters left out, so a file of a few hundred lines
   covers tens of thousands of parametrized cells and stays right as cells are added); a test the file knows
   neither way weighs the mean of the known tests, and without any durations every test weighs the same (equal
   counts);
2. tests are taken heaviest first (ties by node id) and each goes to the shard with the least weight so far
   (ties to the lowest shard): the longest-processing-time rule, which keeps the heaviest shard within one
   test of the mean.

The durations file is written from a results file by `kvconform durations RESULTS... -o FILE`
(`harness.commands.durations`); the committed one is `harness/shard_durations.json`.
"""

from __future__ import annotations

import heapq
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

FORMAT = "kvconform-durations"
DEFAULT_DURATIONS = Path(__file__).resolve().parent / "shard_durations.json"
_SHARD = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")
# A results entry's suffix for a test's second, third, ... record (`harness.plugins.results`).
_RECORD_SUFFIX = re.compile(r"#\d+$")
#: A test at least this slow is listed with its own seconds; faster ones count by their function's mean.
SLOW_TEST_SECONDS = 0.5


class ShardError(ValueError):
    """A `--shard` value or a durations file that cannot be used (one line naming what and what is accepted)."""


@dataclass(frozen=True)
class Shard:
    """Shard `index` (1-based) of `count`."""

    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(value: str) -> Shard:
    """'2/4' -> Shard(2, 4); anything else is a ShardError naming the value and what is accepted."""
    match = _SHARD.match(str(value))
    if match:
        index, count = int(match[1]), int(match[2])
        if count >= 1 and 1 <= index <= count:
            return Shard(index, count)
    raise ShardError(f"--shard {value}: expected K/N with 1 <= K <= N (e.g. 1/4, the first of four shards)")


def function_key(nodeid: str) -> str:
    """The durations file's key of a test: its node id without parameters and without a results entry's
    '#index' suffix ('suites/x.py::test_a[p1-p2]#1' -> 'suites/x.py::test_a')."""
    base = _RECORD_SUFFIX.sub("", nodeid)
    head, bracket, _ = base.partition("[")
    return head if bracket else base


@dataclass(frozen=True)
class Durations:
    """What a durations file says: the seconds of each slow test, and the mean seconds per test of each function
    (its other tests)."""

    tests: Mapping[str, float]
    functions: Mapping[str, float]

    def known(self, nodeid: str) -> float | None:
        """The recorded seconds of a test (its own, else its function's mean), None when unknown."""
        seconds = self.tests.get(nodeid)
        return seconds if seconds is not None else self.functions.get(function_key(nodeid))


NO_DURATIONS = Durations({}, {})


def durations_from_results(entries: Iterable[Mapping]) -> dict:
    """The durations file's content from results entries: {"tests": {node id: seconds} for the slow tests,
    "functions": {function key: {"tests": n, "seconds": total}} over the others} (one count per test: the extra
    entries '#1', '#2' of a test that recorded several cells share its duration)."""
    slow: dict[str, float] = {}
    table: dict[str, dict[str, float]] = {}
    for entry in entries:
        nodeid = str(entry["id"])
        if _RECORD_SUFFIX.search(nodeid):
            continue
        seconds = float(entry.get("duration") or 0.0)
        if seconds >= SLOW_TEST_SECONDS:
            slow[nodeid] = round(seconds, 3)
            continue
        row = table.setdefault(function_key(nodeid), {"tests": 0, "seconds": 0.0})
        row["tests"] += 1
        row["seconds"] += seconds
    functions = {key: {"tests": int(row["tests"]), "seconds": round(row["seconds"], 3)}
                 for key, row in sorted(table.items())}
    return {"tests": dict(sorted(slow.items())), "functions": functions}


def dumps_durations(content: Mapping, source: str) -> str:
    """The durations file's text: deterministic, one test or function per line."""
    def lines(table: Mapping) -> str:
        return ",\n".join(f"  {json.dumps(key, ensure_ascii=False)}: {json.dumps(value, sort_keys=True)}"
                          for key, value in sorted(table.items()))
    head = json.dumps({"format": FORMAT, "source": source}, ensure_ascii=False)[:-1]
    return (f'{head},\n"tests": {{\n{lines(content.get("tests", {}))}\n}},\n'
            f'"functions": {{\n{lines(content.get("functions", {}))}\n}}}}\n')


def load_durations(path: str | os.PathLike) -> Durations:
    """The durations of a durations file; ShardError on a file that is not one."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ShardError(f"--shard-durations {path}: no such file") from None
    except (OSError, ValueError) as exc:
        raise ShardError(f"--shard-durations {path}: cannot be read as JSON ({exc})") from None
    if (not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("functions"), dict)
            or not isinstance(data.get("tests", {}), dict)):
        raise ShardError(f"--shard-durations {path}: not a durations file (accepted: a JSON object with format "
                         f"{FORMAT!r}, 'tests' and 'functions', written by `kvconform durations RESULTS -o FILE`)")
    means = {}
    for key, row in data["functions"].items():
        tests, seconds = (row.get("tests"), row.get("seconds")) if isinstance(row, dict) else (None, None)
        if not isinstance(tests, int) or tests < 1 or not isinstance(seconds, (int, float)) or seconds < 0:
            raise ShardError(f"--shard-durations {path}: functions[{key!r}] is {json.dumps(row)}; accepted: "
                             '{"tests": a count >= 1, "seconds": a total >= 0}')
        means[key] = seconds / tests
    slow = {}
    for key, seconds in data.get("tests", {}).items():
        if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or seconds < 0:
            raise ShardError(f"--shard-durations {path}: tests[{key!r}] is {json.dumps(seconds)}; accepted: "
                             "seconds >= 0")
        slow[key] = float(seconds)
    return Durations(slow, means)


def weights(nodeids: Iterable[str], durations: Durations = NO_DURATIONS) -> dict[str, float]:
    """Each test's expected seconds: as recorded (its own, else its function's mean); unknown tests weigh the mean
    of the known ones (1.0 each when none is known, i.e. equal counts)."""
    recorded = {n: durations.known(n) for n in nodeids}
    known = [seconds for seconds in recorded.values() if seconds is not None]
    fallback = (sum(known) / len(known)) if known else 1.0
    # A test recorded as taking no time still costs something (collection, setup): never weigh zero.
    floor = fallback / 1000 if fallback > 0 else 1e-6
    return {n: max(fallback if seconds is None else seconds, floor) for n, seconds in recorded.items()}


def assign(nodeids: Iterable[str], count: int, durations: Durations = NO_DURATIONS) -> dict[str, int]:
    """Node id -> shard index (1-based) for `count` shards: heaviest first, each to the lightest shard so far."""
    weight = weights(nodeids, durations)
    order = sorted(weight, key=lambda n: (-weight[n], n))
    heap = [(0.0, index) for index in range(1, count + 1)]
    shard_of: dict[str, int] = {}
    for nodeid in order:
        load, index = heapq.heappop(heap)
        shard_of[nodeid] = index
        heapq.heappush(heap, (load + weight[nodeid], index))
    return shard_of


def select(nodeids: Iterable[str], shard: Shard, durations: Durations = NO_DURATIONS) -> set[str]:
    """The node ids that shard `shard` runs."""
    return {n for n, index in assign(nodeids, shard.count, durations).items() if index == shard.index}
