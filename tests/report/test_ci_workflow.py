"""The GitHub Actions gate example (.github/workflows/kvconform-gate.yml) calls kvconform as it exists: every
`kvconform` command line in it parses with the real command line, and it reads the exit statuses `diff`
documents."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from harness.cli import build_parser
from harness.commands.diff import EXIT_NO_REGRESSION, EXIT_SCOPES_DIFFER
from harness.junit import split_junit_option
from harness.report_options import pytest_passthrough

WORKFLOW = Path(__file__).resolve().parents[2] / ".github" / "workflows" / "kvconform-gate.yml"


def kvconform_lines() -> list[list[str]]:
    commands = []
    for line in WORKFLOW.read_text(encoding="utf-8").splitlines():
        if ".venv/bin/kvconform " in line:
            words = shlex.split(line.split(".venv/bin/kvconform ", 1)[1])
            commands.append(words[: words.index(">")] if ">" in words else words)
    return commands


def test_every_kvconform_command_of_the_workflow_parses():
    commands = kvconform_lines()
    assert {c[0] for c in commands} == {"report", "diff"}
    parser = build_parser()
    for argv in commands:
        args, extra = parser.parse_known_args(argv)
        if args.command == "report":
            junit, rest = split_junit_option(pytest_passthrough(extra, args.own_options))
            assert junit == "reports/ci/junit.xml" and rest == []
        else:
            assert extra == [], argv
            assert args.format in ("github", "md", "json")


def test_the_gate_step_reads_diffs_exit_statuses():
    text = WORKFLOW.read_text(encoding="utf-8")
    gate = text[text.index("- name: Gate"):]
    assert re.search(rf"^\s+{EXIT_NO_REGRESSION}\) echo \"nothing regressed\"", gate, re.M)
    assert re.search(rf"^\s+{EXIT_SCOPES_DIFFER}\) echo \"::warning", gate, re.M)


def test_a_pull_request_without_a_baseline_is_told_so():
    # The compare and gate steps run only when a baseline was restored; without one the job must not pass silently.
    text = WORKFLOW.read_text(encoding="utf-8")
    step = text[text.index("- name: No baseline yet"):text.index("- name: Compare with the baseline")]
    assert "if: github.event_name == 'pull_request' && hashFiles('baseline/results.json.gz') == ''" in step
    assert 'run: echo "::warning title=kvconform::no baseline of main yet' in step
