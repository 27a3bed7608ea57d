"""`harness.report.pytest_process`, each report pass's pytest: pytest's exit status and output, the
exit's thread joins and atexit handlers, and no interpreter teardown (`python -m pytest` has one: the control); and
what the report's modules a pass imports leave out (the renderers)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness.report.pytest_process import pytest_command

REPO = Path(__file__).resolve().parents[2]

# A test module that leaves a mark for each step of the interpreter's exit: a non-daemon thread's end, an atexit
# handler the test registers, and an object freed in the teardown (its __del__ keeps what it needs to write).
_MODULE = """
    import atexit, os, threading, time

    MARKS = os.environ["MARKS"]

    def mark(name, write=os.write, open_=os.open, close=os.close, flags=os.O_WRONLY | os.O_CREAT | os.O_APPEND):
        fd = open_(MARKS, flags)
        write(fd, name.encode() + b"\\n")
        close(fd)

    class FreedAtTeardown:
        def __del__(self, mark=mark):
            mark("teardown")

    KEPT = FreedAtTeardown()

    def test_exit(passing=os.environ["PASSING"] == "1"):
        atexit.register(mark, "atexit")
        threading.Thread(target=lambda: (time.sleep(0.2), mark("thread"))).start()
        assert passing
"""


def _run(tmp_path: Path, start: list[str], passing: bool) -> tuple[subprocess.CompletedProcess, list[str]]:
    tests = tmp_path / "exit_tests"
    tests.mkdir(exist_ok=True)
    (tests / "test_exit.py").write_text(textwrap.dedent(_MODULE))
    marks = tmp_path / f"marks-{len(start)}-{passing}"
    env = dict(os.environ, MARKS=str(marks), PASSING="1" if passing else "0", PYTHONPATH=str(REPO))
    done = subprocess.run([*start, str(tests), "-p", "no:cacheprovider", "-p", "no:xdist", "-q", "-W", "error"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    return done, marks.read_text().split() if marks.exists() else []


@pytest.mark.parametrize("passing", [True, False])
def test_pytests_status_output_threads_and_atexit_without_the_teardown(tmp_path, passing):
    done, marks = _run(tmp_path, pytest_command(sys.executable), passing)
    assert done.returncode == (0 if passing else 1), done.stdout + done.stderr
    assert ("1 passed" if passing else "1 failed") in done.stdout
    assert marks == ["thread", "atexit"]


def test_plain_pytest_tears_the_interpreter_down(tmp_path):
    done, marks = _run(tmp_path, [sys.executable, "-m", "pytest"], True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert marks == ["thread", "atexit", "teardown"]


def test_the_report_runs_each_pass_with_it():
    from harness.commands.report import _pytest_command
    from harness.report.passes import plan_passes, NOT_RUN

    class Args:
        workers, target, vllm_version, kv_connector, kv_engine = "auto", None, None, None, None
        shard, shard_durations, pytest_args, junit_path, output_dir = None, None, [], None, "reports"

    for pytest_pass in plan_passes(["suites"], NOT_RUN, cpus=2):
        assert _pytest_command(Args(), pytest_pass, Path("r.json"))[:3] == pytest_command(sys.executable)


def test_a_pass_imports_no_renderer():
    # what a pass imports of the report: its progress plugin, and the state machines' cap (`capped_examples`)
    probe = ("import sys, harness.report.progress, harness.report.passes; "
             "print(' '.join(m for m in sys.modules if m.startswith('harness.report')))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.split()) == ["harness.report", "harness.report.passes", "harness.report.progress"]
