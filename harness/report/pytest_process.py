"""One pass's pytest process in `kvconform report`: `python -m harness.report.pytest_process ARGS` runs
`python -m pytest ARGS`, then leaves as soon as the interpreter's exit has waited for the non-daemon threads and run
every atexit handler (pytest's, the suites', the tests'), with pytest's exit status.

What it skips is the interpreter's teardown: freeing the modules and every object the run kept, one by one (the
config matrix's tens of thousands of entries and torch's modules; about half a CPU second per pass, and the last pass's
is on the command's critical path). The pass's files are written and closed by then (its results file and JUnit XML
at the session's end, each progress file at once); standard output and error are flushed here.
"""

from __future__ import annotations

import atexit
import os
import sys

_status: list[int] = []


def _leave() -> None:
    """The last atexit handler (registered first): flush, and exit with pytest's status without the teardown."""
    if _status:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(_status[0])


def main() -> None:
    """Run pytest with this process's arguments; exit with its status."""
    atexit.register(_leave)  # before pytest and the tests register theirs: atexit runs the last registered first
    import pytest

    _status.append(int(pytest.console_main()))
    sys.exit(_status[0])


if __name__ == "__main__":
    main()
