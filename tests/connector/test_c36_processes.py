"""C36's other processes (`suites.connector.processes`): a forked child of a hash-seed server reads what a fresh
interpreter reads, each job gets a process of its own, the connectors of one pytest process share one server per
seed, a busy server gives way to a fresh interpreter, and a server leaves without the interpreter's teardown."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from harness.targets.connector.target import ConnectorTarget
from suites.connector import processes
from suites.connector.context import CheckContext, prompt

REFERENCE = "reference_impl.connector.lmcache_like:LMCacheLikeConnector"


def _answer(proc) -> dict:
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


def test_a_forked_lookup_finds_what_this_process_stored_on_disk_as_a_fresh_interpreter_does(tmp_path):
    target = ConnectorTarget("LMCacheLikeConnector", REFERENCE, "--kv-connector", builtin=True)
    ctx = CheckContext(target, "fa_only", check_id="C36")
    try:
        extra = ctx.extra_config(disk_path=str(tmp_path / "disk"))
        ctx.run(ctx.engine(extra=extra), prompt(36, 700))
        lookup = processes.job(ctx, "fa_only", extra, "lookup", 36)
        first = processes.forked("4242", lookup)
        assert isinstance(first, processes.ForkedJob)
        found = _answer(first)
        second = processes.forked("4242", lookup)
        assert isinstance(second, processes.ForkedJob) and second.pid != first.pid, "a process of its own per job"
        assert _answer(second) == found
        assert _answer(processes.send(processes.fresh_interpreter("4242"), lookup)) == found
        assert found["hit"] > 0 and found["keys"], found  # the disk tier outlives this process: every one hits
        assert len({server.proc.pid for server in processes._SERVERS.values()}) == len(processes._SERVERS) == 1
    finally:
        ctx.close()


def test_a_busy_server_gives_way_to_a_fresh_interpreter_and_a_dead_one_is_restarted():
    target = ConnectorTarget("LMCacheLikeConnector", REFERENCE, "--kv-connector", builtin=True)
    ctx = CheckContext(target, "fa_only", check_id="C36")
    try:
        lookup = processes.job(ctx, "fa_only", ctx.extra_config(), "lookup", 36)
        held = processes.forked("4242", lookup)  # not answered yet: the server is busy with it
        other = processes.forked("4242", lookup)
        assert isinstance(other, subprocess.Popen), "a fresh interpreter while the server is busy"
        answer = _answer(held)
        assert answer["hit"] == 0 and answer["keys"], "nothing stored under this check's store name"
        assert _answer(other) == answer
        server = processes._SERVERS["4242"]
        server.proc.kill()
        server.proc.wait()
        again = processes.forked("4242", lookup)
        assert isinstance(again, processes.ForkedJob) and processes._SERVERS["4242"] is not server
        assert _answer(again)["hit"] == 0
    finally:
        ctx.close()


# Imported first in a process: leaves a mark when the interpreter's teardown frees it.
_TEARDOWN_MARK = """
import os
class FreedAtTeardown:
    def __del__(self, path=os.environ["MARKS"], write=os.write, open_=os.open, close=os.close):
        fd = open_(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        write(fd, b"teardown\\n")
        close(fd)
KEPT = FreedAtTeardown()
"""


def test_a_server_leaves_at_the_end_of_its_input_without_the_interpreters_teardown(tmp_path):
    (tmp_path / "teardown_mark.py").write_text(_TEARDOWN_MARK)
    repo = Path(processes.__file__).resolve().parents[2]
    for script, marked in (("import teardown_mark", True),  # the control: a plain interpreter's exit frees it
                           ("import teardown_mark\nfrom suites.connector.processes import serve\nserve()", False)):
        marks = tmp_path / "marks"
        marks.unlink(missing_ok=True)
        env = dict(os.environ, MARKS=str(marks), PYTHONPATH=os.pathsep.join((str(tmp_path), str(repo))))
        done = subprocess.run([sys.executable, "-c", script], input="", capture_output=True, text=True, env=env,
                              timeout=240)
        assert done.returncode == 0, done.stderr
        assert marks.exists() == marked, script
