"""Compiled bytecode shared by the Python processes kvconform starts.

`kvconform report` runs its suites in several pytest processes (and pytest-xdist workers, and the benchmark's
own pytest runs); the test command starts dozens more. Under PYTHONDONTWRITEBYTECODE, which many container
images set, every one of them compiles each kvconform module again, and pytest rewrites the asserts of each
(the package is a pytest plugin): a second or two of CPU per process. Allowing bytecode lets them share the
compiled files in the `__pycache__` folders Python writes by default (git ignores them).
"""

from __future__ import annotations

import os
import sys


def share_bytecode() -> None:
    """Let this process, and every process it starts from now on, write and reuse compiled bytecode."""
    if os.environ.pop("PYTHONDONTWRITEBYTECODE", None) is not None:
        sys.dont_write_bytecode = False
