"""Progress of `kvconform report`'s pytest passes: a tiny pytest plugin that counts, and a monitor that prints.

The plugin (loaded into each pass with ``-p harness.report.progress``) writes ``"done total"`` into the file
named by ``$KVCONFORM_PROGRESS_FILE`` at most every half second; under pytest-xdist only the controller
writes (it sees every worker's reports). The monitor in the `kvconform report` process reads those files and
prints one line per pass: what runs, done/total and an estimate of the time left. On a terminal the line
is rewritten in place; otherwise a line is printed every `PLAIN_INTERVAL_S` seconds.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

PROGRESS_ENV = "KVCONFORM_PROGRESS_FILE"
PLUGIN = "harness.report.progress"
_WRITE_INTERVAL_S = 0.5
#: the attribute in which an item that judges several tests, each with its own results entry, says how many
TESTS_ATTR = "kvconform_tests"
PLAIN_INTERVAL_S = 15.0


# ---------------------------------------------------------------- the pytest side (runs inside each pass)

class _Counter:
    """Counts finished tests and writes the count to the progress file, rate-limited."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.total = 0
        self.done = 0
        self.weights: dict[str, int] = {}  # tests per item, where known (not under xdist: the workers collect)
        self._last_write = 0.0

    def write(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_write < _WRITE_INTERVAL_S:
            return
        self._last_write = now
        temporary = f"{self.path}.tmp"
        with open(temporary, "w", encoding="utf-8") as handle:
            handle.write(f"{self.done} {self.total}\n")
        os.replace(temporary, self.path)

    def pytest_collection_finish(self, session) -> None:
        # an item that judges many tests (a config matrix era, `TESTS_ATTR`) counts as those tests
        self.weights = {item.nodeid: getattr(item, TESTS_ATTR, 1) for item in session.items}
        self.total = sum(self.weights.values())
        self.write(force=True)

    @pytest.hookimpl(optionalhook=True)  # an xdist hook: unknown in a pass without xdist
    def pytest_xdist_node_collection_finished(self, node, ids) -> None:
        self.total = max(self.total, len(ids))
        self.write(force=True)

    def pytest_runtest_logreport(self, report) -> None:
        if report.when == "teardown":
            self.done += self.weights.get(report.nodeid, 1)
            self.write()

    def pytest_sessionfinish(self) -> None:
        self.write(force=True)


def pytest_configure(config) -> None:
    """Register the counter in the main (or xdist controller) process when the progress file is named."""
    path = os.environ.get(PROGRESS_ENV)
    if path and not hasattr(config, "workerinput"):
        config.pluginmanager.register(_Counter(path), "kvconform-progress-counter")


# ---------------------------------------------------------------- the `kvconform report` side

@dataclass
class PassProgress:
    """One pass as the monitor sees it."""

    label: str
    path: Path
    started: float = field(default_factory=time.monotonic)
    finished: float | None = None
    done: int = 0
    total: int = 0
    #: when the first finished tests were seen, and how many: the rate is taken from then on, because the time
    #: before them is start-up and collection (and, for a config matrix era item, a whole era at once)
    first_seen: tuple[float, int] | None = None

    def refresh(self, now: float | None = None) -> None:
        """Read the pass's counts from its progress file (`now`: the monotonic time of the reading)."""
        try:
            done, total = self.path.read_text(encoding="utf-8").split()
            self.done, self.total = int(done), int(total)
        except (OSError, ValueError):
            return
        if self.done and self.first_seen is None:
            self.first_seen = (time.monotonic() if now is None else now, self.done)

    def describe(self, now: float | None = None) -> str:
        """'config matrix: 8,123/16,268 tests, about 12 s left' (or 'done in 20 s'); no estimate until tests
        have finished at two readings."""
        now = time.monotonic() if now is None else now
        elapsed = (self.finished or now) - self.started
        if self.finished is not None:
            return f"{self.label}: {self.done:,}/{self.total:,} tests, done in {elapsed:.0f} s"
        if not self.total:
            return f"{self.label}: collecting ({elapsed:.0f} s)"
        text = f"{self.label}: {self.done:,}/{self.total:,} tests"
        if self.first_seen is not None and self.done > self.first_seen[1] and now > self.first_seen[0]:
            rate = (self.done - self.first_seen[1]) / (now - self.first_seen[0])
            text += f", about {(self.total - self.done) / rate:.0f} s left"
        return text


class ProgressMonitor:
    """Prints the passes' progress from a background thread until `close()`."""

    def __init__(self, stream=None, interactive: bool | None = None) -> None:
        self.stream = stream or sys.stdout
        self.interactive = self.stream.isatty() if interactive is None else interactive
        self.passes: list[PassProgress] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_plain = time.monotonic()
        self._line_open = False

    def add(self, label: str, path: Path) -> PassProgress:
        """Start watching a pass; prints its first line."""
        progress = PassProgress(label, path)
        with self._lock:
            self.passes.append(progress)
            self._print_permanent(f"kvconform report: {label}: started")
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="kvconform-progress", daemon=True)
            self._thread.start()
        return progress

    def finish(self, progress: PassProgress) -> None:
        """Mark a pass finished and print its closing line."""
        with self._lock:
            progress.refresh()
            progress.finished = time.monotonic()
            self._print_permanent(f"kvconform report: {progress.describe()}")

    def close(self) -> None:
        """Stop the background thread (and end an open status line)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        with self._lock:
            self._clear()

    def _running(self) -> list[PassProgress]:
        return [p for p in self.passes if p.finished is None]

    def _loop(self) -> None:
        while not self._stop.wait(0.5):
            with self._lock:
                running = self._running()
                for progress in running:
                    progress.refresh()
                if not running:
                    continue
                if self.interactive:
                    self._clear()
                    self.stream.write("kvconform report: " + " · ".join(p.describe() for p in running))
                    self._line_open = True
                    self.stream.flush()
                elif time.monotonic() - self._last_plain >= PLAIN_INTERVAL_S:
                    self._last_plain = time.monotonic()
                    for progress in running:
                        self.stream.write(f"kvconform report: {progress.describe()}\n")
                    self.stream.flush()

    def _clear(self) -> None:
        if self._line_open:
            self.stream.write("\r\033[K")
            self._line_open = False

    def _print_permanent(self, line: str) -> None:
        self._clear()
        self.stream.write(line + "\n")
        self.stream.flush()
