"""`kvconform report`: run the suites and write the compatibility report.

Writes `compatibility.md`, `compatibility.html` and `results.json.gz` into `reports/` (or `--output-dir`), all
three atomically and only once everything rendered. `--from RESULTS.json` renders an earlier (or merged) run
without running anything. Arguments after `--` go to pytest unchanged:

    kvconform report [OPTIONS] [-- PYTEST_ARGS ...]      e.g. kvconform report --suite suites.config -- -x -k seed

The suites run as a few pytest passes (`harness.report.passes`: the config matrix without xdist next to the other
suites, a plain process each on a machine of few cores, else one xdist pass; then the benchmarks timed, each
process on a core of its own, where vLLM, the peer their throughput table compares with, is importable or with
`--timing`); one progress line per pass says what runs, done/total and the time left (`-- -v` or `-- -q` shows
pytest's own output instead).

Exit status: 0 every test behaved as expected, 1 conformance failures, 2 usage error, 4 the target could not
be loaded, 5 nothing ran, 130/143 stopped by SIGINT (Ctrl-C) / SIGTERM (pytest and its workers are stopped
too, no report is written and earlier reports stay as they were). Nothing is created (not even
`--output-dir`) unless the report is written.

`-- --junitxml FILE` writes one JUnit XML file covering every pass: one <testsuite> per pass, merged after the
run (each pass writes its own part first; `harness.junit`).
"""

from __future__ import annotations

import argparse
import functools
import gc
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path

from harness.atomic_write import ensure_writable_dir, probe_writable, write_files_atomic
from harness.bytecode import share_bytecode
from harness.eras import PROFILES, EraSelectionError, select_eras
from harness.junit import merge_junit, split_junit_option
from harness.portable_paths import portable_argument
from harness.kv_engine import check_kv_engine
from harness.process_group import SignalForwarder
from harness.report_options import check_report_options
from harness.errors import EXIT_FAILURES, EXIT_NOTHING_RAN, EXIT_OK, EXIT_TARGET, UsageError
from harness.report import HTML_NAME, MARKDOWN_NAME, RESULTS_NAME, encode_results_file, render_reports
from harness.report.spec_refs import relink_docs_page
from harness.report.passes import (BENCHMARK_SUITE, BENCHMARKS_KEY, MAX_ROUNDS_ENV, REPORT_TIMED_ROUNDS, PytestPass,
                                   benchmark_mode, benchmark_record, combine_passes, may_start, pass_environment,
                                   plan_passes, runs_benchmarks, usable_cpus)
from harness.report.summary_section import verdict
from harness.report.progress import PLUGIN as PROGRESS_PLUGIN, PROGRESS_ENV, ProgressMonitor
from harness.report.pytest_output import print_pytest_log, wants_pytest_output
from harness.report.pytest_process import pytest_command
from harness.results_model import ResultsDocument, ResultsFileError, load_results
from harness.upstream.results import UpstreamResultsError, load_upstream
from harness.target_spec import load_allocator_target, load_config_target
from harness.plugins.collector_gc import freeze_heap
from harness.plugins.connector import check_pytest_args
from harness.report_options import option_values
from harness.sharding import ShardError, load_durations, parse_shard

DEFAULT_OUTPUT_DIR = "reports"
DEFAULT_SUITES = ("suites",)
# pytest's own exit codes (pytest.ExitCode) that mean something other than "tests ran".
_PYTEST_INTERRUPTED, _PYTEST_INTERNAL_ERROR, _PYTEST_USAGE_ERROR, _PYTEST_NO_TESTS = 2, 3, 4, 5


