"""Expensive evidence computed once per test session, shared by every pytest-xdist worker.

A module- or session-scoped fixture runs once per *process*: under `pytest -n 2` a module whose tests land on
both workers pays for its fixture twice. `once_per_session` runs the computation in whichever process asks
first (the others wait on a file lock) and hands everyone the same JSON value. The cache lives in the
session's own temporary folder (the controller's basetemp, which xdist gives each worker a folder under),
so nothing is shared between two sessions.
"""

from __future__ import annotations

import fcntl
import json
from pathlib import Path
from typing import Any, Callable

import pytest

from harness.atomic_write import write_text_atomic


def session_dir(request: pytest.FixtureRequest) -> Path:
    """A folder every process of this test session sees (the xdist controller's basetemp, or our own)."""
    base = request.getfixturevalue("tmp_path_factory").getbasetemp()
    root = (base.parent if hasattr(request.config, "workerinput") else base) / "kvconform-once"
    root.mkdir(exist_ok=True)
    return root


def once_per_session(request: pytest.FixtureRequest, key: str, produce: Callable[[Path], Any]) -> Any:
    """`produce(folder)` run once in this test session (by any worker); its JSON-serialisable value.

    `folder` is a fresh folder for the computation's files; they stay readable by every worker. When
    `produce` raises, nothing is cached: the next process that asks runs it again (and fails the same way).
    """
    root = session_dir(request)
    done = root / f"{key}.json"
    with open(root / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not done.exists():
            folder = root / key
            folder.mkdir(exist_ok=True)
            write_text_atomic(done, json.dumps(produce(folder)))
        return json.loads(done.read_text())
