"""The `kvconform` command line: a thin dispatcher over `harness.commands`."""

from __future__ import annotations

import argparse
import importlib
import sys

from harness.errors import UsageError

# Subcommand name -> module under harness.commands. Each module has register() and run().
COMMANDS = {
    "explain": "explain",
    "resolve": "resolve",
    "report": "report",
    "diff": "diff",
    "merge": "merge",
}


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors as one line and exit status 2."""

    def error(self, message: str) -> None:  # noqa: D102 - argparse hook
        raise UsageError(f"{self.prog}: {message}")


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every registered subcommand."""
    parser = _Parser(prog="kvconform", description=__doc__)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    subparsers.required = True
    for name, module_name in COMMANDS.items():
        module = importlib.import_module(f"harness.commands.{module_name}")
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        parser = build_parser()
        args, extra = parser.parse_known_args(argv)
        if extra and not getattr(args, "accepts_extra", False):
            raise UsageError(f"kvconform {args.command}: unrecognized arguments: {' '.join(extra)}")
        args.extra = extra
        return int(args.run(args) or 0)
    except UsageError as exc:
        text = str(exc)
        print(text if text.startswith("kvconform") else f"kvconform: error: {text}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("kvconform: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
