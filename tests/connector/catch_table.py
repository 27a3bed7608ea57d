"""Rerunnable figures for docs/vendor.md: how many of the buggy connectors (tests/connector/buggy.py) each
check catches, with and without their kvconform_* backdoors.

    PYTHONPATH=$PWD python -m tests.connector.catch_table [-n 2]

Runs the whole connector suite over every buggy connector without backdoors (--kv-connector-backdoors
off), then again with them on for the checks that can consult one (a record with a `backdoor`, plus the checks whose
expected hit uses `kvconform_chunk_size`); a check that never consults a backdoor gives the same verdict
either way, so its "with" figure is its "without" figure. Prints a Markdown table: check, tier, connectors
caught with backdoors, without. A connector counts as caught by a check when any preset of it fails.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from harness.connector_checks import CHECKS
from tests.connector.test_buggy_connectors import BUGGY, CAUGHT, EXTRA_CONFIG, REPO


# Checks whose expected hit takes the chunk size from `kvconform_chunk_size` when it is there.
CHUNK_SIZE_USERS = {"C03", "C05", "C18"}


def caught_by_check(backdoors: str, workers: str, selection: str | None) -> tuple[dict[str, set[str]], float]:
    """check id -> buggy connectors it caught, and the run's wall time."""
    with tempfile.TemporaryDirectory() as scratch:
        results = Path(scratch) / "results.json"
        cmd = [sys.executable, "-m", "pytest", "--pyargs", "suites.connector", "-p", "no:cacheprovider", "-q",
               "--tb=no", "-n", workers, "--kv-connector-timeout", "60", "--kv-connector-extra-config", EXTRA_CONFIG,
               "--kv-connector-backdoors", backdoors, "--kvconform-results", str(results)]
        if selection:
            cmd += ["-k", selection]
        for cls, _, _ in CAUGHT:
            cmd += ["--kv-connector", f"{BUGGY}:{cls}"]
        subprocess.run(cmd, cwd=REPO, check=False)
        document = json.loads(results.read_text())
    caught: dict[str, set[str]] = {}
    for entry in document["results"]:
        cell = entry.get("cell") or {}
        if entry["status"] == "failed" and "check" in cell:
            caught.setdefault(cell["check"].split()[0], set()).add(cell["connector"])
    return caught, document.get("run_info", {}).get("wall_seconds", 0.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", default="0", help="pytest-xdist workers (default 0)")
    parser.add_argument("-k", default=None, help="only these checks (pytest -k), for a quick look")
    args = parser.parse_args()
    without, _ = caught_by_check("off", args.n, args.k)
    consulting = sorted({c.id for c in CHECKS.values() if c.backdoor} | CHUNK_SIZE_USERS)
    selection = " or ".join(f"test_{c.lower()}_" for c in consulting)
    with_backdoors, _ = caught_by_check("on", args.n, f"({args.k}) and ({selection})" if args.k else selection)
    for check_id in CHECKS:
        if check_id not in consulting:
            with_backdoors[check_id] = set(without.get(check_id, ()))
    total = len(CAUGHT)
    print(f"| check | tier | buggy connectors caught (of {total}) with backdoors | without |")
    print("|---|---|---|---|")
    for check_id, check in CHECKS.items():
        a, b = len(with_backdoors.get(check_id, ())), len(without.get(check_id, ()))
        print(f"| {check_id} {check.name} | {check.tier} | {a} | {b} |")
    named = {cls: check for cls, check, _ in CAUGHT}
    for label, caught in (("with", with_backdoors), ("without", without)):
        hits = sum(1 for cls, check in named.items() if cls in caught.get(check, ()))
        print(f"\nnamed check catches its connector {label} backdoors: {hits} of {total}")


if __name__ == "__main__":
    main()
