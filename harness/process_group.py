"""Running a child command (pytest and its xdist workers) in its own process group, so a signal to the
parent reaches every process of the run and none is left behind.

`kvconform report` starts pytest in a new session. A SIGINT or SIGTERM the parent receives is forwarded to
the child's whole group; the parent waits for the group to end (and kills what is still there after a
grace period), then raises `Interrupted` so the caller unwinds: temporary files are removed by their
context managers, nothing is written, and the command line prints one line and exits 128 + the signal.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from typing import Sequence

from harness.errors import UsageError

#: Signals forwarded to the child's group (Ctrl-C, and `kill` / a CI runner's cancel).
FORWARDED = (signal.SIGINT, signal.SIGTERM)
#: How long the group may take to end after the forwarded signal before it is killed.
GRACE_SECONDS = 10.0


class Interrupted(UsageError):
    """The run was stopped by a signal; exit status 128 + the signal number (130 SIGINT, 143 SIGTERM)."""

    def __init__(self, message: str, signum: int):
        super().__init__(message, exit_code=128 + signum)
        self.signum = signum


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes of the group `pgid`, read from /proc; where /proc is missing, [pgid]
    while `killpg(pgid, 0)` finds the group."""
    proc = "/proc"
    if not os.path.isdir(proc):
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return []
        except PermissionError:
            pass
        return [pgid]
    members = []
    for entry in os.listdir(proc):
        if not entry.isdigit():
            continue
        try:
            with open(f"{proc}/{entry}/stat", "rb") as handle:
                stat = handle.read().decode(errors="replace")
        except OSError:  # it ended while we looked
            continue
        fields = stat[stat.rfind(")") + 2:].split()  # state ppid pgrp ...; comm may contain spaces
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            members.append(int(entry))
    return members


def group_alive(pgid: int) -> bool:
    """Whether any live process of the group `pgid` still exists."""
    return bool(group_members(pgid))


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass


class SignalForwarder:
    """Forwards SIGINT/SIGTERM to the process groups of the children started through it.

    Enter it in the main thread (only the main thread may install signal handlers); `run` may then be called
    from any thread, so several passes can run at once. The handlers are installed before any child starts on
    purpose: a child inherits an *ignored* signal across exec (a shell starts background jobs with SIGINT
    ignored), a handled one is reset to default.
    """

    def __init__(self) -> None:
        self.received: list[int] = []
        self._groups: list[int] = []
        self._lock = threading.Lock()
        self._previous: dict = {}

    def __enter__(self) -> "SignalForwarder":
        self._previous = {signum: signal.signal(signum, self._forward) for signum in FORWARDED}
        return self

    def __exit__(self, *exc_info) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def _forward(self, signum, _frame) -> None:
        self.received.append(signum)
        with self._lock:
            groups = list(self._groups)
        for pgid in groups:
            _signal_group(pgid, signum)

    def run(self, command: Sequence[str], what: str, **popen_kwargs) -> int:
        """Run `command` in a new session and return its exit status; `popen_kwargs` go to `subprocess.Popen`.

        Once a forwarded signal stopped the child's group, `Interrupted` is raised naming `what` was stopped.
        """
        with self._lock:
            process = subprocess.Popen(list(command), start_new_session=True, **popen_kwargs)
            self._groups.append(process.pid)  # start_new_session makes the child its group's leader
        if self.received:
            _signal_group(process.pid, self.received[0])
        try:
            returncode = process.wait()
            if self.received:
                end_group(process)
            elif group_alive(process.pid):
                # pytest ended but left processes in its group (a worker that hung): do not leave them behind
                end_group(process, grace=2.0)
        except BaseException:
            _signal_group(process.pid, signal.SIGTERM)
            end_group(process)
            raise
        finally:
            with self._lock:
                self._groups.remove(process.pid)
        if self.received:
            name = signal.Signals(self.received[0]).name
            raise Interrupted(f"kvconform report: interrupted by {name}; stopped {what} and every process it "
                              "started; no report written, earlier reports left as they were", self.received[0])
        return returncode


def end_group(process: subprocess.Popen, grace: float = GRACE_SECONDS) -> None:
    """Wait for the child and every process of its group to end; SIGKILL what outlives `grace` seconds."""
    pgid = process.pid
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        process.poll()
        if process.returncode is not None and not group_alive(pgid):
            return
        time.sleep(0.05)
    _signal_group(pgid, signal.SIGKILL)
    process.wait()
    while group_alive(pgid) and time.monotonic() < deadline + grace:
        time.sleep(0.05)

