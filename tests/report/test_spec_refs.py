"""Spec references: every link the report makes resolves."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.report.spec_refs import anchor, link_references
from reference_impl.vocabulary import MESSAGES

REPO = Path(__file__).resolve().parents[2]
DOCS = (REPO / "docs" / "rules.md").read_text(encoding="utf-8")
ANCHORS = set(re.findall(r'<a id="([^"]+)"></a>', DOCS))


def test_every_reference_the_oracle_cites_has_a_place_in_the_docs():
    cited = set()
    for path in [*(REPO / "suites" / "config" / "tables").glob("*.toml"), *(REPO / "suites" / "config").glob("*.py")]:
        cited |= set(re.findall(r"§\d+(?:\.\d+)?", path.read_text(encoding="utf-8")))
    cited |= {*MESSAGES, "connector spec section 4.2"}
    assert "§2.2" in cited and "§8.3" in cited
    missing = sorted(ref for ref in cited if anchor(ref) not in ANCHORS)
    assert not missing, f"docs/rules.md has no anchor for {missing}"


def test_links_in_markdown_and_unknown_ids_stay_text():
    text = "§2.2: explicit enable raises E-B (see connector spec section 4.2); E-ZZZ is no id"
    linked = link_references(text, lambda label, href: f"[{label}]({href})", lambda plain: plain)
    assert linked == ("[§2.2](../docs/rules.md#s2-2): explicit enable raises [E-B](../docs/rules.md#e-b) (see "
                      "[connector spec section 4.2](../docs/rules.md#connector-checks)); E-ZZZ is no id")
