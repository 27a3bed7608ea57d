"""Checking `kvconform report`'s own options before anything starts: a mistake is one line and exit 2 at
once, not a pytest start-up later.

Only arguments after `--` go to pytest; anything else argparse did not recognise is refused here, with the
report option it most resembles.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from harness.errors import UsageError, unrecognized_argument

#: `-n` values pytest-xdist understands besides a whole number.
WORKER_WORDS = ("auto", "logical")


def pytest_passthrough(extra: list[str], own_options: tuple[str, ...]) -> list[str]:
    """The pytest arguments given after `--`; UsageError for anything before it."""
    position = extra.index("--") if "--" in extra else len(extra)
    unknown = extra[:position]
    if unknown:
        raise UsageError(unrecognized_argument("kvconform report", unknown[0], own_options,
                                               "pytest arguments go after -- (kvconform report -- -x -k seed)"))
    return extra[position + 1:]


def check_workers(value: str) -> str:
    """`-n`: auto, logical or a whole number >= 0 (0 runs without worker processes)."""
    if value in WORKER_WORDS or (value.isdigit() and int(value) >= 0):
        return value
    raise UsageError(f"kvconform report: -n: {value!r} is not accepted; expected auto, logical or a whole number >= 0")


def check_suite(suite: str) -> str:
    """`--suite`: an existing path, or an importable package or module name."""
    if Path(suite).exists():
        return suite
    try:
        found = importlib.util.find_spec(suite) is not None
    except (ImportError, ValueError):  # a parent package is missing, or the name is not a module name
        found = False
    if not found:
        raise UsageError(f"kvconform report: --suite {suite}: no such package or path (e.g. suites, suites.config, "
                         "suites.allocator, suites.connector, suites.benchmarks)")
    return suite


def option_values(args: list[str], names: tuple[str, ...]) -> list[tuple[str, str]]:
    """(option, value) for every `--name VALUE` or `--name=VALUE` among pytest arguments, in order."""
    found = []
    for index, arg in enumerate(args):
        name, sep, value = arg.partition("=")
        if name in names:
            if not sep:
                value = args[index + 1] if index + 1 < len(args) else ""
            found.append((name, value))
    return found


def check_report_options(args, own_options: tuple[str, ...]) -> None:
    """Validate the options of a run; sets `args.pytest_args` to the arguments after `--`."""
    if getattr(args, "from_file", None) and args.extra:
        given = " ".join(a for a in args.extra if a != "--")
        raise UsageError(f"kvconform report: pytest arguments ({given}) make no sense with --from")
    args.pytest_args = pytest_passthrough(list(args.extra), own_options)
    check_workers(str(args.workers))
    for suite in args.suites or ():
        check_suite(suite)
