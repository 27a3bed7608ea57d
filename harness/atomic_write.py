"""Atomic file output: a reader sees the old file or the complete new one, never a half-written one."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# mkstemp creates files readable by the owner only; a report should get the usual permissions.
_FILE_MODE = 0o666 & ~_current_umask()


def _write_temp(path: Path, text: str | bytes) -> Path:
    """Write `text` (or bytes, as they are) to a temporary file beside `path` (same filesystem, so os.replace
    is atomic)."""
    fd, temp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, _FILE_MODE)
        binary = isinstance(text, bytes)
        with (os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8", newline="\n")) as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        Path(temp_name).unlink(missing_ok=True)
        raise
    return Path(temp_name)


def write_text_atomic(path: str | os.PathLike, text: str | bytes) -> None:
    """Replace `path` with `text` (or bytes) in one step (temporary file + os.replace)."""
    write_files_atomic({path: text})


def write_files_atomic(files: dict[str | os.PathLike, str | bytes]) -> None:
    """Write several files so that none is replaced unless every one was written out completely.

    All contents go to temporary files first; only when all of them exist are they moved into place.
    """
    staged: list[tuple[Path, Path]] = []
    try:
        for target, text in files.items():
            target = Path(target)
            staged.append((_write_temp(target, text), target))
    except BaseException:
        for temp, _ in staged:
            temp.unlink(missing_ok=True)
        raise
    for temp, target in staged:
        os.replace(temp, target)


def ensure_writable_dir(path: str | os.PathLike) -> Path:
    """Create `path` if needed and prove a file can be written there; raise OSError otherwise."""
    directory = Path(path)
    directory.mkdir(parents=True, exist_ok=True)
    if not directory.is_dir():
        raise NotADirectoryError(f"{directory} is not a directory")
    probe_writable(directory)
    return directory


def probe_writable(directory: str | os.PathLike) -> None:
    """Prove that a file can be created in the existing folder `directory` (a temporary file, removed at
    once); raise OSError otherwise. Permission bits alone do not tell: root passes `os.access` on /proc."""
    _write_temp(Path(directory) / "write-probe", "").unlink()
