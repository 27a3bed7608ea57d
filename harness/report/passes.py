"""How `kvconform report` splits the suites into pytest passes, and how their results become one run.

The passes run in two stages; the passes of one stage run at the same time and the operating system shares
the cores between them. What happens to the benchmark suite is decided first (`benchmark_mode`): the throughput
table compares an implementation with its peer, vLLM, so with the default suites the benchmarks are timed only where
vLLM is importable (or with `--timing`), and otherwise do not run at all (`NOT_RUN`; the README test command runs
them as tests); `--no-timing`, or suites named with `--suite`, run them once untimed beside the other suites. The
run's `run_info` records the decision (`benchmark_record`), and the report's throughput section reads it.

1. The config matrix is thousands of tiny tests: under pytest-xdist the per-test bookkeeping costs more than
   the tests (about 2.5x the CPU time of a plain run), so the matrix runs in a plain pytest process, as one
   pytest item per era (`ERA_ITEMS`) that writes one results entry per cell (unless pytest arguments or `--shard`
   need one item per cell), *next to* the other suites: one plain pytest process per suite where that makes as
   many processes as cores or one more (on two cores: the matrix, the allocator suite and the connector suite, three
   processes of about equal CPU time that the operating system shares, so they end about together, with no xdist
   controller and each collecting its own suite only), else one xdist pass (work stealing) over them.
2. The benchmarks time nothing under xdist, so when the throughput table needs figures they run without
   xdist, each timed process on a core of its own: the allocator throughput workloads in one process and the
   other benchmark modules in another, one per core (each process is single-threaded, and every comparison
   in them interleaves its rounds), or in one process on a single core. One of the allocator module's request
   streams (`MOVED_STREAM`) runs in the other process, so that the two end about together (not when pytest
   arguments or a shard are given: the modules then run whole, as those name them). Each workload gets
   `REPORT_TIMED_ROUNDS` timed rounds unless `$KVCONFORM_BENCHMARK_MAX_ROUNDS` says otherwise. A timed pass
   starts once every earlier pass has started, no xdist pass is running and a core is free
   (`may_start`): when one stage-1 process is left, the first timed pass runs beside it instead of waiting for
   it, as the two timed passes run beside each other.

Every pass runs torch on one thread (`OMP_NUM_THREADS=1` unless the environment sets it). On the reference
allocator the report runs the first `REPORT_STATE_MACHINE_EXAMPLES` examples of each allocator state machine
(`$KVCONFORM_STATE_MACHINE_EXAMPLES`), as does the README test command (the gate, tests/gate.toml); the full
run (`pytest --full`, and CI) runs all of them, and an allocator given with
`--kv-allocator` gets all of them in the report too.
"""

from __future__ import annotations

import importlib.util
import os
import pkgutil
from dataclasses import dataclass
from typing import Any

from harness import peer
from harness.portable_paths import portable_path, portable_text
from harness.results_model import ResultsDocument, sort_entries

MATRIX_SUITE = "suites.config"
BENCHMARK_SUITE = "suites.benchmarks"
WHOLE_PACKAGE = "suites"
# The benchmark module that gets a timed process of its own (about half of the benchmarks' time).
ALLOCATOR_BENCHMARKS = "suites.benchmarks.test_allocator_throughput"
# Its four request streams are most of the timed benchmarks' CPU time (about 15 of 28 CPU-s): the Mamba stream
# (about 3) runs in the other timed process, so that the two processes, one per core, end about together.
MOVED_STREAM_TEST, MOVED_STREAM = "test_request_stream", "full_mamba_partial"
MAX_ROUNDS_ENV = "KVCONFORM_BENCHMARK_MAX_ROUNDS"
# Every pass runs torch single-threaded: the suites' tensors are tiny, and an intra-op thread pool per process
# only spins on cores the other passes (and the other benchmark process) need.
SINGLE_THREADED = (("OMP_NUM_THREADS", "1"),)
# Timed rounds per workload in the report: one, as in CI's vLLM job; the figures in docs/ci.md and docs/reference.md come from the
# benchmarks' own command with their full rounds.
REPORT_TIMED_ROUNDS = "1"
# Examples per configuration of the allocator suite's Hypothesis state machines (test_state_machine: 200,
# test_kv_events' replay: 60): the full test run (`pytest --full`; CI) runs every one on the same reference
# allocator at the same commit; in the report they were about half of the allocator and connector pass's CPU time.
STATE_MACHINE_EXAMPLES_ENV = "KVCONFORM_STATE_MACHINE_EXAMPLES"
REPORT_STATE_MACHINE_EXAMPLES = "40"


# What the report does with the benchmark suite (`benchmark_mode`), and where its run records it (`benchmark_record`).
TIMED, UNTIMED, NOT_RUN = "timed", "untimed", "not run"
BENCHMARKS_KEY = "benchmarks"

