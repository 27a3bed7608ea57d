"""JUnit XML for `kvconform report -- --junitxml FILE`: one file covering every pytest pass of the run.

The report runs the suites as several pytest processes (`harness.report.passes`); each would write (and
overwrite) the same `--junitxml` file, leaving only the last pass. Instead each pass writes its own file in
the run's scratch folder and the files are merged: one `<testsuites>` root holding every pass's
`<testsuite>` (named after the pass), with the totals summed, and no absolute path of this machine in its
texts (`harness.portable_paths`). The merged file is written atomically, and only when the report itself is.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from harness.portable_paths import portable_text

# pytest's spellings of the option (argparse also accepts `--junitxml=PATH`)
JUNIT_OPTIONS = ("--junitxml", "--junit-xml")
_COUNTS = ("tests", "failures", "errors", "skipped")


def split_junit_option(pytest_args: list[str]) -> tuple[str | None, list[str]]:
    """(the `--junitxml` path or None, the arguments without it); the last occurrence wins, as in pytest."""
    path, rest, index = None, [], 0
    while index < len(pytest_args):
        arg = pytest_args[index]
        name, sep, value = arg.partition("=")
        if name in JUNIT_OPTIONS:
            if sep:
                path = value
            elif index + 1 < len(pytest_args):
                path = pytest_args[index + 1]
                index += 1
            else:
                rest.append(arg)  # pytest itself says the value is missing
        else:
            rest.append(arg)
        index += 1
    return path, rest


def merge_junit(parts: list[tuple[str, Path]]) -> str:
    """The JUnit XML text of every pass: (pass label, its junit file); a missing file is left out."""
    root = ET.Element("testsuites", {"name": "kvconform report"})
    totals = dict.fromkeys(_COUNTS, 0)
    time = 0.0
    for label, path in parts:
        if not Path(path).exists():
            continue
        tree = ET.parse(path).getroot()
        suites = [tree] if tree.tag == "testsuite" else list(tree.iter("testsuite"))
        for suite in suites:
            suite.set("name", f"kvconform {portable_text(label)}")
            for key in _COUNTS:
                totals[key] += int(suite.get(key, "0"))
            time += float(suite.get("time", "0") or 0)
            root.append(suite)
    for element in root.iter():  # a skip's text is `/abs/path/test_x.py:12: reason` in pytest's JUnit
        if element.text:
            element.text = portable_text(element.text)
        if element.get("message"):
            element.set("message", portable_text(element.get("message")))
    for key, value in totals.items():
        root.set(key, str(value))
    root.set("time", f"{time:.3f}")
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
