"""Reading the upstream job's results file (`upstream-vllm-VERSION.json`) for the report.

The report shows, per vLLM release and per file of vLLM's `tests/v1/core`, how many tests ran, how many pass
on vLLM (CPU) and how many of those pass on the reference allocator; `load_upstream` checks a file has
exactly what that table needs and says in one line what is wrong otherwise.
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["UpstreamResultsError", "load_upstream"]

_COUNTS = ("collected", "pass_on_vllm", "pass_on_reference")


class UpstreamResultsError(ValueError):
    """An upstream results file that cannot be read or lacks a field the report needs."""


def _counts(path: Path, where: str, value) -> dict[str, int]:
    if not isinstance(value, dict):
        raise UpstreamResultsError(f"{path}: {where} must be an object with {', '.join(_COUNTS)}, got {value!r}")
    for key in _COUNTS:
        count = value.get(key)
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise UpstreamResultsError(f"{path}: {where}.{key} must be a non-negative integer, got {count!r}")
    return {key: value[key] for key in _COUNTS}


def load_upstream(path: str | Path) -> dict:
    """{'vllm_version', 'total': counts, 'files': {file: counts}} from one upstream results file."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UpstreamResultsError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    except json.JSONDecodeError as exc:
        raise UpstreamResultsError(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, dict):
        raise UpstreamResultsError(f"{path}: expected a JSON object (an upstream-vllm-VERSION.json), got "
                                   f"{type(data).__name__}")
    version = data.get("vllm_version")
    if not isinstance(version, str) or not version:
        raise UpstreamResultsError(f"{path}: vllm_version must be a non-empty string, got {version!r}")
    files = data.get("files")
    if not isinstance(files, dict):
        raise UpstreamResultsError(f"{path}: files must be an object of per-file counts, got {files!r}")
    return {"vllm_version": version, "total": _counts(path, "(top level)", data),
            "files": {name: _counts(path, f"files[{name!r}]", counts) for name, counts in sorted(files.items())}}
