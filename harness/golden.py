"""Golden snapshot files: one readable `key = value` line per entry, sorted, rewritten atomically.

A suite decides what a key and a value are; this module only reads, merges and writes the files, and
`GoldenStore` gathers the entries a run checked or recorded (per process; the pytest plugin ships a
worker's store to the controller through xdist's `workeroutput`).
"""

from __future__ import annotations

from pathlib import Path

from harness.atomic_write import write_text_atomic

SEPARATOR = " = "


def read_golden(path: str | Path) -> dict[str, str]:
    """The entries of a golden file ({} when it does not exist); '#' lines are comments."""
    path = Path(path)
    if not path.is_file():
        return {}
    entries: dict[str, str] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        key, sep, value = line.partition(SEPARATOR)
        if not sep:
            raise ValueError(f"{path}:{number}: golden line has no '{SEPARATOR.strip()}': {line!r}")
        entries[key.strip()] = value.strip()
    return entries


def render_golden(entries: dict[str, str], header: str) -> str:
    """The text of a golden file: comment header lines, then the entries sorted by key."""
    lines = [f"# {line}" if line else "#" for line in header.splitlines()]
    lines += [f"{key}{SEPARATOR}{entries[key]}" for key in sorted(entries)]
    return "\n".join(lines) + "\n"


class GoldenStore:
    """What one run knows about golden files: keys the suite declared and values it recorded."""

    def __init__(self) -> None:
        self.declared: dict[str, set[str]] = {}
        self.recorded: dict[str, dict[str, str]] = {}
        self.headers: dict[str, str] = {}
        self._cache: dict[str, dict[str, str]] = {}

    def declare(self, path: str | Path, keys, header: str) -> None:
        """Name every key a golden file should hold (so entries of removed cells are dropped on update)."""
        self.declared.setdefault(str(path), set()).update(keys)
        self.headers[str(path)] = header

    def expected(self, path: str | Path, key: str) -> str | None:
        """The committed value of `key` (None when the file or the entry is missing)."""
        path = str(path)
        if path not in self._cache:
            self._cache[path] = read_golden(path)
        return self._cache[path].get(key)

    def record(self, path: str | Path, key: str, value: str) -> None:
        """Remember the value this run observed (written by `write_updates`)."""
        self.recorded.setdefault(str(path), {})[key] = value

    def to_wire(self) -> dict:
        """A JSON-able form, for shipping a worker's store to the controller."""
        return {
            "declared": {path: sorted(keys) for path, keys in self.declared.items()},
            "recorded": self.recorded,
            "headers": self.headers,
        }

    def merge_wire(self, wire: dict) -> None:
        """Add a worker's store (from `to_wire`)."""
        for path, keys in wire.get("declared", {}).items():
            self.declared.setdefault(path, set()).update(keys)
        for path, values in wire.get("recorded", {}).items():
            self.recorded.setdefault(path, {}).update(values)
        self.headers.update(wire.get("headers", {}))

    def write_updates(self) -> list[Path]:
        """Rewrite every golden file something was recorded for; returns the files written.

        Entries recorded in this run replace the committed ones; committed entries of keys that are still
        declared but did not run (deselected) are kept; keys no longer declared are dropped.
        """
        written = []
        for path, values in sorted(self.recorded.items()):
            declared = self.declared.get(path, set(values))
            entries = {key: value for key, value in read_golden(path).items() if key in declared}
            entries.update(values)
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(path, render_golden(entries, self.headers.get(path, "")))
            written.append(Path(path))
        return written