def register(subparsers) -> None:
    """Add the `report` subcommand."""
    parser = subparsers.add_parser(
        "report",
        help="run the conformance suites and write the compatibility report",
        description=__doc__,
        usage="kvconform report [OPTIONS] [-- PYTEST_ARGS ...]",
    )
    parser.add_argument("--target", metavar="MODULE:CALLABLE",
                        help="config target to test instead of the reference resolver (passed as --hma-target)")
    parser.add_argument("--from", dest="from_file", metavar="RESULTS.json",
                        help="render this results file (e.g. from `kvconform merge`) instead of running the suites")
    parser.add_argument("--output-dir", default=DEFAULT_OUTPUT_DIR, metavar="DIR",
                        help="folder for compatibility.md/.html and results.json.gz (default: reports)")
    parser.add_argument("--vllm-version", metavar="X.Y.Z|ERA",
                        help=f"only this vLLM release or rule era (a version, an era id or a profile: {', '.join(PROFILES)})")
    parser.add_argument("--kv-connector", metavar="NAME|MODULE:CLASS",
                        help="connector to check (passed to the suites); with --from, keep only this connector's rows")
    parser.add_argument("--kv-engine", metavar="ENGINE",
                        help="the engine that drives the connector suite: kvconform (default) or vllm (the installed "
                             "vLLM's Scheduler; passed to the suites)")
    parser.add_argument("--upstream", action="append", default=[], metavar="UPSTREAM.json",
                        help="show this upstream job result (scripts/upstream-vllm-tests.sh's upstream-vllm-VERSION.json) "
                             "in the allocator section (repeatable: one per vLLM release)")
    parser.add_argument("--suite", dest="suites", action="append", metavar="PACKAGE",
                        help="suite package or path to run (repeatable; default: suites)")
    parser.add_argument("-n", "--workers", default="auto", metavar="N|auto",
                        help="pytest-xdist worker processes (default: auto)")
    parser.add_argument("--timing", action=argparse.BooleanOptionalAction, default=None,
                        help=f"afterwards run {BENCHMARK_SUITE} without xdist so the throughput table has figures, "
                             f"{REPORT_TIMED_ROUNDS} timed round per workload unless ${MAX_ROUNDS_ENV} says otherwise "
                             "(default with the default suites: only where vLLM, the peer the table compares with, is "
                             "importable; without it the benchmarks do not run and the report says so; --no-timing "
                             "runs them once untimed beside the other suites)")
    parser.add_argument("--shard", metavar="K/N",
                        help="run only shard K of N of every pass (balanced by recorded durations, the same on every "
                             "machine); `kvconform merge` of the N results.json.gz is the whole run")
    parser.add_argument("--shard-durations", metavar="PATH",
                        help="durations file that balances --shard (default: the one kvconform ships; "
                             "`kvconform durations RESULTS -o PATH` writes one)")
    own = tuple(o for action in parser._actions for o in action.option_strings)
    parser.set_defaults(run=run, accepts_extra=True, own_options=own)


