"""The LMCache server lifecycle (harness.targets.connector.lmcache_server), without LMCache: a stand-in module named like
LMCache's server, put first on PYTHONPATH, behaves as the real one does at the edges the harness relies on
(the readiness line, exiting early, ignoring SIGTERM)."""

from __future__ import annotations

import os
import signal
import textwrap
import time

import pytest

from harness.targets.connector import lmcache_server

READY = textwrap.dedent("""
    import sys, time
    print("LMCache zmq cache server is running on localhost:%s" % sys.argv[sys.argv.index("--port") + 1], flush=True)
    print("LMCache cache server is running...", flush=True)
    time.sleep(600)
""")
EXITS = "import sys; print('bad argument --eviction-policy', flush=True); sys.exit(3)\n"
STUBBORN = textwrap.dedent("""
    import signal, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print("LMCache cache server is running...", flush=True)
    time.sleep(600)
""")


@pytest.fixture
def fake_server(tmp_path, monkeypatch):
    """Write `body` as lmcache/v1/multiprocess/server.py under tmp_path and put it first on PYTHONPATH."""

    def write(body: str):
        package = tmp_path / "lmcache" / "v1" / "multiprocess"
        package.mkdir(parents=True, exist_ok=True)
        for folder in (tmp_path / "lmcache", tmp_path / "lmcache" / "v1", package):
            (folder / "__init__.py").write_text("")
        (package / "server.py").write_text(body)
        monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))

    yield write
    lmcache_server.stop_all()


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_ready_server_gets_a_free_port_and_stops_with_its_group(fake_server):
    fake_server(READY)
    server = lmcache_server.start(ready_timeout_s=60)
    assert server.alive() and server.port > 0 and server.host == "tcp://localhost"
    assert f"running on localhost:{server.port}" in server.log_tail()
    assert os.getpgid(server.process.pid) == server.process.pid, "its own process group"
    pid = server.process.pid
    lmcache_server.stop_all()
    assert server.process.poll() is not None and _gone(pid)


def test_a_server_that_exits_early_is_an_error_with_its_log(fake_server):
    fake_server(EXITS)
    with pytest.raises(lmcache_server.LMCacheServerError) as info:
        lmcache_server.start(ready_timeout_s=60)
    message = str(info.value)
    assert "exited with status 3 before it was ready" in message
    assert "bad argument --eviction-policy" in message, "the log tail is shown"


def test_a_server_never_ready_times_out_and_is_killed(fake_server):
    fake_server("import time; time.sleep(600)\n")
    with pytest.raises(lmcache_server.LMCacheServerError) as info:
        lmcache_server.start(ready_timeout_s=1.5)
    assert "was not ready after 1.5s" in str(info.value)
    assert all(s.process.poll() is not None for s in lmcache_server._servers)


def test_a_server_ignoring_sigterm_is_killed(fake_server, monkeypatch):
    fake_server(STUBBORN)
    monkeypatch.setattr(lmcache_server, "STOP_TIMEOUT_S", 1.0)
    server = lmcache_server.start(ready_timeout_s=60)
    time.sleep(0.2)
    server.stop()
    assert server.process.returncode == -signal.SIGKILL
