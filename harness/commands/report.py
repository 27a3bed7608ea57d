"""`kvconform report`: run the suites with pytest-xdist and write the compatibility report.

Writes `compatibility.md`, `compatibility.html` and `results.json` into `reports/` (or `--output-dir`), all
three atomically and only once everything rendered. `--from RESULTS.json` renders an earlier (or merged) run
without running anything. Arguments after `--` go to pytest unchanged.

pytest-benchmark times nothing under xdist, so the throughput table of a plain run says "not timed";
`--timing` runs the benchmark suite once more without xdist and puts its timed results in the report.

Exit status: 0 every test behaved as expected, 1 conformance failures, 2 usage error, 4 the target could not
be loaded, 5 nothing ran.
"""

from __future__ import annotations

import argparse

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness.atomic_write import ensure_writable_dir, write_files_atomic
from harness.eras import EraSelectionError, select_eras
from harness.errors import EXIT_FAILURES, EXIT_NOTHING_RAN, EXIT_OK, EXIT_TARGET, UsageError
from harness.report import HTML_NAME, MARKDOWN_NAME, RESULTS_NAME, render_reports
from harness.results_model import ResultsDocument, ResultsFileError, load_results, sort_entries
from harness.target_spec import load_target
from harness.plugins.connector import check_pytest_args
from harness.targets.connector_target import check_loadable

DEFAULT_OUTPUT_DIR = "reports"
DEFAULT_SUITES = ("suites",)
BENCHMARK_SUITE = "suites.benchmarks"
# pytest's own exit codes (pytest.ExitCode) that mean something other than "tests ran".
_PYTEST_INTERRUPTED, _PYTEST_INTERNAL_ERROR, _PYTEST_USAGE_ERROR, _PYTEST_NO_TESTS = 2, 3, 4, 5


def register(subparsers) -> None:
    """Add the `report` subcommand."""
    parser = subparsers.add_parser(
        "report",
        help="run the conformance suites and write the compatibility report",
        description=__doc__.split("\n\n")[0],
    )
    parser.add_argument("--target", metavar="MODULE:CALLABLE",
                        help="config target to test instead of the reference resolver (passed as --hma-target)")
    parser.add_argument("--from", dest="from_file", metavar="RESULTS.json",
                        help="render this results file (e.g. from `kvconform merge`) instead of running the suites")
    parser.add_argument("--output-dir", default=DEFAULT_OUTPUT_DIR, metavar="DIR",
                        help="folder for compatibility.md/.html and results.json (default: reports)")
    parser.add_argument("--vllm-version", metavar="X.Y.Z|ERA",
                        help="only this vLLM release or rule era (a version, an era id, pre-seed, seed or v0.33)")
    parser.add_argument("--kv-connector", metavar="NAME|MODULE:CLASS",
                        help="connector to check (passed to the suites); with --from, keep only this connector's rows")
    parser.add_argument("--suite", dest="suites", action="append", metavar="PACKAGE",
                        help="suite package or path to run (repeatable; default: suites)")
    parser.add_argument("-n", "--workers", default="auto", metavar="N|auto",
                        help="pytest-xdist worker processes (default: auto)")
    parser.add_argument("--timing", action=argparse.BooleanOptionalAction, default=None,
                        help=f"afterwards run {BENCHMARK_SUITE} without xdist so the throughput table has figures "
                             "(default: on when the default suites run; --no-timing skips it)")
    parser.set_defaults(run=run, accepts_extra=True)


