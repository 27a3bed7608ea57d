"""kvconform: conformance checks for vLLM's hybrid KV cache manager (HMA) and KV-cache connectors.

Ask what a vLLM release does with a command line (explain), resolve cases in bulk (resolve), run the
conformance suites and write the compatibility report (report), and compare or combine results files
(diff, merge), list the connector checks (checks), and measure how many catalogued bug classes the connector
suite catches (mutate). `kvconform COMMAND --help` describes each command.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys

from harness.errors import EXIT_USAGE, UsageError, choice_ignoring_case, did_you_mean, unrecognized_argument
from harness.process_exit import leave_without_teardown

# Subcommand name -> module under harness.commands. Each module has register() and run().
COMMANDS = {
    "explain": "explain",
    "resolve": "resolve",
    "report": "report",
    "diff": "diff",
    "merge": "merge",
    "durations": "durations",
    "checks": "checks",
    "history": "history",
    "mutate": "mutate",
}


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors as one line and exit status 2, and never matches an
    abbreviated option (`--plat` is not `--platform`)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # noqa: D102 - argparse hook
        raise UsageError(f"{self.prog}: {with_suggestion(message)}")


# argparse's words for a value outside `choices` (3.11 quotes each choice, 3.12 does not)
_INVALID_CHOICE = re.compile(r"(?P<head>argument .+?: invalid choice: '(?P<value>.*)') \(choose from (?P<choices>.*)\)$")


def with_suggestion(message: str) -> str:
    """argparse's error message, where it names an invalid choice, with the choice it most resembles
    ("invalid choice: 'explian'; did you mean explain? (choose from ...)")."""
    match = _INVALID_CHOICE.match(message)
    if not match:
        return message
    choices = [choice.strip().strip("'") for choice in match["choices"].split(",")]
    close = did_you_mean(match["value"], choices)
    if close is None:
        return message
    return f"{match['head']}; did you mean {close}? (choose from {', '.join(choices)})"


def version() -> str:
    """The installed kvconform version ("unknown" when the package metadata is missing)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as package_version

    try:
        return package_version("kvconform")
    except PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every registered subcommand."""
    parser = _Parser(prog="kvconform", description=__doc__.split("\n\n")[0],
                     epilog=__doc__.split("\n\n", 1)[1].strip())
    parser.add_argument("--version", action="version", version=f"kvconform {version()}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, module_name in COMMANDS.items():
        module = importlib.import_module(f"harness.commands.{module_name}")
        module.register(subparsers)
        command = subparsers.choices[name]
        # what a misspelled option is matched against (`main`); `report` sets its own, the same list
        command.set_defaults(own_options=tuple(o for action in command._actions for o in action.option_strings),
                             usage_line=" ".join(command.format_usage().split()[1:]))  # "usage:" dropped
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the exit status."""
    from_command_line = argv is None  # the console script: nothing runs after this process returns
    argv = sys.argv[1:] if argv is None else argv
    command = None  # once known, an error names the command it came from
    try:
        parser = build_parser()
        if not argv:  # a bare `kvconform`: say what it can do
            parser.print_help(sys.stderr)
            return EXIT_USAGE
        command_word = choice_ignoring_case(argv[0], tuple(COMMANDS))  # `kvconform Explain` is explain
        if command_word is not None:
            argv = [command_word, *argv[1:]]
        args, extra = parser.parse_known_args(argv)
        command = args.command
        if args.command is None and extra:
            raise UsageError(f"kvconform: unrecognized arguments: {' '.join(extra)}; see kvconform --help")
        if args.command is None:
            raise UsageError(f"kvconform: a command is required ({', '.join(COMMANDS)}); see kvconform --help")
        if extra and not getattr(args, "accepts_extra", False):
            raise UsageError(unrecognized_argument(f"kvconform {args.command}", extra[0], args.own_options,
                                                   f"accepted: {args.usage_line}"))
        args.extra, args.owns_process = extra, from_command_line
        status = int(args.run(args) or 0)
        if from_command_line and getattr(args, "exit_at_once", False):
            # The command's output is written and flushed; what it kept (a report run's tens of thousands of
            # entries) is left to the operating system instead of being freed object by object (about a CPU
            # second after a full `kvconform report`, on the command's critical path).
            leave_without_teardown(status)
        return status
    except UsageError as exc:
        text = str(exc)
        prefix = f"kvconform {command}: " if command else "kvconform: error: "
        print(text if text.startswith("kvconform") else prefix + text, file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("kvconform: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
