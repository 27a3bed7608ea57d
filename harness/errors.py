"""Exit codes and the error type the command line turns into one line on stderr."""

from __future__ import annotations

import difflib

EXIT_OK = 0
EXIT_FAILURES = 1
EXIT_USAGE = 2
EXIT_TARGET = 4
EXIT_NOTHING_RAN = 5


class UsageError(Exception):
    """Bad input from the user: printed as one line, never as a traceback."""

    def __init__(self, message: str, exit_code: int = EXIT_USAGE):
        super().__init__(message)
        self.exit_code = exit_code


def json_error_text(exc) -> str:
    """A `json.JSONDecodeError` in one sentence: its reason and where ("Unterminated string starting at
    line 1 column 5", never "starting at at line")."""
    where = f"line {exc.lineno} column {exc.colno}"
    return f"{exc.msg} {where}" if exc.msg.endswith(" at") else f"{exc.msg} at {where}"


def unrecognized_argument(prog: str, argument: str, options: tuple[str, ...], otherwise: str) -> str:
    """The one line for an argument a command does not take: the option it most resembles ("did you mean
    --changed-only?"), else `otherwise` (what the command accepts)."""
    name = argument.split("=", 1)[0]
    close = difflib.get_close_matches(name, options, n=1, cutoff=0.75) if name.startswith("-") else []
    hint = f"did you mean {close[0]}?" if close else otherwise
    return f"{prog}: unrecognized argument {argument}; {hint}"
