"""`kvconform checks`: every check the connector suite runs is listed with its tier, and every link resolves."""

from __future__ import annotations

import json
from pathlib import Path

from harness.cli import main
from harness.commands.checks import checks_markdown
from harness.connector_checks import CHECKS

REPO = Path(__file__).resolve().parents[2]


def test_every_check_of_the_suite_is_listed_with_tier_and_link(capsys):
    assert main(["checks", "--format", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    ids = {c["id"] for c in listed}
    assert ids == set(CHECKS), "every check record is listed (test_check_records: each has a test)"
    assert {c["tier"] for c in listed} == {"MUST", "SHOULD"}
    doc = (REPO / "docs" / "connector-checks.md").read_text(encoding="utf-8")
    for check in listed:
        page, anchor = check["link"].split("#")
        assert page == "docs/connector-checks.md" and f'<a id="{anchor}"></a>{check["id"]} ' in doc


def test_checks_text_and_tier_filter(capsys):
    assert main(["checks", "--tier", "SHOULD"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == [c.id for c in CHECKS.values() if c.tier == "SHOULD"]
    assert {"C08", "C32", "C35"} <= {line.split()[0] for line in lines}
    assert all("SHOULD" in line and "docs/connector-checks.md#c" in line for line in lines)
    assert main(["checks", "--tier", "MAY"]) == 2


def test_checks_text_links_open_from_any_folder(tmp_path, monkeypatch, capsys):
    """A vendor runs `kvconform checks` from their own folder: each printed link opens from there."""
    monkeypatch.chdir(tmp_path)
    assert main(["checks", "--tier", "MUST"]) == 0
    for line in capsys.readouterr().out.splitlines():
        path, anchor = line.rsplit("(", 1)[1].rstrip(")").split("#")
        page = tmp_path / path
        assert page.is_file(), f"{path} (printed in {tmp_path}) does not open from there: {line}"
        assert f'<a id="{anchor}"></a>' in page.read_text(encoding="utf-8"), f"no anchor {anchor} in {page}"


def test_the_checks_page_is_current():
    assert (REPO / "docs" / "connector-checks.md").read_text(encoding="utf-8") == checks_markdown(), (
        "regenerate it: kvconform checks --format md > docs/connector-checks.md")
