"""Which source files of vLLM's HMA path changed between two installed releases.

    python -m harness.release.changed_files OLD NEW [--files hma_files.toml]

OLD and NEW are installed `vllm` package folders (site-packages/vllm) or venvs holding one. The files
compared are those `hma_files.toml` lists (per part: config, allocator, connectors); a file is added,
removed, or changed with the number of lines added and removed. Exit status: 0 nothing changed,
1 something changed, 2 bad arguments (one line).
"""

from __future__ import annotations

import argparse
import difflib
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

from harness.errors import UsageError

HMA_FILES = Path(__file__).with_name("hma_files.toml")


@dataclass(frozen=True)
class FileChange:
    """One HMA-path file that differs: `kind` is added, removed or changed; line counts for changed files."""

    part: str
    path: str
    kind: str
    added: int = 0
    removed: int = 0

    def line(self) -> str:
        """The change as one line of the listing."""
        if self.kind == "changed":
            return f"  {self.path}: +{self.added} -{self.removed} lines"
        return f"  {self.path}: {self.kind}"


def load_patterns(path: Path = HMA_FILES) -> dict[str, list[str]]:
    """Part -> glob patterns, from the reviewed list; a malformed list is a usage error naming the file."""
    try:
        with open(path, "rb") as handle:
            data = tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"--files {path}: cannot read the HMA file list ({exc})") from None
    parts = {}
    for part, body in data.items():
        files = body.get("files") if isinstance(body, dict) else None
        if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
            raise UsageError(f"--files {path}: [{part}] needs files = [list of glob patterns]")
        parts[part] = files
    return parts


def vllm_package_dir(given: str) -> Path:
    """The `vllm` package folder for a path: the folder itself, or the one inside a venv."""
    path = Path(given)
    if (path / "__init__.py").is_file() and path.name == "vllm":
        return path
    found = sorted(path.glob("lib/python3*/site-packages/vllm/__init__.py"))
    if found:
        return found[0].parent
    raise UsageError(f"{given}: not a vllm package folder nor a venv with vLLM installed "
                     "(expected .../site-packages/vllm or a venv holding it)")


def _matched(root: Path, patterns: list[str]) -> set[str]:
    return {p.relative_to(root).as_posix() for pattern in patterns for p in root.glob(pattern) if p.is_file()}


def _read_lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8", errors="replace").splitlines()


def changed_files(old: Path, new: Path, parts: dict[str, list[str]]) -> list[FileChange]:
    """Every listed file that was added, removed or changed from `old` to `new`, by part, then path."""
    changes: list[FileChange] = []
    seen: set[str] = set()
    for part, patterns in parts.items():
        for rel in sorted(_matched(old, patterns) | _matched(new, patterns)):
            if rel in seen:  # a file two parts list belongs to the first
                continue
            seen.add(rel)
            before, after = old / rel, new / rel
            if not before.is_file():
                changes.append(FileChange(part, rel, "added"))
            elif not after.is_file():
                changes.append(FileChange(part, rel, "removed"))
            elif before.read_bytes() != after.read_bytes():
                added = removed = 0
                for line in difflib.unified_diff(_read_lines(before), _read_lines(after), lineterm="", n=0):
                    if line.startswith("+") and not line.startswith("+++"):
                        added += 1
                    elif line.startswith("-") and not line.startswith("---"):
                        removed += 1
                changes.append(FileChange(part, rel, "changed", added, removed))
    return changes


def render(changes: list[FileChange], old_label: str, new_label: str) -> str:
    """The listing: a heading per part with its changed files, or one line saying nothing changed."""
    if not changes:
        return f"HMA-path files: none changed from {old_label} to {new_label}"
    lines = [f"HMA-path files changed from {old_label} to {new_label}: {len(changes)}"]
    for part in dict.fromkeys(c.part for c in changes):
        own = [c for c in changes if c.part == part]
        lines.append(f"{part} ({len(own)}):")
        lines.extend(c.line() for c in own)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Command line: print the listing; exit 1 when a file changed."""
    parser = argparse.ArgumentParser(prog="python -m harness.release.changed_files", allow_abbrev=False,
                                     description="List the HMA-path source files that differ between two vLLM installs.")
    parser.add_argument("old", help="the previous release: its vllm package folder or its venv")
    parser.add_argument("new", help="the new release: its vllm package folder or its venv")
    parser.add_argument("--files", default=str(HMA_FILES), help="the list of HMA-path files (TOML)")
    parser.add_argument("--old-label", default=None, help="name of the previous release in the output")
    parser.add_argument("--new-label", default=None, help="name of the new release in the output")
    args = parser.parse_args(argv)
    try:
        old, new = vllm_package_dir(args.old), vllm_package_dir(args.new)
        changes = changed_files(old, new, load_patterns(Path(args.files)))
    except UsageError as exc:
        print(f"changed_files: {exc}", file=sys.stderr)
        return exc.exit_code
    print(render(changes, args.old_label or args.old, args.new_label or args.new))
    return 1 if changes else 0


if __name__ == "__main__":
    sys.exit(main())
