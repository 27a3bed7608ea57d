"""Paths as a results file, a report or a JUnit file may show them: never the writing machine's absolute paths.

A run's files travel (CI artifacts, a vendor's report, a merged run of several machines); a path such as
`/home/runner/work/x/suites/connector/test_lookup.py` says where one machine keeps its checkout and nothing
about the run. Paths under the current folder or the kvconform checkout (or installed package) are shown
relative to it; any other absolute path by its file name.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

# the folder holding harness/ and suites/: the checkout, or site-packages for an installed kvconform
PACKAGE_ROOT = Path(__file__).resolve().parent.parent


def _roots() -> list[str]:
    """Folder prefixes to strip, longest first (the current folder may lie inside the checkout or hold it)."""
    roots = {str(PACKAGE_ROOT), str(Path.cwd()), os.path.realpath(Path.cwd())}
    return sorted((root.rstrip(os.sep) + os.sep for root in roots if root != os.sep), key=len, reverse=True)


def portable_path(path: str) -> str:
    """One path: relative to the current folder or the checkout where it lies in one, else its file name;
    a relative path unchanged."""
    if not os.path.isabs(path):
        return path
    for root in _roots():
        if path.startswith(root):
            return path[len(root):] or "."
    return os.path.basename(path.rstrip(os.sep)) or path


def portable_argument(argument: str) -> str:
    """A command-line argument with its path made portable (`/tmp/r`, `--junitxml=/tmp/r/j.xml`)."""
    name, sep, value = argument.partition("=")
    if sep and name.startswith("-"):
        return f"{name}={portable_path(value)}"
    return portable_path(argument)


_ABSOLUTE = re.compile(r"(?<![\w.~/-])/(?:[\w.@+-]+/)*[\w.@+-]+")


def portable_text(text: str) -> str:
    """A message with every absolute path in it made portable (a skip or failure text quoting a file)."""
    if "/" not in text:
        return text
    for root in _roots():
        text = text.replace(root, "")
    return _ABSOLUTE.sub(lambda match: portable_path(match.group(0)), text)
