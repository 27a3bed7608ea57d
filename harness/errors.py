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


def choice_ignoring_case(value: str, choices) -> str | None:
    """`value` as one of `choices`: itself, else the one choice it equals ignoring case (`Cuda` is cuda);
    None where neither (or where two choices differ only in case: that would be a guess)."""
    if value in choices:
        return value
    same = [choice for choice in choices if choice.lower() == value.lower()]
    return same[0] if len(same) == 1 else None


def did_you_mean(value: str, choices, cutoff: float = 0.6) -> str | None:
    """The one choice `value` most resembles, compared ignoring case (`cdua` -> cuda), or None; `cutoff` is
    difflib's similarity ratio a suggestion needs."""
    lowered: dict[str, list[str]] = {}
    for choice in choices:
        lowered.setdefault(choice.lower(), []).append(choice)
    close = difflib.get_close_matches(value.lower(), list(lowered), n=1, cutoff=cutoff)
    return lowered[close[0]][0] if close and len(lowered[close[0]]) == 1 else None
