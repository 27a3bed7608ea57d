"""A hook that hangs twice is given up on: the later checks that call it are skipped at once, naming the hook
and the check it first hung in, instead of each waiting out the per-check time limit."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from suites.connector.runner import HangLog

REPO = Path(__file__).resolve().parents[2]
TIMEOUT_S = 2
CHECKS = ("test_c14", "test_c15", "test_c16", "test_c19", "test_c20")


def test_hang_log_gives_up_after_two_hangs():
    log = HangLog()
    log.record("Vendor", "wait_for_save", "C05")
    assert log.hung("Vendor") == {}, "one hang may be the machine"
    log.record("Vendor", "wait_for_save", "C07")
    log.record("Other", "start_load_kv", "C05")
    assert log.hung("Vendor") == {"wait_for_save": "C05"} and log.hung("Other") == {}


def test_a_hanging_hook_costs_two_timeouts_not_one_per_check(tmp_path):
    results = tmp_path / "results.json"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--pyargs", "suites.connector", "-p", "no:cacheprovider", "-p", "no:xdist",
         "-p", "no:randomly", "-q", "--kv-connector", "tests.connector.buggy:HangingConnector",
         "-k", f"fa_only and ({' or '.join(CHECKS)})", "--kv-connector-timeout", str(TIMEOUT_S),
         "--kvconform-results", str(results)],
        cwd=REPO, capture_output=True, text=True, timeout=600)
    entries = json.loads(results.read_text())["results"]
    assert len(entries) > 2, proc.stdout[-2000:]
    hung = [e for e in entries if e["status"] == "failed"]
    skipped = [e for e in entries if e["status"] == "skipped"]
    assert len(hung) == 2 and all("hung past" in e["message"] and "wait_for_save" in e["message"] for e in hung)
    first = sorted(hung, key=lambda e: e["id"])[0]["cell"]["check"].split()[0]
    assert len(skipped) == len(entries) - 2, [(e["id"], e["status"]) for e in entries]
    for entry in skipped:
        assert entry["message"].startswith(f"skipped: hook HangingConnector.wait_for_save hung in {first}"), entry