# The config matrix pass judges each era's cells in one pytest item (`--config-matrix-items era`) that hands the
# results file one entry per cell, the entry the cell's own item would have written: pytest's own cost per item
# (its three phases and their hooks) was most of the pass's time over 31,674 cells.
ERA_ITEMS = ("--config-matrix-items", "era")


@dataclass(frozen=True)
class PytestPass:
    """One pytest process: what it runs, with or without xdist, and pass-specific pytest options."""

    label: str
    suites: tuple[str, ...]
    xdist: bool
    options: tuple[str, ...] = ()
    stage: int = 1  # passes of one stage run at the same time; stages run in order
    env: tuple[tuple[str, str], ...] = SINGLE_THREADED  # set for this pass unless the environment has them


def _members(package: str, *, packages: bool) -> list[str]:
    """The installed package's sub-packages ('suites' -> ['suites.allocator', ...]) or, with `packages`
    false, its test modules ('suites.benchmarks' -> ['suites.benchmarks.test_...', ...]); sorted, empty
    when `package` is not an importable package."""
    try:
        spec = importlib.util.find_spec(package)
    except ModuleNotFoundError:
        return []
    if spec is None or not spec.submodule_search_locations:
        return []
    return sorted(f"{package}.{info.name}" for info in pkgutil.iter_modules(spec.submodule_search_locations)
                  if info.ispkg == packages and (packages or info.name.startswith("test_")))


def usable_cpus() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _timed_benchmark_passes(cpus: int, cell_items: bool) -> list[PytestPass]:
    env = SINGLE_THREADED + ((MAX_ROUNDS_ENV, REPORT_TIMED_ROUNDS),)
    modules = _members(BENCHMARK_SUITE, packages=False)
    rest = tuple(m for m in modules if m != ALLOCATOR_BENCHMARKS)
    if cpus < 2 or ALLOCATOR_BENCHMARKS not in modules or not rest:
        return [PytestPass("benchmarks (timed)", (BENCHMARK_SUITE,), xdist=False, stage=2, env=env)]
    if cell_items:  # pytest arguments after `--` (a `-k` of their own) or a shard: whole modules, as they name them
        return [PytestPass("allocator benchmarks (timed)", (ALLOCATOR_BENCHMARKS,), xdist=False, stage=2, env=env),
                PytestPass("other benchmarks (timed)", rest, xdist=False, stage=2, env=env)]
    moved = f"{ALLOCATOR_BENCHMARKS}::{MOVED_STREAM_TEST}[{MOVED_STREAM}]"
    return [PytestPass("allocator benchmarks (timed)", (ALLOCATOR_BENCHMARKS,), xdist=False, stage=2, env=env,
                       options=("-k", f"not ({MOVED_STREAM_TEST} and {MOVED_STREAM})")),
            PytestPass("other benchmarks (timed)", (*rest, moved), xdist=False, stage=2, env=env)]


def _packages(suites: list[str]) -> list[str]:
    """`suites` with the whole `suites` package as its sub-packages."""
    packages: list[str] = []
    for suite in suites:
        packages += (_members(WHOLE_PACKAGE, packages=True) or [suite]) if suite == WHOLE_PACKAGE else [suite]
    return packages


def runs_benchmarks(suites: list[str]) -> bool:
    """Whether `suites` include the benchmark suite (the whole `suites` package does)."""
    return BENCHMARK_SUITE in _packages(suites)


def benchmark_mode(timing: bool | None, default_suites: bool) -> str:
    """What the report does with the benchmark suite: `TIMED` with `--timing` (`timing` True), and by default with
    the default suites where the peer is importable; `UNTIMED` (once, beside the other suites) with `--no-timing` or
    suites named with `--suite`; `NOT_RUN` with the default suites and no peer: their figures are for a ratio to the
    peer's, and the README test command runs them as tests."""
    if timing is not None:
        return TIMED if timing else UNTIMED
    if not default_suites:
        return UNTIMED
    return TIMED if peer.peer_importable() else NOT_RUN


def benchmark_record(mode: str) -> dict[str, Any]:
    """`run_info["benchmarks"]` of a run whose suites include the benchmarks: the decision and what it rested on
    (the report's throughput section reads it, not the absence of entries)."""
    return {"mode": mode, "peer": peer.PEER_PACKAGE, "peer_importable": peer.peer_importable()}


