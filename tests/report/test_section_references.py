"""Every "§" reference a user can meet resolves to a row of docs/rules.md: in failure messages and notes
(the code that writes them), the oracle's TOML tables, golden files, the shipped code, the README and the
docs. The anchor is the one the report links to (`harness.report.spec_refs.anchor`)."""

from __future__ import annotations

import re
from pathlib import Path

from harness.report.spec_refs import anchor

REPO = Path(__file__).resolve().parents[2]
ANCHORS = set(re.findall(r'<a id="([^"]+)"></a>', (REPO / "docs" / "rules.md").read_text(encoding="utf-8")))
_SECTION = re.compile(r"§\s?\d+(?:\.\d+)?")
# What a user reads: the installed packages (messages, tables, goldens, docstrings), the README and docs/.
USER_FACING = [*(p for pkg in ("harness", "suites", "reference_impl") for ext in ("py", "toml", "txt", "md")
                 for p in (REPO / pkg).rglob(f"*.{ext}")), REPO / "README.md", *(REPO / "docs").glob("*.md")]


def _references() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in USER_FACING:
        for ref in _SECTION.findall(path.read_text(encoding="utf-8")):
            found.setdefault(ref.replace(" ", ""), set()).add(str(path.relative_to(REPO)))
    return found


def test_every_section_reference_resolves_to_a_row_of_the_rules_page():
    found = _references()
    assert len(found) > 30 and "§8.13" in found and "§2.2" in found, "the scan should see the oracle's references"
    missing = {ref: sorted(where)[:3] for ref, where in found.items() if anchor(ref) not in ANCHORS}
    assert not missing, f"docs/rules.md has no row for {missing}"


def test_items_of_a_chapter_have_rows_of_their_own():
    """"§8.13" links to its own row, not to chapter 8's."""
    assert anchor("§8.13") == "s8-13" and anchor("§2.2") == "s2-2" and anchor("§6") == "s6"
