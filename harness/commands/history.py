"""`kvconform history`: what changed in HMA flag resolution between two vLLM releases, cell by cell.

The cells are the config matrix's, which belong to the suites; so the command runs the suite's program
(`python -m suites.config.history`, the way `kvconform report` runs the suites) with the same arguments and
passes its output and exit status through.
"""

from __future__ import annotations

import os
import subprocess
import sys

HELP = "what changed between two vLLM releases, cell by cell: rule change, defect introduced or fixed"
PROGRAM = "suites.config.history"


def register(subparsers) -> None:
    """Add the `history` subcommand (its options are the program's: --from, --to, --range, --summary, --help)."""
    parser = subparsers.add_parser("history", help=HELP, add_help=False,
                                   usage="kvconform history (--from X.Y.Z --to X.Y.Z | --range A..B) [--summary]")
    parser.set_defaults(run=run, accepts_extra=True)


def run(args) -> int:
    """Run the suite's history program with the command line's arguments."""
    env = {**os.environ, "KVCONFORM_PROG": "kvconform history"}
    return subprocess.run([sys.executable, "-m", PROGRAM, *args.extra], env=env, check=False).returncode
