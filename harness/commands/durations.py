"""`kvconform durations RESULTS.json … -o FILE`: the durations file that balances `--shard K/N`.

Reads results files (of `kvconform report`, `kvconform merge` or `pytest --kvconform-results`) and writes, per
slow test (at least half a second) its seconds, and per test function (node id without parameters) how many of its
other tests ran and their total seconds (`harness.sharding`).
Where two files hold the same test, the first one given counts. The shipped file, `harness/shard_durations.json`,
is regenerated with `kvconform durations reports/results.json.gz -o harness/shard_durations.json` after a
`kvconform report` run.
"""

from __future__ import annotations

from harness.atomic_write import write_text_atomic
from harness.errors import UsageError
from harness.results_model import ResultsFileError, load_results
from harness.sharding import durations_from_results, dumps_durations


def register(subparsers) -> None:
    """Add the `durations` subcommand."""
    parser = subparsers.add_parser(
        "durations", help="write the durations file that balances --shard K/N, from results files",
        description=__doc__,
        epilog="example: kvconform durations reports/results.json.gz -o harness/shard_durations.json\n"
               "exit status: 0 written, 2 an input cannot be read or the output cannot be written",
    )
    parser.add_argument("inputs", nargs="+", metavar="RESULTS.json",
                        help="results files with per-test durations (kvconform report's results.json.gz, ...)")
    parser.add_argument("-o", "--output", required=True, metavar="DURATIONS.json",
                        help="where to write the durations file (atomically); pass it to pytest as "
                             "--shard-durations, or commit it as harness/shard_durations.json")
    parser.set_defaults(run=run)


def run(args) -> int:
    """Load the results, keep one entry per test, write the per-function table."""
    seen: set[str] = set()
    entries = []
    for path in args.inputs:
        try:
            document = load_results(path)
        except ResultsFileError as exc:
            raise UsageError(f"kvconform durations: {exc}") from None
        for entry in document.results:
            if entry["id"] not in seen:
                seen.add(entry["id"])
                entries.append(entry)
    content = durations_from_results(entries)
    if not entries:
        raise UsageError(f"kvconform durations: no test entries in {', '.join(args.inputs)}; nothing to write")
    text = dumps_durations(content, source=" ".join(args.inputs))
    try:
        write_text_atomic(args.output, text)
    except OSError as exc:
        raise UsageError(f"kvconform durations: -o {args.output}: cannot write there ({exc.strerror or exc})") from None
    functions, slow = content["functions"], content["tests"]
    tests = sum(row["tests"] for row in functions.values()) + len(slow)
    seconds = sum(row["seconds"] for row in functions.values()) + sum(slow.values())
    print(f"kvconform durations: {tests:,} tests ({len(slow):,} slow ones by name, the others by their "
          f"{len(functions):,} test functions), {seconds:,.1f} s recorded, written to {args.output}")
    return 0
