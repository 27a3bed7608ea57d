"""The interpreter's exit in the test command's processes: the heap is frozen before CPython finalizes.

When an interpreter exits, CPython clears its modules and runs full collections of the cyclic garbage collector
over every object still alive (`finalize_modules`). An xdist worker of the gate ends holding some 340,000 tracked
objects (torch, the suites, the collected items), and those exit collections kept both workers busy for about 3 s
of wall time after their last test while the controller waited for them to end (docs/speed.md). By then pytest's
own unraisable-exception check has collected the tests' garbage (its cleanup runs `gc.collect()` before the
interpreter exits), so what the exit collections find is the cycles of module teardown: frozen, they go with the
process instead. The cost: a finalizer (`__del__`, `weakref.finalize` not run at exit) of an object in a cycle still
alive at exit does not run; no test is running then and every report has been sent.
"""

from __future__ import annotations

import atexit
import gc


def freeze_heap_at_exit() -> None:
    """Freeze every object when the interpreter exits: after the atexit handlers registered later than this call
    (they run first), before CPython's own exit collections."""
    atexit.register(gc.freeze)
