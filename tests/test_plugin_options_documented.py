"""Every option of the pytest plugin's `kvconform` group is in docs/reference.md's option table, under a
placeholder a reader can fill in (never argparse's made-up `KVCONFORM_...` from the option's dest).

`pytest --help` in a fresh process is the source: it is what a user reads, after every concern plugin added its
options."""

from __future__ import annotations

import functools
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


@functools.cache  # one `pytest --help` process for both tests (each used to start its own)
def kvconform_help_options() -> dict[str, str]:
    """Long option -> its metavar ('' for a flag), from the `kvconform conformance suites` part of --help."""
    done = subprocess.run([sys.executable, "-m", "pytest", "--help", "-p", "no:xdist"], cwd=REPO,
                          capture_output=True, text=True, timeout=120, check=True)
    section = done.stdout.split("kvconform conformance suites:", 1)[1]
    section = re.split(r"\n\S", section, maxsplit=1)[0]  # up to the next group's title
    return dict(re.findall(r"^  (--[a-z-]+)(?:=(\S+))?", section, re.M))


def documented_options() -> set[str]:
    """The options named in the first column of reference.md's table of the plugin's options."""
    text = (REPO / "docs" / "reference.md").read_text()
    table = text.split("| option | meaning |", 1)[1].split("\n\n", 1)[0]
    return set(re.findall(r"^\| `(--[a-z-]+)", table, re.M))


def test_every_plugin_option_is_in_the_reference_table():
    options = kvconform_help_options()
    assert {"--kv-connector", "--kv-connector-backdoors", "--kv-engine", "--kvconform-results"} <= set(options)
    missing = sorted(set(options) - documented_options())
    assert not missing, f"options of `pytest --help` missing from docs/reference.md's table: {missing}"


def test_no_option_shows_argparse_dest_as_its_placeholder():
    made_up = {option: metavar for option, metavar in kvconform_help_options().items()
               if metavar.startswith("KVCONFORM_")}
    assert not made_up, f"give these options a metavar: {made_up}"
