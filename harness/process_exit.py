"""Leaving a process without the interpreter's teardown, once everything it owes has been written.

CPython's exit frees every module and object one by one; a process that holds a full run's entries, or torch, spends
about half a CPU second to a second on that after its work is done, often while another process waits for it to end.
"""

from __future__ import annotations

import os
import sys


def leave_without_teardown(status: int) -> None:
    """Flush standard output and error and end the process with `status` at once (no atexit handlers, no
    finalizers): for callers whose files are written and closed and whose answers are sent."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
