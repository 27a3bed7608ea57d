"""LMCache's multi-process cache server, started and stopped by the suite for `vllm:LMCacheMPConnector`.

The connector under test is LMCache's own `LMCacheMPConnector` (vLLM 0.33 loads it when the `lmcache` package is
installed); it talks to a separate server process over ZMQ. kvconform starts that real server, one per test
process, on a free port, the first time a connector needs it:

* the server runs in its own process group (`start_new_session`), and on Linux it is told to die with its
  parent (`PR_SET_PDEATHSIG`), so a crashed or killed test process leaves no orphan;
* readiness: the server's own "is running" log line, within `READY_TIMEOUT_S`; a server that exits or never gets
  ready raises `LMCacheServerError` with the tail of its log;
* `stop_all()` (the connector suite's session fixture finalizer, and `atexit`) sends SIGTERM to the group, then
  SIGKILL after `STOP_TIMEOUT_S`.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

READY_LINE = "cache server is running"  # logged by lmcache.v1.multiprocess.server once it serves
READY_TIMEOUT_S = 120.0  # about 4 s on an idle 2-core machine; generous for a loaded one
STOP_TIMEOUT_S = 10.0
LOG_TAIL_LINES = 30

# The command line the issue and LMCache's docs give for a CPU server (engine-driven transfers: the only mode
# a CPU worker can use).
SERVER_ARGS = ("--chunk-size", "256", "--l1-size-gb", "0.25", "--eviction-policy", "LRU",
               "--disable-observability", "--supported-transfer-mode", "engine_driven")


class LMCacheServerError(RuntimeError):
    """The LMCache server could not be started (the message carries the tail of its log)."""


def free_port() -> int:
    """A TCP port nothing listens on now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@dataclass
class LMCacheServer:
    """One running server: its port, process and log file."""

    port: int
    process: subprocess.Popen
    log_path: Path
    started_s: float = field(default=0.0)

    @property
    def host(self) -> str:
        """The host URL the connector's `lmcache.mp.host` takes."""
        return "tcp://localhost"

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        """The last `lines` lines of the server's output."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def alive(self) -> bool:
        """Whether the server process is still running."""
        return self.process.poll() is None

    def stop(self) -> None:
        """SIGTERM the server's process group, SIGKILL it if it lingers."""
        if self.process.poll() is not None:
            return
        for sig, wait in ((signal.SIGTERM, STOP_TIMEOUT_S), (signal.SIGKILL, STOP_TIMEOUT_S)):
            try:
                os.killpg(self.process.pid, sig)
            except ProcessLookupError:
                return
            try:
                self.process.wait(wait)
                return
            except subprocess.TimeoutExpired:
                continue


_lock = threading.Lock()
_servers: list[LMCacheServer] = []
_failure: list[LMCacheServerError] = []  # a server that would not start is not retried for every check


def start(python: str | None = None, ready_timeout_s: float = READY_TIMEOUT_S) -> LMCacheServer:
    """Start a server on a free port and wait until it serves; LMCacheServerError (log tail included) if it
    exits or is not ready in time."""
    port = free_port()
    log_path = Path(tempfile.mkstemp(prefix=f"kvconform-lmcache-{port}-", suffix=".log")[1])
    command = [python or sys.executable, "-m", "lmcache.v1.multiprocess.server", "--host", "localhost",
               "--port", str(port), *SERVER_ARGS]
    t0 = time.monotonic()
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   start_new_session=True, preexec_fn=_die_with_parent)
    server = LMCacheServer(port, process, log_path)
    _servers.append(server)
    deadline = t0 + ready_timeout_s
    while True:
        if READY_LINE in log_path.read_text(errors="replace"):
            server.started_s = time.monotonic() - t0
            return server
        if process.poll() is not None:
            raise LMCacheServerError(f"the LMCache server exited with status {process.returncode} before it was "
                                     f"ready ({' '.join(command)}); its log:\n{server.log_tail()}")
        if time.monotonic() > deadline:
            server.stop()
            raise LMCacheServerError(f"the LMCache server was not ready after {ready_timeout_s:g}s "
                                     f"({' '.join(command)}); its log:\n{server.log_tail()}")
        time.sleep(0.1)


def shared() -> LMCacheServer:
    """This process's server, started on first use (and again if it died)."""
    with _lock:
        running = [s for s in _servers if s.alive() and s.started_s]
        if running:
            return running[-1]
        if _failure:
            raise _failure[0]
        try:
            return start()
        except LMCacheServerError as exc:
            _failure.append(exc)
            raise


def stop_all() -> None:
    """Stop every server this process started and delete their logs."""
    with _lock:
        while _servers:
            server = _servers.pop()
            server.stop()
            try:
                server.log_path.unlink()
            except OSError:
                pass


atexit.register(stop_all)
