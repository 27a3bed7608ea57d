"""`kvconform merge a.json b.json … -o merged.json`: one results file from runs on several machines.

Every run's `run_info` is kept (in `runs`, each entry pointing at its run). Runs of different kvconform
versions are refused unless `--allow-mixed`. A cell that two runs both ran must have the same outcome,
otherwise the merge is refused naming the cell; a cell skipped in one run and run in another keeps the run
result (a CUDA-only check skipped on a CPU machine and run on a GPU machine is not a conflict).
"""

from __future__ import annotations

from harness.atomic_write import write_text_atomic
from harness.errors import UsageError
from harness.kv_engine import DEFAULT_KV_ENGINE
from harness.results_model import (ResultsDocument, ResultsFileError, cell_key, cell_label, load_results,
                                   outcome_of, sort_entries)


def register(subparsers) -> None:
    """Add the `merge` subcommand."""
    parser = subparsers.add_parser(
        "merge", help="merge results files from several runs into one",
        description="Merge the results files of several runs (machines, suites) into one results file.\n\n"
        + __doc__.split("\n\n")[1],
        epilog="example: kvconform merge cpu/results.json.gz gpu/results.json.gz -o merged.json.gz && "
               "kvconform report --from merged.json.gz\n"
               "exit status: 0 merged, 2 an input cannot be read, runs of different versions, or a conflicting cell",
    )
    parser.add_argument("inputs", nargs="+", metavar="RESULTS.json",
                        help="results files written by `kvconform report` (results.json.gz) or by pytest "
                             "--kvconform-results on different machines or for different suites")
    parser.add_argument("-o", "--output", required=True, metavar="MERGED.json",
                        help="where to write the merged results file (written atomically; gzip-compressed where the "
                             "name ends in .gz); render it with kvconform report --from MERGED.json")
    parser.add_argument("--allow-mixed", action="store_true",
                        help="merge runs of different kvconform versions")
    parser.set_defaults(run=run)


def _common(values: list, mixed: str | None = None):
    distinct = sorted({str(v) for v in values if v is not None})
    if len(distinct) <= 1:
        return distinct[0] if distinct else None
    return mixed if mixed is not None else ", ".join(distinct)


def merged_run_info(runs: list[dict]) -> dict:
    """A summary of the merged runs: shared fields where they agree, the overall time span."""
    started = [r["started_at"] for r in runs if r.get("started_at")]
    finished = [r["finished_at"] for r in runs if r.get("finished_at")]
    engines = {"kv_engine": _common([r.get("kv_engine") or DEFAULT_KV_ENGINE for r in runs], mixed="mixed")} \
        if any(r.get("kv_engine") for r in runs) else {}
    return {
        **engines,
        "merged_runs": len(runs),
        "kvconform_version": _common([r.get("kvconform_version") for r in runs]),
        "git_commit": _common([r.get("git_commit") for r in runs], mixed="mixed"),
        "target": _common([r.get("target") for r in runs], mixed="mixed"),
        # A run without --vllm-version covers every era: merged with it, the runs were not filtered as a whole.
        "vllm_version": (None if any(not r.get("vllm_version") for r in runs)
                         else _common([r.get("vllm_version") for r in runs], mixed="mixed")),
        "started_at": min(started) if started else None,
        "finished_at": max(finished) if finished else None,
    }


def _test_of_cell(entry: dict) -> str:
    """What two runs must agree on: the cell and the test function that checked it. Several tests may check one
    cell (the connector suite's C18 and C25 have two variants each); each is its own outcome, not a conflict."""
    function = str(entry.get("id", "")).rpartition("::")[2].partition("[")[0]
    return f"{cell_key(entry)}::{function}"


def merge_documents(named: list[tuple[str, ResultsDocument]], allow_mixed: bool = False) -> ResultsDocument:
    """Merge loaded documents (name, document); raise UsageError on mixed versions or conflicting cells."""
    versions: dict[str, str] = {}
    for name, document in named:
        for run_info in document.runs:
            versions.setdefault(str(run_info.get("kvconform_version")), name)
    if len(versions) > 1 and not allow_mixed:
        found = ", ".join(f"{version} in {name}" for version, name in sorted(versions.items()))
        raise UsageError(f"kvconform merge: runs of different kvconform versions ({found}); "
                         "pass --allow-mixed to merge them anyway")
    runs: list[dict] = []
    chosen: dict[str, tuple[str, dict]] = {}
    for name, document in named:
        offset = len(runs)
        runs.extend(document.runs)
        for entry in document.results:
            entry = dict(entry, run=entry.get("run", 0) + offset)
            key = _test_of_cell(entry)
            known = chosen.get(key)
            if known is None or (known[1]["status"] == "skipped" and entry["status"] != "skipped"):
                chosen[key] = (name, entry)
            elif entry["status"] != "skipped" and outcome_of(known[1]) != outcome_of(entry):
                raise UsageError(
                    f"kvconform merge: conflicting outcomes for {cell_label(entry)}: {known[1]['status']} in "
                    f"{known[0]}, {entry['status']} in {name} (outcomes differ); not merged")
    results = sort_entries([entry for _, entry in chosen.values()])
    return ResultsDocument(run_info=merged_run_info(runs), runs=runs, results=results)


def run(args) -> int:
    """Load, merge, write atomically."""
    named = []
    for path in args.inputs:
        try:
            named.append((path, load_results(path)))
        except ResultsFileError as exc:
            raise UsageError(f"kvconform merge: {exc}") from None
    merged = merge_documents(named, allow_mixed=args.allow_mixed)
    try:
        write_text_atomic(args.output, merged.encode_for(args.output))
    except OSError as exc:
        raise UsageError(f"kvconform merge: -o {args.output}: cannot write there ({exc.strerror or exc})") from None
    print(f"kvconform merge: {len(merged.results)} results from {len(merged.runs)} run(s) written to {args.output}")
    return 0
