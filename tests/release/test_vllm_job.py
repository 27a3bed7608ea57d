"""The vLLM CI job's frame (.ci/vllm-job.sh) without vLLM: its release list is checked first, and a release that
cannot even start is a FAILED row of the summary, never a silent pass. The steps themselves need real vLLM
releases (docs/vllm-ci.md has the measured run)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

JOB = Path(__file__).resolve().parents[2] / ".ci" / "vllm-job.sh"


def _run(tmp_path, **env):
    return subprocess.run(["bash", str(JOB)], capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "KVCONFORM_CI_VLLM_OUT": str(tmp_path / "out"), **env})


def test_a_bad_release_list_is_one_line_exit_2(tmp_path):
    done = _run(tmp_path, KVCONFORM_CI_VLLM_RELEASES="0.34.0 banana")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == "ci-vllm: KVCONFORM_CI_VLLM_RELEASES: 'banana' is not a release X.Y.Z\n"


def test_a_missing_venv_fails_the_job_and_the_summary_says_so(tmp_path):
    done = _run(tmp_path, KVCONFORM_CI_VLLM_RELEASES="0.34.0 0.13.0", KVCONFORM_CI_VLLM_VENV_ROOT=str(tmp_path / "none"))
    assert done.returncode == 1
    summary = (tmp_path / "out" / "summary.md").read_text().splitlines()
    rows = [line for line in summary if line.startswith("| 0.")]
    assert rows == [f"| {r} | install | FAILED | 0 | 0 | no venv {tmp_path}/none/vllm-{r} |" for r in ("0.34.0", "0.13.0")]
    assert "ci-vllm: failed: 0.34.0 install 0.13.0 install" in done.stderr


def test_a_release_that_would_not_fit_on_the_disk_is_skipped_with_both_figures(tmp_path):
    """A fresh install is refused before pip starts when the disk is short (a CI run once failed half-way through
    pip with 'No space left on device'); the summary's row gives the free and the needed GiB."""
    if (JOB.parents[1] / ".cache" / "venvs" / "vllm-0.34.0" / ".kvconform-vllm-stamp").exists():
        pytest.skip("this checkout has a finished 0.34.0 venv in .cache/venvs, which the job would use, not install")
    done = _run(tmp_path, KVCONFORM_CI_VLLM_RELEASES="0.34.0", KVCONFORM_CI_VLLM_MIN_FREE_GIB="1000000000")
    assert done.returncode == 0, done.stderr
    rows = [line for line in (tmp_path / "out" / "summary.md").read_text().splitlines() if line.startswith("| 0.")]
    assert len(rows) == 1 and rows[0].startswith("| 0.34.0 | install | skipped | 0 | 0 | only "), rows
    assert rows[0].endswith(" GiB free on the disk of .cache/venvs/vllm-0.34.0, a fresh install needs 1000000000 GiB: "
                            "none of 0.34.0's steps ran |"), rows


def test_a_minimum_that_is_not_a_number_is_one_line_exit_2(tmp_path):
    done = _run(tmp_path, KVCONFORM_CI_VLLM_MIN_FREE_GIB="lots")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == "ci-vllm: KVCONFORM_CI_VLLM_MIN_FREE_GIB: 'lots' is not a whole number of GiB\n"


def test_an_unknown_step_is_one_line_exit_2(tmp_path):
    done = _run(tmp_path, KVCONFORM_CI_VLLM_STEPS="matrix banana")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("ci-vllm: KVCONFORM_CI_VLLM_STEPS: 'banana' is not a step; accepted: matrix ")


