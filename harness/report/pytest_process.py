"""One pass's pytest process in `kvconform report`: `python -c SCRIPT ARGS` runs `python -m pytest ARGS`, then
leaves as soon as the interpreter's exit has waited for the non-daemon threads and run every atexit handler
(pytest's, the suites', the tests'), with pytest's exit status.

What it skips is the interpreter's teardown: freeing the modules and every object the run kept, one by one (the
config matrix's tens of thousands of entries and torch's modules; about half a CPU second per pass, and the last pass's
is on the command's critical path). The pass's files are written and closed by then (its results file and JUnit XML
at the session's end, each progress file at once); standard output and error are flushed here.

A script, not a module of this package: importing kvconform before pytest starts would keep pytest from rewriting
the asserts of the kvconform plugin's modules (pytest warns "Module already imported so cannot be rewritten").
"""

from __future__ import annotations

# The atexit handler is registered before pytest and the tests register theirs: atexit runs the last registered
# first, so this one runs last.
SCRIPT = """
import atexit, os, sys
status = []
def leave():
    if status:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status[0])
atexit.register(leave)
import pytest
status.append(int(pytest.console_main()))
sys.exit(status[0])
"""


def pytest_command(python: str) -> list[str]:
    """The command line that starts a pass's pytest with `python`; pytest's arguments follow it."""
    return [python, "-c", SCRIPT]