def _eras(value: str | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    try:
        return select_eras(value)
    except EraSelectionError as exc:
        raise UsageError(str(exc)) from None


def _pytest_command(args, suites: list[str], results_path: Path, xdist: bool) -> list[str]:
    command = [sys.executable, "-m", "pytest", "--pyargs", *suites, "-p", "no:cacheprovider",
               "-rfE", "--kvconform-results", str(results_path)]
    command += ["-n", str(args.workers)] if xdist else ["-p", "no:xdist"]
    if args.target:
        command += ["--hma-target", args.target]
    if args.vllm_version:
        command += ["--vllm-version", args.vllm_version]
    if args.kv_connector:
        command += ["--kv-connector", args.kv_connector]
    extra = list(args.extra)
    if extra[:1] == ["--"]:
        extra = extra[1:]
    return command + extra


def _run_pytest(args, suites: list[str], xdist: bool) -> ResultsDocument:
    """Run pytest in a subprocess (its progress goes straight to the terminal) and load its results."""
    with tempfile.TemporaryDirectory(prefix="kvconform-report-") as scratch:
        results_path = Path(scratch) / "results.json"
        command = _pytest_command(args, suites, results_path, xdist)
        how = f"pytest-xdist (-n {args.workers})" if xdist else "pytest without xdist (timed)"
        print(f"kvconform report: running {' '.join(suites)} with {how} on target {args.target or 'reference'}",
              flush=True)
        started = time.perf_counter()
        try:
            returncode = subprocess.run(command, check=False).returncode
        except OSError as exc:
            raise UsageError(f"kvconform report: cannot start pytest ({exc})", EXIT_TARGET) from None
        wall = time.perf_counter() - started
        if returncode == _PYTEST_NO_TESTS:
            raise UsageError("kvconform report: nothing ran (pytest collected no tests)", EXIT_NOTHING_RAN)
        if returncode == _PYTEST_INTERRUPTED and not results_path.exists():
            raise UsageError("kvconform report: the run was interrupted; no report written", EXIT_TARGET)
        if returncode == _PYTEST_USAGE_ERROR:
            if args.target:
                raise UsageError(f"kvconform report: pytest could not start with target {args.target!r} "
                                 "(its message is above); no report written", EXIT_TARGET)
            raise UsageError("kvconform report: pytest rejected the arguments (its message is above); "
                             "no report written")
        if returncode == _PYTEST_INTERNAL_ERROR or not results_path.exists():
            raise UsageError(f"kvconform report: pytest stopped with exit status {returncode} before writing "
                             "results (its message is above); no report written", EXIT_TARGET)
        try:
            results = load_results(results_path)
        except ResultsFileError as exc:
            raise UsageError(f"kvconform report: {exc}", EXIT_TARGET) from None
    results.run_info["report_wall_seconds"] = round(wall, 3)
    pytest_args = command[3:]
    position = pytest_args.index("--kvconform-results")
    del pytest_args[position:position + 2]
    results.run_info["pytest_args"] = pytest_args
    return results


def with_timed_benchmarks(results: ResultsDocument, timed: ResultsDocument) -> ResultsDocument:
    """`results` with each benchmark test replaced by its timed run (kept as a second run)."""
    timed_ids = {entry["id"] for entry in timed.results}
    second = len(results.runs)
    entries = [e for e in results.results if e["id"] not in timed_ids]
    entries += [dict(entry, run=second) for entry in timed.results]
    return ResultsDocument(run_info=results.run_info, runs=[*results.runs, timed.run_info],
                           results=sort_entries(entries))


def _filtered(results: ResultsDocument, eras: tuple[str, ...] | None, connector: str | None) -> ResultsDocument:
    """Keep the entries of the chosen eras and connector (entries without such a dimension stay)."""
    def keep(entry: dict) -> bool:
        cell = entry.get("cell") or {}
        if eras is not None and "era" in cell and cell["era"] not in eras:
            return False
        return connector is None or "connector" not in cell or cell["connector"] == connector
    if eras is None and connector is None:
        return results
    run_info = dict(results.run_info, vllm_version=results.run_info.get("vllm_version") or (",".join(eras) if eras else None))
    return ResultsDocument(run_info=run_info, runs=results.runs, results=[e for e in results.results if keep(e)])


def exit_status(results: ResultsDocument) -> int:
    """5 when nothing ran (no entry, or every one skipped), 1 when any failed or errored, else 0."""
    statuses = [entry["status"] for entry in results.results]
    if not statuses or all(status == "skipped" for status in statuses):
        return EXIT_NOTHING_RAN
    if any(status in ("failed", "error") for status in statuses):
        return EXIT_FAILURES
    return EXIT_OK


def run(args) -> int:
    """Run (or load), render, write atomically, and say where the report is."""
    try:
        output_dir = ensure_writable_dir(args.output_dir)
    except OSError as exc:
        raise UsageError(f"kvconform report: --output-dir {args.output_dir}: cannot write there "
                         f"({exc.strerror or exc})") from None
    eras = _eras(args.vllm_version)
    if args.from_file:
        if args.extra:
            raise UsageError(f"kvconform report: pytest arguments ({' '.join(args.extra)}) make no sense with --from")
        if args.target or args.timing:
            raise UsageError(f"kvconform report: {'--target' if args.target else '--timing'} and --from exclude "
                             "each other (--from runs nothing)")
        try:
            results = _filtered(load_results(args.from_file), eras, args.kv_connector)
        except ResultsFileError as exc:
            raise UsageError(f"kvconform report: {exc}") from None
    else:
        if args.target:
            load_target(args.target)  # fail fast, with one line and exit 4, before pytest starts
        if args.kv_connector:
            check_loadable(args.kv_connector)  # the same for a connector
        try:
            check_pytest_args(list(args.extra))
        except ValueError as exc:
            raise UsageError(f"kvconform report: {exc}") from None
        results = _run_pytest(args, args.suites or list(DEFAULT_SUITES), xdist=True)
        # pytest-benchmark times nothing under xdist: the throughput figures need a second, serial pass
        timing = args.timing if args.timing is not None else not args.suites
        if timing:
            results = with_timed_benchmarks(results, _run_pytest(args, [BENCHMARK_SUITE], xdist=False))
    files = render_reports(results)
    try:
        write_files_atomic({output_dir / name: text for name, text in files.items()})
    except OSError as exc:
        raise UsageError(f"kvconform report: cannot write the report into {output_dir} ({exc.strerror or exc})") from None
    status = exit_status(results)
    failures = sum(1 for e in results.results if e["status"] in ("failed", "error"))
    where = f"{output_dir / MARKDOWN_NAME} (and {output_dir / HTML_NAME}, {output_dir / RESULTS_NAME})"
    if status == EXIT_FAILURES:
        print(f"kvconform report: {failures} conformance failure(s); the full report is in {where}")
    elif status == EXIT_NOTHING_RAN:
        print(f"kvconform report: nothing ran (every test was skipped or none was selected); report in {where}")
    else:
        print(f"kvconform report: {len(results.results)} results as expected; report in {where}")
    return status