def test_an_interrupted_job_still_writes_its_summary(tmp_path):
    """A runner's time limit (SIGTERM) mid-step: the summary is written on the way out, the step cut short listed
    as interrupted with the time it had run, and the job fails."""
    import signal
    import time

    venv = tmp_path / "venvs" / "vllm-0.34.0" / "bin"
    venv.mkdir(parents=True)
    # a stand-in Python: answers the era question, and any step's command runs until the job is stopped
    (venv / "python").write_text('#!/bin/bash\nif [[ $1 == -c ]]; then echo v0.34; exit 0; fi\nexec sleep 60\n')
    (venv / "python").chmod(0o755)
    log = tmp_path / "job.log"
    job = subprocess.Popen(["bash", str(JOB)], stdout=log.open("w"), stderr=subprocess.PIPE, text=True,
                           start_new_session=True,
                           env={"PATH": "/usr/bin:/bin", "KVCONFORM_CI_VLLM_OUT": str(tmp_path / "out"),
                                "KVCONFORM_CI_VLLM_RELEASES": "0.34.0", "KVCONFORM_CI_VLLM_STEPS": "benchmarks",
                                "KVCONFORM_CI_VLLM_VENV_ROOT": str(tmp_path / "venvs")})
    try:
        deadline = time.monotonic() + 60
        while "[0.34.0 benchmarks] " not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)  # the step's command has started
        os.killpg(job.pid, signal.SIGTERM)
        _, err = job.communicate(timeout=60)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
    assert job.returncode == 143, err
    rows = [line for line in (tmp_path / "out" / "summary.md").read_text().splitlines() if line.startswith("| 0.")]
    interrupted = [row for row in rows if "| benchmarks | interrupted |" in row]
    assert len(interrupted) == 1 and "the job ended (exit status 143) while this step ran" in interrupted[0], rows
    assert "ci-vllm: failed: 0.34.0 benchmarks" in err


#: A stand-in for a release venv's python that logs "EVENT STEP TIME" lines: each step's start, the moment its
#: checks begin (a connector step started early waits for its turn, as .ci/vllm_job_start_gate.py makes its
#: workers do) and its end; and "STEP NICENESS" lines to FAKE_LOG.nice.
STAND_IN = r'''#!/bin/bash
log() { echo "$1 $2 $(date +%s.%N)" >> "$FAKE_LOG"; }
niceness() { echo "$1 $(nice)" >> "$FAKE_LOG.nice"; }
case "$*" in
  "-c import lmcache") exit 0 ;;
  -c*) echo v0.34; exit 0 ;;
  "-m harness.targets.connector.vllm_target"*) niceness listing; echo "--kv-connector=vllm:ExampleConnector"; exit 0 ;;
  "-m harness.release.allocator_findings"*) niceness allocator-findings; exit 0 ;;
  *suites/config*) niceness matrix; log start matrix; sleep 2; log end matrix; exit 0 ;;
  *suites/allocator*) niceness allocator; log start allocator; log end allocator; exit 0 ;;
  *suites/connector*)
    step=connectors; [[ $* == *LMCacheMPConnector* ]] && step=lmcache; [[ $* == *"--kv-engine vllm"* ]] && step=engine
    niceness $step; log start $step; sleep 0.3
    if [[ $* == *vllm_job_start_gate* ]]; then
      touch "$KVCONFORM_CI_START_AFTER.ready-$$-1" "$KVCONFORM_CI_START_AFTER.ready-$$-2"
      until [[ -e $KVCONFORM_CI_START_AFTER ]]; do sleep 0.05; done
    fi
    log checks $step; sleep 0.3; log end $step; exit 1 ;;
  *) exit 0 ;;
esac
'''


def test_the_connector_steps_start_beside_the_matrix_and_check_one_after_another(tmp_path):
    """The connector steps' start-ups overlap the matrix; their checks (wall-clock limits) begin only after the
    matrix and the step before have ended, one step at a time, and each step's wall counts from its turn."""
    venv = tmp_path / "venvs" / "vllm-0.34.0" / "bin"
    venv.mkdir(parents=True)
    (venv / "python").write_text(STAND_IN)
    (venv / "python").chmod(0o755)
    log = tmp_path / "events"
    done = _run(tmp_path, FAKE_LOG=str(log), KVCONFORM_CI_VLLM_RELEASES="0.34.0",
                KVCONFORM_CI_VLLM_VENV_ROOT=str(tmp_path / "venvs"),
                KVCONFORM_CI_VLLM_STEPS="matrix allocator connectors lmcache engine")
    assert done.returncode == 0, done.stdout + done.stderr
    at = {(event, step): float(t) for event, step, t in (line.split() for line in log.read_text().splitlines())}
    steps = ("connectors", "lmcache", "engine")
    assert all(at["start", step] < at["end", "matrix"] for step in steps), at
    order = [("end", "matrix")] + [(event, step) for step in steps for event in ("checks", "end")]
    assert sorted(order, key=at.get) == order, at
    rows = [line for line in (tmp_path / "out" / "summary.md").read_text().splitlines() if line.startswith("| 0.")]
    engine = [row for row in rows if row.startswith("| 0.34.0 | engine | ran |")]
    assert len(engine) == 1 and "s before its turn" in engine[0], rows
    assert any(row.startswith("| 0.34.0 | scheduler-defects | ran |") for row in rows), rows


