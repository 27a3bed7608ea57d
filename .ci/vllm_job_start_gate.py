"""pytest plugin of the vLLM CI job (.ci/vllm-job.sh loads it with `-p vllm_job_start_gate`, `.ci` on PYTHONPATH): a
step started before the step it must follow has ended does its start-up at once (the interpreter, torch's and vLLM's
imports, the plugin, collection, xdist's workers) and runs its first test only once the file named by
KVCONFORM_CI_START_AFTER exists. Once it waits, it touches KVCONFORM_CI_START_AFTER.ready-PID. The job creates the
file when the step's turn has come (the steps before it have ended, and every early step has started), so the
step's tests (whose checks have wall-clock limits) still run with nothing of the job beside them; only the start-up
overlaps.

Under xdist the workers wait, each before its own test loop (the controller only hands out tests). A file that has
not appeared after KVCONFORM_CI_START_AFTER_TIMEOUT seconds (default 7,200: the job died without opening the gate)
ends the session, naming the file, instead of leaving an orphan waiting for ever.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

POLL_S = 0.05


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session):
    """Wait for the gate file, then let the session's own test loop run (returns None)."""
    if session.config.pluginmanager.has_plugin("dsession"):
        return None  # xdist's controller: its workers wait, each in its own loop
    path = os.environ.get("KVCONFORM_CI_START_AFTER")
    if not path:
        return None
    timeout = float(os.environ.get("KVCONFORM_CI_START_AFTER_TIMEOUT", "7200"))
    deadline = time.monotonic() + timeout
    Path(f"{path}.ready-{os.getpid()}").touch()  # this process has started: the job waits for that, too
    while not Path(path).exists():
        if time.monotonic() > deadline:
            pytest.exit(f"KVCONFORM_CI_START_AFTER: {path} did not appear within {timeout:g} s", returncode=2)
        time.sleep(POLL_S)
    return None
