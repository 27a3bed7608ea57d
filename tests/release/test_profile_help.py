"""The `--vllm-version` help of the pytest plugin, `kvconform report` and `kvconform explain` names the profiles the
release registry marks, so a release that becomes a profile is one key of its row (no help text to edit)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from harness.cli import build_parser
from harness.plugins import session_info
from reference_impl import releases

REPO = Path(__file__).resolve().parents[2]


def _registry_profiles() -> list[str]:
    # the rows marked `profile = true`, read from the data file itself (oldest first)
    text = (REPO / "reference_impl" / "releases.toml").read_text(encoding="utf-8")
    rows = re.findall(r'^\["(\d+\.\d+\.\d+)"\]\n((?:[^\[\n].*\n)*)', text, re.M)
    marked = [(releases.parse_version(version), re.search(r'^era = "([^"]+)"', body, re.M)[1])
              for version, body in rows if re.search(r"^profile = true$", body, re.M)]
    return [era for _, era in sorted(marked)]


class _OptionGroup:
    """Stands in for pytest's parser and option group: keeps each option's keywords by its first name."""

    def __init__(self):
        self.options: dict[str, dict] = {}

    def getgroup(self, *args):
        return self

    def addoption(self, *names, **keywords):
        self.options[names[0]] = keywords


def _helps() -> dict[str, str]:
    plugin = _OptionGroup()
    session_info.pytest_addoption(plugin)
    commands = build_parser()._subparsers._group_actions[0].choices
    helps = {"pytest --vllm-version": plugin.options["--vllm-version"]["help"]}
    for name in ("report", "explain"):
        [action] = [action for action in commands[name]._actions if "--vllm-version" in action.option_strings]
        helps[f"kvconform {name} --vllm-version"] = action.help
    return helps


def test_the_help_texts_name_the_registry_profiles():
    profiles = _registry_profiles()
    assert profiles[:2] == ["pre-seed", "seed"], profiles  # reviewed: the two oldest profiles (0.12.0, 0.13.0)
    for option, text in _helps().items():
        named = re.search(r"profile[:(]? \(?([\w.\-]+(?:, [\w.\-]+)*)", text)
        assert named and named[1].split(", ") == profiles, f"{option}: {text!r} does not list {profiles}"


@pytest.mark.skipif(shutil.which("git") is None or not (REPO / ".git").exists(),
                    reason="needs git and a checkout (the sources are searched with git grep)")
def test_no_source_writes_the_profile_list_down():
    written = ", ".join(_registry_profiles())
    found = subprocess.run(["git", "grep", "-n", "-F", written, "--", "harness", "reference_impl", "suites", "scripts"],
                           capture_output=True, text=True, cwd=REPO)
    assert found.returncode in (0, 1) and found.stdout == "", (
        "a list of the profiles written down (read reference_impl.releases.profiles() instead):\n" + found.stdout)