def _eras(value: str | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    try:
        return select_eras(value)
    except EraSelectionError as exc:
        raise UsageError(f"kvconform report: {exc}") from None


def _slug(pytest_pass: PytestPass) -> str:
    return "".join(c if c.isalnum() else "-" for c in pytest_pass.label)


def _junit_part(scratch: Path, pytest_pass: PytestPass) -> Path:
    """Where one pass writes its JUnit XML (merged into the `--junitxml` file afterwards)."""
    return scratch / f"{_slug(pytest_pass)}.junit.xml"


def _pytest_command(args, pytest_pass: PytestPass, results_path: Path) -> list[str]:
    # `python -m pytest` that leaves without the interpreter's teardown. Every path goes in an option's `=` form:
    # pytest takes a separate argument that names an existing path for a test path when it finds its rootdir, and
    # an output folder outside the current one then moved the rootdir up to their common ancestor, so the test ids,
    # which identify the cells without a cell record, held the folders' names (`new/suites/config/...`).
    command = [*pytest_command(sys.executable), "--pyargs", *pytest_pass.suites, "-p", "no:cacheprovider",
               "-p", PROGRESS_PLUGIN, "-rfE", f"--kvconform-results={results_path}", *pytest_pass.options]
    if getattr(args, "junit_path", None):
        command += [f"--junitxml={_junit_part(results_path.parent, pytest_pass)}"]
    command += [f"--kvconform-report-path={Path(args.output_dir) / MARKDOWN_NAME}"]  # the console points there
    command += ["-n", str(args.workers)] if pytest_pass.xdist else ["-p", "no:xdist"]
    if args.target:
        command += ["--hma-target", args.target]
    if args.vllm_version:
        command += ["--vllm-version", args.vllm_version]
    if args.kv_connector:
        command += ["--kv-connector", args.kv_connector]
    if args.kv_engine:
        command += ["--kv-engine", args.kv_engine]
    if args.shard:
        command += ["--shard", args.shard]
    if args.shard_durations:
        command += [f"--shard-durations={args.shard_durations}"]
    return command + list(args.pytest_args)


def keep_for_good(args) -> None:
    """Where the command is its process (the console script: `harness.cli.main` sets `args.owns_process`), move every
    object the process holds out of the cyclic collector's reach (`gc.freeze`): the command keeps each document it
    loads until it exits, and each full collection walked all of them again (about a third of the CPU time of
    loading, combining, rendering and encoding a full run's 33,003 entries; JSON documents hold no cycles). A caller
    of `main` in its own process (a test) keeps its collector as it was."""
    if getattr(args, "owns_process", False):
        gc.freeze()


def _run_pytest(args, pytest_pass: PytestPass, scratch: Path, monitor: ProgressMonitor | None,
                forwarder: SignalForwarder):
    """Run one pass in a subprocess and load its results (None when it collected nothing).

    With a monitor, pytest's own output goes to a log file and the monitor prints one progress line per
    pass; the log's failure summary (or its tail, when pytest could not run) is printed afterwards.
    Without one (`-v`/`-q` after `--`), pytest's output goes straight to the terminal.
    """
    slug = _slug(pytest_pass)
    results_path, log_path = scratch / f"{slug}.json", scratch / f"{slug}.log"
    command = _pytest_command(args, pytest_pass, results_path)
    allocators = option_values(args.pytest_args, ("--kv-allocator",))
    env = pass_environment(pytest_pass, allocators[-1][1] if allocators else "reference")
    started = time.perf_counter()
    try:
        if monitor is None:
            how = f"pytest-xdist (-n {args.workers})" if pytest_pass.xdist else "pytest without xdist"
            print(f"kvconform report: running {pytest_pass.label} with {how} on target {args.target or 'reference'}",
                  flush=True)
            returncode = forwarder.run(command, "pytest", env=env)  # SIGINT/SIGTERM stop its whole process group
        else:
            progress = monitor.add(pytest_pass.label, scratch / f"{slug}.progress")
            with open(log_path, "w", encoding="utf-8") as log:
                returncode = forwarder.run(command, "pytest", stdout=log, stderr=subprocess.STDOUT,
                                           env={**env, PROGRESS_ENV: str(progress.path), "COLUMNS": "200"})
            monitor.finish(progress)
            print_pytest_log(log_path, returncode)
    except OSError as exc:
        raise UsageError(f"kvconform report: cannot start pytest ({exc})", EXIT_TARGET) from None
    wall = time.perf_counter() - started
    if returncode == _PYTEST_NO_TESTS:
        return None
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
        keep_for_good(args)
    except ResultsFileError as exc:
        raise UsageError(f"kvconform report: {exc}", EXIT_TARGET) from None
    # the scratch paths lie in a folder that is gone afterwards
    pytest_args = [portable_argument(argument) for argument in command[3:]
                   if not argument.startswith(("--kvconform-results=", "--junitxml="))]
    return results, {"pytest_args": pytest_args, "wall_seconds": round(wall, 3)}


def _run_scheduled(args, passes: list[PytestPass], scratch: Path, monitor: ProgressMonitor | None,
                   forwarder: SignalForwarder) -> list:
    """(pass, result) for every pass, in plan order: one after another when pytest's own output goes to the
    terminal, else each as soon as `may_start` lets it (after a pass fails to run, none starts; the running
    ones finish and the first error is raised)."""
    plan = sorted(passes, key=lambda p: p.stage)
    if monitor is None:
        return [(p, _run_pytest(args, p, scratch, monitor, forwarder)) for p in plan]
    cpus, pending, running, results, failure = usable_cpus(), list(plan), {}, {}, None
    with ThreadPoolExecutor(len(plan)) as pool:
        while pending or running:
            for candidate in list(pending) if failure is None else ():
                if may_start(candidate, pending, list(running.values()), cpus):
                    pending.remove(candidate)
                    running[pool.submit(_run_pytest, args, candidate, scratch, monitor, forwarder)] = candidate
            if not running:
                break
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                pytest_pass = running.pop(future)
                try:
                    results[id(pytest_pass)] = future.result()
                except BaseException as exc:  # noqa: BLE001 - re-raised below, once the running passes end
                    failure = failure or exc
    if failure is not None:
        raise failure
    return [(p, results[id(p)]) for p in plan]


def _run_passes(args, passes: list[PytestPass], benchmarks: dict | None) -> tuple[ResultsDocument, str | None]:
    """Run the passes (`_run_scheduled`) and combine their results into one run, its run_info recording what was
    done with the benchmark suite (`benchmarks`, None when the suites leave it out); with `--junitxml`, also every
    pass's JUnit XML merged into one text."""
    monitor = None if wants_pytest_output(args.pytest_args) else ProgressMonitor()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="kvconform-report-") as scratch, SignalForwarder() as forwarder:
        try:
            done = _run_scheduled(args, passes, Path(scratch), monitor, forwarder)
            junit = (merge_junit([(p.label, _junit_part(Path(scratch), p)) for p, _ in done])
                     if args.junit_path else None)
        finally:
            if monitor is not None:
                monitor.close()
    ran = [(p, result[0], result[1]) for p, result in done if result is not None]
    if not ran:
        raise UsageError("kvconform report: nothing ran (pytest collected no tests)", EXIT_NOTHING_RAN)
    command_info = {
        "target": args.target or "reference",  # unless a pass names what ran (combine_passes)
        # the command as typed (`kvconform report ...`), not pytest's argv with its temporary results path
        "argv": ["kvconform", *map(portable_argument, sys.argv[1:])] if sys.argv[1:2] == ["report"] else ["kvconform", "report"],
        "report_wall_seconds": round(time.perf_counter() - started, 3),
        **({BENCHMARKS_KEY: benchmarks} if benchmarks is not None else {}),
    }
    combined = combine_passes(ran, command_info)
    keep_for_good(args)
    return combined, junit


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


