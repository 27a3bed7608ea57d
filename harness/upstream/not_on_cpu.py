"""The tests of vLLM's tests/v1/core that cannot pass on vLLM in the upstream step's environment (reviewed data,
`not_on_cpu.toml` beside this module), and which of them apply to a venv.

The upstream step compares only the tests that pass on vLLM, so a test that cannot pass there is excluded from the
comparison whether it runs or not; the listed ones are those whose cost is large (a model-class inspection in a
subprocess, an engine start). Each cause names the module whose absence makes its tests fail (`needs`): the cause
applies only while that module cannot be found in the venv, checked without importing it, so installing it brings
its tests back into the run.
"""

from __future__ import annotations

import subprocess
import tomllib
from dataclasses import dataclass
from pathlib import Path

__all__ = ["DATA", "Cause", "NotOnCpuError", "load_causes", "absent_modules", "not_on_cpu"]

DATA = Path(__file__).with_name("not_on_cpu.toml")

# Run with the venv's Python: prints each name of argv that cannot be found. A dotted name is looked up inside its
# parent package's folders (its parent is found, not imported: `vllm._C` is the compiled extension's file, and
# importing vLLM to find it would cost seconds).
_PROBE = r"""
import importlib.machinery, importlib.util, sys
for name in sys.argv[1:]:
    top, _, rest = name.partition(".")
    spec = importlib.util.find_spec(top)
    if spec is not None and rest:
        spec = importlib.machinery.PathFinder.find_spec(rest.replace(".", "/"), spec.submodule_search_locations or [])
    if spec is None:
        print(name)
"""


class NotOnCpuError(Exception):
    """The data file is malformed (the message names the field and what is accepted)."""


@dataclass(frozen=True)
class Cause:
    """One reason a group of tests cannot pass on vLLM here: the module whose absence it is, and the tests."""

    name: str
    needs: str
    reason: str
    tests: tuple[str, ...]


def load_causes(release: str, path: Path = DATA) -> list[Cause]:
    """The causes listed for `release` with their tests (none for a release the file does not name)."""
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    causes, lists = data.get("cause", {}), data.get("release", {}).get(release, {})
    out = []
    for name, tests in sorted(lists.items()):
        if name not in causes:
            raise NotOnCpuError(f"{path.name}: release.{release!r}.{name}: no [cause.{name}]; "
                                f"accepted: {', '.join(sorted(causes))}")
        cause = causes[name]
        for field in ("needs", "reason"):
            if not isinstance(cause.get(field), str) or not cause[field]:
                raise NotOnCpuError(f"{path.name}: cause.{name}.{field}: {cause.get(field)!r}; expected a non-empty string")
        if not isinstance(tests, list) or not all(isinstance(t, str) and "::" in t for t in tests):
            raise NotOnCpuError(f"{path.name}: release.{release!r}.{name}: expected a list of pytest node ids "
                                "('file.py::test')")
        out.append(Cause(name, cause["needs"], cause["reason"], tuple(tests)))
    return out


def absent_modules(python: str, names: list[str]) -> set[str]:
    """Which of `names` cannot be found by the interpreter `python` (none imported)."""
    if not names:
        return set()
    done = subprocess.run([python, "-c", _PROBE, *names], capture_output=True, text=True, check=True)
    return set(done.stdout.split())


def not_on_cpu(release: str, python: str, path: Path = DATA) -> tuple[dict[str, str], list[Cause]]:
    """({test id: reason} of the listed tests whose cause applies to `python`'s venv, the causes that do not apply
    because their module is there)."""
    causes = load_causes(release, path)
    absent = absent_modules(python, sorted({c.needs for c in causes}))
    applying = {test: f"not run on vLLM ({path.name}, {c.name}): {c.reason}"
                for c in causes if c.needs in absent for test in c.tests}
    return applying, [c for c in causes if c.needs not in absent]
