"""What `kvconform report` shows of pytest's own output when it prints progress lines instead.

pytest's dots stay available: `-v`/`-q` (or `--verbose`/`--quiet`) after `--` stream pytest's output as
pytest users expect. Otherwise each pass's output goes to a log; afterwards the failure summary lines are
printed (failures), or the log's tail (pytest could not run), so nothing that explains a failure is lost.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

_VERBOSITY = re.compile(r"^(-v+|-q+|--verbose|--quiet|--verbosity(=.*)?)$")
_SUMMARY_LINE = re.compile(r"^(FAILED|ERROR) ")
# The console plugin's grouped failures (harness/plugins/console.py): a "=== kvconform: N failing ... ===" rule,
# then one line per group, until pytest's next rule: "=== N failed ... ===", or a "---" one such as the JUnit
# plugin's "--- generated xml file: <a scratch path, gone after the run> ---", which must not be printed.
_GROUPED_RULE = re.compile(r"^=+ kvconform: .* grouped by what went wrong =+$")
_RULE = re.compile(r"^([=-])\1+( .* \1+)?$")
SUMMARY_LIMIT = 20
TAIL_LINES = 30


def wants_pytest_output(pytest_args: list[str]) -> bool:
    """True when the user asked pytest for its own verbosity (-v, -q, --verbose, ...)."""
    return any(_VERBOSITY.match(arg) for arg in pytest_args)


def print_pytest_log(log_path: Path, returncode: int, stream=None) -> None:
    """Print the failure summary of a finished pass, or the log's tail when pytest itself failed."""
    stream = stream or sys.stdout
    try:
        lines = log_path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return
    if returncode in (0, 5):
        return
    summary = [line for line in lines if _SUMMARY_LINE.match(line)]
    grouped = _grouped_block(lines)
    if returncode == 1 and grouped:
        stream.write("\n".join(grouped + summary[:SUMMARY_LIMIT]) + "\n")
    elif returncode == 1 and summary:
        shown = summary[:SUMMARY_LIMIT]
        more = len(summary) - len(shown)
        stream.write("\n".join(shown) + (f"\n... and {more} more (see the report)" if more else "") + "\n")
    else:
        stream.write(f"pytest said (last {TAIL_LINES} lines of {len(lines)}):\n" + "\n".join(lines[-TAIL_LINES:]) + "\n")
    stream.flush()


def _grouped_block(lines: list[str]) -> list[str]:
    """The console plugin's grouped-failures block of a log (its rule and lines), or []."""
    for start, line in enumerate(lines):
        if _GROUPED_RULE.match(line):
            end = next((i for i in range(start + 1, len(lines)) if _RULE.match(lines[i])), len(lines))
            return lines[start:end]
    return []