# Connector names an error message lists at most (a config matrix names dozens).
_MAX_NAMES = 12


def _check_connector_in(results: ResultsDocument, connector: str, path: str) -> None:
    """`--from F --kv-connector NAME`: NAME must be a connector of F. A misspelt name would otherwise filter
    every connector cell out and render a report of nothing (exit 5, as if nothing had run)."""
    names = sorted({str(cell["connector"]) for entry in results.results
                    if isinstance(cell := entry.get("cell"), dict) and cell.get("connector") is not None})
    if connector in names:
        return
    shown = ", ".join(names[:_MAX_NAMES]) + (f", … ({len(names)} in all)" if len(names) > _MAX_NAMES else "")
    raise UsageError(f"kvconform report: --kv-connector {connector}: no cell of {path} names this connector; "
                     f"accepted: {shown or 'none (the file has no connector cells)'}")


def exit_status(results: ResultsDocument) -> int:
    """5 when nothing ran (no entry, or every one skipped), 1 when any failed or errored, else 0."""
    statuses = [entry["status"] for entry in results.results]
    if not statuses or all(status == "skipped" for status in statuses):
        return EXIT_NOTHING_RAN
    if any(status in ("failed", "error") for status in statuses):
        return EXIT_FAILURES
    return EXIT_OK


