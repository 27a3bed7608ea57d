"""`kvconform resolve`: a JSON list of cases in, a JSON list of outcomes out (for machines)."""

from __future__ import annotations

import json
import sys

from harness.errors import UsageError, json_error_text
from reference_impl.config.cases import resolve_cases

HELP = "resolve a JSON list of cases (file or - for stdin) into a JSON list of outcomes"


def register(subparsers) -> None:
    """Add the `resolve` subcommand."""
    parser = subparsers.add_parser(
        "resolve", help=HELP,
        description=HELP + ". The case and outcome schema is in docs/reference.md (\"The resolve schema\"). A case vLLM "
                    "would reject gets vLLM's error as its outcome; a case that does not follow the schema gets an "
                    "error at stage \"input\"; the other cases still run.",
        epilog="exit status: 0 every case answered (errors are outcomes), 2 the file cannot be read or is not a JSON list",
    )
    parser.add_argument("file", nargs="?", metavar="FILE", help="JSON file with a list of cases, or - for stdin")
    parser.add_argument("--cases", metavar="FILE", help="the same as FILE")
    parser.add_argument("--indent", type=int, default=None, help="pretty-print with this indent")
    parser.set_defaults(run=run)


def read_cases(source: str) -> list:
    """Load the case list; one clear UsageError for unreadable or malformed input."""
    try:
        text = sys.stdin.read() if source == "-" else open(source, encoding="utf-8").read()
    except OSError as exc:
        raise UsageError(f"kvconform resolve: cannot read {source!r}: {exc.strerror or exc}") from None
    try:
        cases = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"kvconform resolve: {source!r} is not valid JSON ({json_error_text(exc)})") from None
    if not isinstance(cases, list):
        kind = {dict: "a single object", str: "a string"}.get(type(cases), type(cases).__name__)
        hint = " (wrap a single case in [ ])" if isinstance(cases, dict) else ""
        raise UsageError(f"kvconform resolve: {source!r}: expected a JSON list of case objects, got {kind}{hint}")
    return cases


def run(args) -> int:
    """Resolve every case; a bad case gets an input-error outcome and the others still run."""
    if args.file and args.cases and args.file != args.cases:
        raise UsageError(f"kvconform resolve: two case files given ({args.file} and --cases {args.cases}); give one")
    source = args.file or args.cases
    if source is None:
        raise UsageError("kvconform resolve: the cases file is required (kvconform resolve FILE, or - for stdin)")
    outcomes = resolve_cases(read_cases(source))
    # one json.dumps call: the C encoder (json.dump to a stream encodes in Python, several times slower)
    sys.stdout.write(json.dumps(outcomes, indent=args.indent) + "\n")
    return 0