def plan_passes(suites: list[str], benchmarks: str, cpus: int | None = None,
                cell_items: bool = False) -> list[PytestPass]:
    """The passes for `suites` (the whole `suites` package counts as its sub-packages), as the module says, with the
    benchmark suite `TIMED`, `UNTIMED` or `NOT_RUN` (`benchmark_mode`); `cpus`: how many the timed benchmarks may
    use (default: this process's); `cell_items`: the config matrix as one pytest item per cell, as pytest arguments
    (`-k`, `--junitxml`, `--shard`) select and name them, rather than one per era (`ERA_ITEMS`)."""
    if benchmarks not in (TIMED, UNTIMED, NOT_RUN):
        raise ValueError(f"benchmarks: {benchmarks!r} is not accepted; expected {TIMED!r}, {UNTIMED!r} or {NOT_RUN!r}")
    packages = _packages(suites)
    matrix = [p for p in packages if p == MATRIX_SUITE]
    benchmark_suites = [p for p in packages if p == BENCHMARK_SUITE]
    others = [p for p in packages if p not in (MATRIX_SUITE, BENCHMARK_SUITE)]
    if benchmarks == UNTIMED:
        others += benchmark_suites
    plan = []
    if matrix:
        plan.append(PytestPass("config matrix", tuple(matrix), xdist=False, options=() if cell_items else ERA_ITEMS))
    cpus = usable_cpus() if cpus is None else cpus
    untimed = ("--benchmark-disable",) if benchmarks == UNTIMED else ()
    others_env = SINGLE_THREADED + ((STATE_MACHINE_EXAMPLES_ENV, REPORT_STATE_MACHINE_EXAMPLES),)
    if len(others) > 1 and cpus <= len(matrix) + len(others) <= cpus + 1:
        # as many processes as cores, or one more: one plain process per suite, beside the matrix's, and the
        # operating system shares the cores (no xdist controller, and each process collects its own suite only);
        # more processes than that cost more in starts than they save (`--no-timing`'s four on two cores: about
        # 9 CPU-s more than the xdist pass, docs/speed.md)
        plan += [PytestPass(f"{p.removeprefix(WHOLE_PACKAGE + '.')} suite", (p,), xdist=False, options=untimed,
                            env=others_env) for p in others]
    elif others:
        names = ", ".join(p.removeprefix(WHOLE_PACKAGE + ".") for p in others)
        plan.append(PytestPass(f"{names} suite{'s' if len(others) > 1 else ''}", tuple(others), xdist=True,
                               options=("--dist", "worksteal") + untimed, env=others_env))
    if benchmarks == TIMED and benchmark_suites:
        plan += _timed_benchmark_passes(cpus, cell_items)
    return plan


def may_start(candidate: PytestPass, pending: list[PytestPass], running: list[PytestPass], cpus: int) -> bool:
    """Whether `candidate` may start now, given the passes not started yet (`pending`, in plan order) and those
    still `running`. A stage-1 pass starts at once (its passes share the cores as the operating system sees
    fit); a later stage's pass once no pass of an earlier stage waits to start, no xdist pass is running and
    fewer than `cpus` passes are (so each timed process has a core of its own)."""
    if candidate.stage <= 1:
        return True
    return (not any(p.stage < candidate.stage for p in pending) and not any(p.xdist for p in running)
            and len(running) < max(cpus, 1))


def capped_examples(examples: int) -> int:
    """`examples`, capped by $KVCONFORM_STATE_MACHINE_EXAMPLES where it is set (`kvconform report` sets it for the
    reference allocator)."""
    cap = os.environ.get(STATE_MACHINE_EXAMPLES_ENV)
    if cap is None:
        return examples
    if not cap.isdigit() or int(cap) < 1:
        raise ValueError(f"{STATE_MACHINE_EXAMPLES_ENV}: {cap!r} is not accepted; expected a whole number >= 1")
    return min(examples, int(cap))


def pass_environment(pytest_pass: PytestPass, allocator: str) -> dict[str, str]:
    """The settings a pass sets (the environment's own win): without the state machine cap when the allocator
    under test (`--kv-allocator`) is not the reference, whose every example the README test command runs."""
    env = dict(pytest_pass.env)
    if allocator != "reference":
        env.pop(STATE_MACHINE_EXAMPLES_ENV, None)
    return {**env, **os.environ}


def combine_passes(documents: list[tuple[PytestPass, ResultsDocument, dict[str, Any]]],
                   run_info: dict[str, Any]) -> ResultsDocument:
    """The passes' results as one run: every entry with run 0, one run_info describing each pass.

    `run_info` holds what the command knows (argv, wall time, the target when no pass names one); the first pass's
    run_info gives the environment (versions, machine, commit); timing fields cover the whole command. The target
    is what the passes say ran, each part once ("connectors mypkg.mod:MyConnector" from the connector suite's
    pass, beside a config pass on the reference, which names none).
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
        {"label": portable_text(p.label), "suites": [portable_path(s) for s in p.suites], **details,
         "tests": len(d.results), "workers": d.run_info.get("workers"),
         "pytest_exit_status": d.run_info.get("pytest_exit_status")}
        for p, d, details in documents
    ]
    targets: list[str] = []
    for _, document, _ in documents:
        for part in str(document.run_info.get("target") or "").split("; "):
            if part and part not in targets:
                targets.append(part)
    info.update(run_info)
    if targets:
        info["target"] = "; ".join(targets)
    entries = [dict(entry, run=0) for _, document, _ in documents for entry in document.results]
    return ResultsDocument(run_info=info, runs=[info], results=sort_entries(entries))