# Where a run names a target: the report's own options, then the plugin's options among the pytest arguments.
_PYTEST_TARGET_OPTIONS = ("--hma-target", "--kv-allocator", "--kv-connector")


def _check_targets(args) -> None:
    """Load every target the run names, as pytest would: TargetError (one line, exit 4) for one that cannot
    be used, before anything starts (`harness.target_spec`)."""
    named = [("--target", args.target), ("--kv-connector", args.kv_connector)]
    named += option_values(args.pytest_args, _PYTEST_TARGET_OPTIONS)
    for option, spec in named:
        if spec is None:
            continue
        if option in ("--target", "--hma-target"):
            load_config_target(spec, option)
        elif option == "--kv-allocator":
            load_allocator_target(spec, option)
        else:
            from harness.targets.connector.selection import check_loadable  # imports the reference engine

            check_loadable(spec, option, extra_config=_connector_extra_config(args.pytest_args))


def _connector_extra_config(pytest_args: list[str]) -> dict:
    """The `--kv-connector-extra-config` a vendor's connector gets (its `kvconform` declaration left out)."""
    from harness.plugins.connector import parse_extra_config
    from harness.targets.connector.profile import split_declaration

    given = option_values(pytest_args, ("--kv-connector-extra-config",))
    return split_declaration(parse_extra_config(given[-1][1]) if given else {})[0]


def _checked_output_dir(path: str) -> Path:
    """`--output-dir`, proven writable before any suite runs, without creating a folder: a file can be made
    (and is removed at once) in the folder if it exists, else in the nearest existing folder above it (so a
    run that stops early, exit 4, leaves no empty folder behind)."""
    directory = Path(path)
    if directory.exists() and not directory.is_dir():
        raise UsageError(f"kvconform report: --output-dir {path}: cannot write there (not a directory)")
    existing = directory
    while not existing.exists():
        existing = existing.parent if existing.parent != existing else Path(".")
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"kvconform report: --output-dir {path}: cannot write there ({existing} is not writable)")
    try:
        probe_writable(existing)
    except OSError as exc:
        raise UsageError(f"kvconform report: --output-dir {path}: cannot write there ({existing}: "
                         f"{exc.strerror or exc})") from None
    return directory


def _check_shard(args) -> None:
    """`--shard K/N` and `--shard-durations PATH`, checked before anything starts (each pass's pytest would refuse
    them too, but only after starting)."""
    if args.shard_durations and not args.shard:
        raise UsageError("kvconform report: --shard-durations: only used with --shard K/N")
    try:
        if args.shard:
            parse_shard(args.shard)
        if args.shard_durations:
            load_durations(args.shard_durations)
    except ShardError as exc:
        raise UsageError(f"kvconform report: {exc}") from None


def _encoded_beside(results: ResultsDocument) -> Callable[[], bytes]:
    """A function returning `encode_results_file(results)`, encoded by a forked child while this process renders the
    Markdown and HTML (a second of CPU at the end of the command, where one core would idle); in this process where
    there is no fork or the child fails (the error then comes from the encoding here)."""
    here = functools.partial(encode_results_file, results)
    if not hasattr(os, "fork"):
        return here
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # the child: encode, hand the bytes over, leave without running the parent's exit handlers
        status = 1
        try:
            os.close(read_end)
            data = here()
            with os.fdopen(write_end, "wb") as pipe:
                pipe.write(data)
            status = 0
        finally:
            os._exit(status)
    os.close(write_end)

    def collect() -> bytes:
        with os.fdopen(read_end, "rb") as pipe:
            data = pipe.read()
        _, status = os.waitpid(child, 0)
        return data if status == 0 else here()
    return collect


