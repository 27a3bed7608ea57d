"""The `run_info` block of a results file: what ran, where, and when."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from harness.plugins.session_info import kvconform_version
from harness.portable_paths import portable_argument

_REPO_ROOT = Path(__file__).resolve().parent.parent


def utc_now_iso() -> str:
    """The current time in UTC, ISO 8601 with seconds."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _distribution_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def git_commit() -> dict[str, Any]:
    """The commit of the kvconform checkout (None outside git) and whether the tree has local changes."""

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", "-C", str(_REPO_ROOT), *args], capture_output=True, text=True, timeout=10, check=False
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    dirty = None
    if commit:
        status = git("status", "--porcelain", "--untracked-files=no")
        dirty = bool(status) if status is not None else None
    return {"git_commit": commit, "git_dirty": dirty}


def collect_run_info(*, target: str | None = None, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Describe this process's environment; timing fields are filled in by the caller."""
    info: dict[str, Any] = {
        "kvconform_version": kvconform_version(),
        **git_commit(),
        "target": target,
        "platform": {"system": platform.system(), "release": platform.release(), "platform": platform.platform()},
        "python_version": platform.python_version(),
        "torch_version": _distribution_version("torch"),
        "machine": {"arch": platform.machine(), "node": platform.node(), "cpu_count": os.cpu_count()},
        "argv": [portable_argument(argument) for argument in sys.argv],
        "started_at": None,
        "finished_at": None,
        "wall_seconds": None,
    }
    if extra:
        info.update(extra)
    return info
