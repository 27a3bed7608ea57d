"""`kvconform report` stopped by SIGINT / SIGTERM: pytest and its xdist workers end with it, the temporary
results folder is removed, earlier reports stay untouched, one line on stderr, exit 130 / 143."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.process_group import group_members

REPO = Path(__file__).resolve().parents[1]
SLEEPER = """
import time

import pytest


@pytest.mark.parametrize("n", range(4))
def test_sleeps(n):
    time.sleep(120)
"""

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads the process table from /proc")


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat[stat.rfind(")") + 2:].split()[1]) == pid:
                found.append(int(entry))
    return found


def _wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_stops_the_whole_run(tmp_path, signum):
    suite = tmp_path / "sleeper_suite.py"
    suite.write_text(SLEEPER)
    reports = tmp_path / "reports"
    reports.mkdir()
    previous = {name: f"previous {name}\n" for name in ("compatibility.md", "compatibility.html", "results.json.gz")}
    for name, text in previous.items():
        (reports / name).write_text(text)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    # Started the way a shell starts a background job: SIGINT ignored (the parent must still forward it).
    parent = subprocess.Popen(
        [sys.executable, "-m", "harness.cli", "report", "--suite", str(suite), "-n", "2", "--no-timing",
         "--output-dir", str(reports), "--", "-p", "no:randomly"],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    try:
        child = _wait_for(lambda: _children(parent.pid), 60, "kvconform report to start pytest")[0]
        # the controller and both xdist workers are running (and the sleeping tests have started)
        _wait_for(lambda: len(group_members(child)) >= 3, 120, "pytest-xdist workers in pytest's process group")
        cmdline = Path(f"/proc/{child}/cmdline").read_text().split("\0")
        results_option = next(arg for arg in cmdline if arg.startswith("--kvconform-results="))
        scratch = Path(results_option.partition("=")[2]).parent
        assert scratch.is_dir()
        time.sleep(1.0)
        parent.send_signal(signum)
        out, err = parent.communicate(timeout=60)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
    assert parent.returncode == 128 + signum, (parent.returncode, err)
    assert err.strip().count("\n") == 0, f"expected one line on stderr, got:\n{err}"
    assert f"interrupted by {signal.Signals(signum).name}" in err
    assert "Traceback" not in err and "PluggyTeardownRaisedWarning" not in out + err
    assert group_members(child) == [], "processes of pytest's group survived the signal"
    assert not scratch.exists(), f"the temporary results folder {scratch} was left behind"
    assert {p.name: p.read_text() for p in reports.iterdir()} == previous, "earlier reports were touched"