def run(args) -> int:
    """Run (or load), render, write atomically, and say where the report is."""
    check_report_options(args, args.own_options)
    if getattr(args, "owns_process", False):
        freeze_heap()  # the command's modules; and young collections rarer while it loads and renders the entries
    for name, value in (("--kv-engine", args.kv_engine), ("--shard", args.shard),
                        ("--shard-durations", args.shard_durations)):
        if args.from_file and value:
            raise UsageError(f"kvconform report: {name} and --from exclude each other (--from runs nothing)")
    _check_shard(args)
    try:
        check_kv_engine(args.kv_engine)
    except ValueError as exc:
        raise UsageError(f"kvconform report: {exc}") from None
    args.junit_path, args.pytest_args = split_junit_option(args.pytest_args)
    output_dir = _checked_output_dir(args.output_dir)
    eras = _eras(args.vllm_version)
    try:
        upstream = [load_upstream(path) for path in args.upstream]  # before any suite runs: fail fast
    except UpstreamResultsError as exc:
        raise UsageError(f"kvconform report: --upstream {exc}") from None
    junit = None
    if args.from_file:
        if args.target or args.timing:
            raise UsageError(f"kvconform report: {'--target' if args.target else '--timing'} and --from exclude "
                             "each other (--from runs nothing)")
        try:
            results = load_results(args.from_file)
            keep_for_good(args)
        except ResultsFileError as exc:
            raise UsageError(f"kvconform report: {exc}") from None
        if args.kv_connector:
            _check_connector_in(results, args.kv_connector, args.from_file)
        results = _filtered(results, eras, args.kv_connector)
    else:
        try:
            check_pytest_args(args.pytest_args)  # --kv-connector-extra-config / --kv-connector-timeout after `--`
        except ValueError as exc:
            raise UsageError(f"kvconform report: {exc}") from None
        _check_targets(args)  # fail fast, with one line and exit 4, before pytest starts
        # pytest-benchmark times nothing under xdist: the throughput figures need a pass of their own, and a peer
        suites = args.suites or list(DEFAULT_SUITES)
        benchmarks = benchmark_mode(args.timing, default_suites=not args.suites)
        share_bytecode()  # a dozen Python processes follow
        # pytest arguments (-k, -x, -v, a JUnit file) and shards see the config matrix one item per cell
        cell_items = bool(args.pytest_args or args.junit_path or args.shard)
        results, junit = _run_passes(args, plan_passes(suites, benchmarks, cell_items=cell_items),
                                     benchmark_record(benchmarks) if runs_benchmarks(suites) else None)
    results_file = _encoded_beside(results)
    rendered = render_reports(results, upstream, results_file=False)
    rendered[RESULTS_NAME] = results_file()
    files = {output_dir / name: text if name == RESULTS_NAME else relink_docs_page(text, (output_dir / name).parent,
                                                                                  html_text=name == HTML_NAME)
             for name, text in rendered.items()}
    if junit is not None:
        files[Path(args.junit_path)] = junit
    try:
        for folder in {path.parent for path in files}:
            ensure_writable_dir(folder)
        write_files_atomic(files)
    except OSError as exc:
        raise UsageError(f"kvconform report: cannot write the report into {output_dir} ({exc.strerror or exc})") from None
    status = exit_status(results)
    where = f"{output_dir / MARKDOWN_NAME} (and {output_dir / HTML_NAME}, {output_dir / RESULTS_NAME})"
    if junit is not None:
        where += f"; JUnit XML of every pass: {args.junit_path}"
    print(f"kvconform report: {verdict(results.results)} Report: {where}")
    # the console script exits without freeing the run's documents (harness.cli.main), so they stay referenced
    args.exit_at_once, args.kept_until_exit = True, (results, files)
    return status
