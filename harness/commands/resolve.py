"""`kvconform resolve`: a JSON list of cases in, a JSON list of outcomes out (for machines)."""

from __future__ import annotations

import json
import sys

from harness.errors import UsageError
from reference_impl.config.cases import resolve_cases

HELP = "resolve a JSON list of cases (file or - for stdin) into a JSON list of outcomes"


def register(subparsers) -> None:
    """Add the `resolve` subcommand."""
    parser = subparsers.add_parser("resolve", help=HELP, description=HELP + "; the schema is in README.md.")
    parser.add_argument("--cases", required=True, metavar="FILE", help="JSON file with a list of cases, or - for stdin")
    parser.add_argument("--indent", type=int, default=None, help="pretty-print with this indent")
    parser.set_defaults(run=run)


def read_cases(source: str) -> list:
    """Load the case list; one clear UsageError for unreadable or malformed input."""
    try:
        text = sys.stdin.read() if source == "-" else open(source, encoding="utf-8").read()
    except OSError as exc:
        raise UsageError(f"kvconform resolve: --cases: cannot read {source!r}: {exc.strerror}") from None
    try:
        cases = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"kvconform resolve: --cases: {source!r} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    if isinstance(cases, dict):
        cases = [cases]
    if not isinstance(cases, list):
        raise UsageError(f"kvconform resolve: --cases: expected a JSON list of case objects, got {type(cases).__name__}")
    return cases


def run(args) -> int:
    """Resolve every case; a bad case gets an input-error outcome and the others still run."""
    outcomes = resolve_cases(read_cases(args.cases))
    json.dump(outcomes, sys.stdout, indent=args.indent)
    sys.stdout.write("\n")
    return 0
