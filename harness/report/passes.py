"""How `kvconform report` splits the suites into pytest passes, and how their results become one run.

The config matrix is thousands of tiny tests: under pytest-xdist the controller's per-test bookkeeping costs
more than the tests (about 2.5x the CPU time of a plain run), so the matrix runs in a plain pytest process
*next to* an xdist pass over the other suites; the operating system shares the cores between them. The
benchmarks time nothing under xdist, so when the throughput table needs figures they run once, alone and
without xdist, after the other passes (and not in the xdist pass as well).
"""

from __future__ import annotations

import importlib.util
import pkgutil
from dataclasses import dataclass
from typing import Any

from harness.results_model import ResultsDocument, sort_entries

MATRIX_SUITE = "suites.config"
BENCHMARK_SUITE = "suites.benchmarks"
WHOLE_PACKAGE = "suites"


@dataclass(frozen=True)
class PytestPass:
    """One pytest process: what it runs, with or without xdist, and pass-specific pytest options."""

    label: str
    suites: tuple[str, ...]
    xdist: bool
    options: tuple[str, ...] = ()
    concurrent: bool = True  # may run at the same time as the other concurrent passes


def _subpackages(package: str) -> list[str]:
    """'suites' -> ['suites.allocator', 'suites.benchmarks', ...] (the installed package's own folders)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return []
    return sorted(f"{package}.{info.name}" for info in pkgutil.iter_modules(spec.submodule_search_locations)
                  if info.ispkg)


def plan_passes(suites: list[str], timing: bool) -> list[PytestPass]:
    """The passes for `suites` (the whole `suites` package counts as its sub-packages), as the module says."""
    packages: list[str] = []
    for suite in suites:
        packages += (_subpackages(WHOLE_PACKAGE) or [suite]) if suite == WHOLE_PACKAGE else [suite]
    matrix = [p for p in packages if p == MATRIX_SUITE]
    benchmarks = [p for p in packages if p == BENCHMARK_SUITE]
    others = [p for p in packages if p not in (MATRIX_SUITE, BENCHMARK_SUITE)]
    if not timing:
        others += benchmarks
    plan = []
    if matrix:
        plan.append(PytestPass("config matrix", tuple(matrix), xdist=False))
    if others:
        names = ", ".join(p.removeprefix(WHOLE_PACKAGE + ".") for p in others)
        plan.append(PytestPass(f"{names} suite{'s' if len(others) > 1 else ''}", tuple(others),
                               xdist=True, options=() if timing else ("--benchmark-disable",)))
    if timing and benchmarks:
        plan.append(PytestPass("benchmarks (timed, alone)", tuple(benchmarks), xdist=False, concurrent=False))
    return plan


def combine_passes(documents: list[tuple[PytestPass, ResultsDocument, dict[str, Any]]],
                   run_info: dict[str, Any]) -> ResultsDocument:
    """The passes' results as one run: every entry with run 0, one run_info describing each pass.

    `run_info` holds what the command knows (target, argv, wall time); the first pass's run_info gives the
    environment (versions, machine, commit); timing fields cover the whole command.
    """
    first = documents[0][1].run_info
    info = dict(first)
    for key in ("pytest_args", "pytest_exit_status", "workers"):
        info.pop(key, None)
    info["started_at"] = min(d.run_info.get("started_at") or "" for _, d, _ in documents) or None
    info["finished_at"] = max(d.run_info.get("finished_at") or "" for _, d, _ in documents) or None
    for key in ("target_version",):
        values = [d.run_info.get(key) for _, d, _ in documents if d.run_info.get(key)]
        if values:
            info[key] = values[0]
    info["passes"] = [
        {"label": p.label, "suites": list(p.suites), **details,
         "tests": len(d.results), "workers": d.run_info.get("workers"),
         "pytest_exit_status": d.run_info.get("pytest_exit_status")}
        for p, d, details in documents
    ]
    info.update(run_info)
    entries = [dict(entry, run=0) for _, document, _ in documents for entry in document.results]
    return ResultsDocument(run_info=info, runs=[info], results=sort_entries(entries))