def test_the_processes_beside_the_matrix_yield_it_a_core_and_the_connector_steps_do_not(tmp_path):
    """While the matrix (one process, the first phase's longest chain) runs, the connector list, the allocator step
    and its findings run niced, so that the kernel keeps a core for the matrix; the matrix and the connector steps
    (whose checks have wall-clock limits) keep the job's niceness. Without a matrix nothing is niced."""
    venv = tmp_path / "venvs" / "vllm-0.34.0" / "bin"
    venv.mkdir(parents=True)
    (venv / "python").write_text(STAND_IN)
    (venv / "python").chmod(0o755)

    def niceness(steps):
        log = tmp_path / f"events-{len(steps)}"
        done = _run(tmp_path, FAKE_LOG=str(log), KVCONFORM_CI_VLLM_RELEASES="0.34.0",
                    KVCONFORM_CI_VLLM_VENV_ROOT=str(tmp_path / "venvs"), KVCONFORM_CI_VLLM_STEPS=steps)
        assert done.returncode == 0, done.stdout + done.stderr
        seen = dict(line.split() for line in Path(f"{log}.nice").read_text().splitlines())
        return {step: int(value) - os.nice(0) for step, value in seen.items()}

    assert niceness("matrix allocator connectors lmcache engine") == {
        "matrix": 0, "listing": 10, "allocator": 10, "allocator-findings": 10, "connectors": 0, "lmcache": 0,
        "engine": 0}
    assert niceness("allocator connectors") == {"listing": 0, "allocator": 0, "allocator-findings": 0,
                                                "connectors": 0}


def test_the_start_gate_holds_each_xdist_worker_until_its_file_exists(tmp_path):
    """.ci/vllm_job_start_gate.py: the workers start (and say so) at once; no test runs before the gate file."""
    import sys
    import time

    (tmp_path / "test_t.py").write_text("import os, time\n"
                                        "def test_a(): open(os.environ['LOGF'], 'a').write(f'{time.time()}\\n')\n"
                                        "def test_b(): open(os.environ['LOGF'], 'a').write(f'{time.time()}\\n')\n")
    gate, logf = tmp_path / "gate", tmp_path / "ran"
    env = {**os.environ, "PYTHONPATH": str(JOB.parent), "KVCONFORM_CI_START_AFTER": str(gate), "LOGF": str(logf)}
    run = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "vllm_job_start_gate",
                            "-n", "2", "test_t.py"], cwd=tmp_path, env=env, stdout=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while len(list(tmp_path.glob("gate.ready-*"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)
        assert len(list(tmp_path.glob("gate.ready-*"))) == 2 and not logf.exists()
        opened = time.time()
        gate.touch()
        out, _ = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 0, out
    assert [float(t) >= opened for t in logf.read_text().split()] == [True, True]


def test_lmcache_is_installed_before_the_first_step_starts():
    """The matrix runs in the background from the release's first step on: LMCache must be in the venv before
    then, since a case that imports LMCache's vLLM integration while pip writes the package meets half of it, and
    the invariants then count a violation of ours (CI on 0.34.0: "No module named 'lmcache'" beside "No module
    named 'lmcache.logging'" for two related cases)."""
    script = JOB.read_text()
    install = script.index('run_step "$R" lmcache-install')
    first_step = min(script.index('run_beside "$R" matrix'), script.index('run_step "$R" allocator'))
    assert install < first_step, "lmcache-install must run before the matrix and the allocator steps start"
    assert script.count("lmcache-install 0 scripts/install-lmcache.sh") == 1, "LMCache is installed in one place"
