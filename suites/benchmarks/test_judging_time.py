"""How long judging a config target takes: a correct and a broken target in one run, rounds interleaved.

A CI gate matters most on the pull request that breaks things, so the time to judge a target must not
depend on how wrong it is. Each round judges one era of the config matrix (`KVCONFORM_JUDGE_ERA`, default
`seed`; `all` for the whole matrix) twice, first with the reference resolver, then with `always_hma_on`, a
resolver that answers "HMA on, no warnings" for every cell: each time a fresh `python -m pytest` process
runs the matrix and writes a results file, and the report is rendered from it (what `kvconform report`
does: its matrix pass runs without xdist, one pytest item per era writing one results entry per cell). pytest-benchmark times the round; the figures per target go into the report's
throughput table. The test also holds what makes the two alike: the broken target's console output stays
a screenful and its report still renders.
"""

from __future__ import annotations

import os
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.eras import ERA_IDS
from harness.plugins.config_matrix import MATRIX_TEST
from harness.report import render_reports
from harness.report.passes import ERA_ITEMS
from harness.results_model import load_results
from suites.benchmarks.interleave import timed_rounds

ERA_ENV = "KVCONFORM_JUDGE_ERA"
BROKEN_TARGET = f"{__name__}:always_hma_on"
TARGETS = {"reference resolver": None, "always HMA on": BROKEN_TARGET}
# The grouped console summary is capped at a screenful; the rest of the output is pytest's header and progress.
_CONSOLE_LINE_LIMIT = 400


def always_hma_on(case: dict) -> dict:
    """A broken config target: HMA on and no warning, whatever the case says."""
    return {"id": case.get("id"), "resolved_disable_hma": False, "warnings": [], "error": None, "unknown": None}


def _era() -> str | None:
    era = os.environ.get(ERA_ENV, "seed")
    if era == "all":
        return None
    if era not in ERA_IDS:
        raise pytest.UsageError(f"{ERA_ENV}={era!r}: expected 'all' or one of {', '.join(ERA_IDS)}")
    return era


def judge(target: str | None, era: str | None, scratch: Path) -> tuple[float, dict]:
    """Run the config matrix on `target` (None: the reference) and render its report; (seconds, facts)."""
    results = scratch / "results.json"
    command = [sys.executable, "-m", "pytest", "--pyargs", "suites.config", "-p", "no:cacheprovider",
               "-p", "no:xdist", "-p", "no:randomly", "-rfE", "--kvconform-results", str(results), *ERA_ITEMS]
    command += ["--vllm-version", era] if era else []
    command += ["--hma-target", target] if target else []
    env = {key: value for key, value in os.environ.items() if key != "KVCONFORM_TARGET"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False, timeout=3600)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    rendering = time.perf_counter()
    document = load_results(results)
    render_reports(document)  # rendered as `kvconform report` does: timed, the text itself is not needed
    seconds = time.perf_counter() - started
    statuses = [entry["status"] for entry in document.results]
    failed_cells = sum(entry["status"] == "failed" for entry in document.results if f"::{MATRIX_TEST}[" in entry["id"])
    # CPU seconds of the pytest process: on a shared machine a steadier figure than the wall time
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return seconds, {"returncode": done.returncode, "console": done.stdout + done.stderr, "cells": len(statuses),
                     "failed": statuses.count("failed"), "failed_matrix_cells": failed_cells, "pytest_cpu_s": cpu,
                     "render_s": time.perf_counter() - rendering}


@pytest.mark.benchmark_workload
def test_good_and_broken_target_are_judged_alike(benchmark, kvconform_record, tmp_path):
    era = _era()
    timing = not getattr(benchmark, "disabled", False)
    seconds: dict[str, list[float]] = {name: [] for name in TARGETS}
    cpu: dict[str, list[float]] = {name: [] for name in TARGETS}
    facts: dict[str, dict] = {}

    def one_round() -> None:
        for name, target in TARGETS.items():  # interleaved: reference, broken, reference, broken, ...
            took, facts[name] = judge(target, era, tmp_path)
            seconds[name].append(took)
            cpu[name].append(facts[name]["pytest_cpu_s"])

    # Two timed rounds (reference, broken, reference, broken) interleave the targets against drifting load; each
    # round is two fresh pytest runs of the era (about 8 CPU seconds). `kvconform report` caps them at one.
    benchmark.pedantic(one_round, rounds=timed_rounds(timing, 2), iterations=1)

    good, broken = facts["reference resolver"], facts["always HMA on"]
    assert good["returncode"] == 0 and good["failed"] == 0, f"the reference must pass:\n{good['console'][-3000:]}"
    assert broken["returncode"] == 1 and broken["failed"] > broken["cells"] // 2, (
        f"always_hma_on must fail most cells, failed {broken['failed']} of {broken['cells']}")
    assert "grouped by what went wrong" in broken["console"], "the broken run's failures are grouped"
    lines = broken["console"].count("\n")
    assert lines < _CONSOLE_LINE_LIMIT, f"{broken['failed']} failures printed {lines} lines; a screenful is the promise"
    failing = [int(count) for count in re.findall(r"(\d+) of \d+ config matrix cells of era \S+ failed", broken["console"])]
    assert sum(failing) == broken["failed_matrix_cells"], (
        f"the console should count the {broken['failed_matrix_cells']} failing matrix cells era by era, counted "
        f"{failing}:\n{broken['console'][-3000:]}")

    workload = f"judging the config matrix ({era or 'all eras'}, {good['cells']:,} cells): pytest run + report"
    for name in TARGETS:
        median = statistics.median(seconds[name])
        metrics = {"median_s": median, "requests_per_s": facts[name]["cells"] / median,
                   "pytest_cpu_s": statistics.median(cpu[name]), "render_s": facts[name]["render_s"],
                   "console_bytes": len(facts[name]["console"]), "failed_cells": facts[name]["failed"]}
        kvconform_record(suite="benchmark", cell={"workload": workload, "implementation": f"target: {name}"},
                         **({"metrics": metrics} if timing else {}))
