"""The connector suite run in pytest processes of its own, as a vendor runs it: the command, several runs started
together, and their results files read back (tests/connector/test_buggy_connectors.py,
tests/connector/test_template_connector.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from harness.outcomes import decided_nothing

REPO = Path(__file__).resolve().parents[2]


def suite_command(results: Path, connectors: list[str], *, extra_config: str, backdoors: str = "on",
                  selection: list[str] | None = None, timeout: float = 60) -> list[str]:
    """`pytest` over the connector suite for `connectors` (one process, no xdist), writing `results`; only the
    checks `-k` selects when `selection` (alternatives, or-ed) is given."""
    cmd = [sys.executable, "-m", "pytest", "--pyargs", "suites.connector", "-p", "no:cacheprovider", "-q",
           "-p", "no:randomly", "-p", "no:xdist", "--tb=line", "--kv-connector-timeout", str(timeout),
           "--kv-connector-extra-config", extra_config, "--kv-connector-backdoors", backdoors,
           "--kvconform-results", str(results)]
    if selection:
        cmd += ["-k", " or ".join(selection)]
    for spec in connectors:
        cmd += ["--kv-connector", spec]
    return cmd


def run_together(commands: dict[str, list[str]], timeout: float = 1200) -> dict[str, tuple[int, str]]:
    """Start every command at once (they share the cores; one waiting out a hang holds no core), then wait for each.

    Returns name -> (exit status, stdout and stderr). After a failure (a timeout), the commands not waited for yet
    are killed."""
    running = {name: subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
               for name, command in commands.items()}
    done = {}
    try:
        for name, proc in running.items():
            stdout, _ = proc.communicate(timeout=timeout)
            done[name] = (proc.returncode, stdout)
    finally:
        for proc in running.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return done


def results_by_test(path: Path) -> dict[str, dict]:
    """A results file's entries by test name (`test_c14_round_trip_bytes[Connector-preset]`); {} when absent."""
    if not path.exists():
        return {}
    return {e["id"].split("::")[-1]: e for e in json.loads(path.read_text())["results"]}


def vacuous_cells(results: dict[str, dict]) -> dict[str, str]:
    """The MUST cells of `results` (`results_by_test`) that decided nothing: test name -> the skip reason, which the
    connector's profile does not imply (`harness.outcomes.decided_nothing`)."""
    return {name: e.get("message") or "" for name, e in results.items()
            if decided_nothing(str((e.get("cell") or {}).get("tier", "")), e["status"], e.get("not_applicable"))}
