"""tests.interpreter_exit: the exit collections of an interpreter that called `freeze_heap_at_exit` find nothing."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# An object kept alive only by a cycle until the interpreter exits: only a collection finalizes it.
PROGRAM = """
import os, sys
sys.path.insert(0, {root!r})
{setup}
class Cycle:
    def __del__(self, write=os.write):
        write(1, b"finalized\\n")
cycle = Cycle()
cycle.me = cycle
"""


def exit_output(setup: str) -> str:
    """What a fresh interpreter running PROGRAM with `setup` writes up to the end of its exit."""
    program = PROGRAM.format(root=str(ROOT), setup=setup)
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=True)
    return done.stdout


@pytest.mark.parametrize(("setup", "finalized"), [
    ("", True),  # CPython's exit collections finalize the cycle: the program can tell
    ("from tests.interpreter_exit import freeze_heap_at_exit\nfreeze_heap_at_exit()", False),
])
def test_a_cycle_alive_at_exit_is_finalized_only_without_the_frozen_heap(setup, finalized):
    assert ("finalized" in exit_output(setup)) is finalized


def test_the_repository_conftest_freezes_the_heap_at_exit():
    # the test command's processes: every pytest process of this tree loads conftest.py
    setup = "import conftest"
    assert "finalized" not in exit_output(setup)
