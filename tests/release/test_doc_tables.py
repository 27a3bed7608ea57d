"""The docs' tables written from data (harness.release.doc_tables): each page shows what its data renders, the
writer replaces only the part between a table's markers, and a page without them is an error naming it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from harness.errors import UsageError
from harness.release import doc_tables
from reference_impl import releases, vocabulary
from reference_impl.config import eras

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("table", doc_tables.TABLES, ids=lambda table: table.name)
def test_each_page_shows_its_data(table):
    text = (REPO / table.page).read_text(encoding="utf-8")
    assert doc_tables.shown(table, text) == table.render(), f"{table.page}: run python -m harness.release.doc_tables"


def test_the_era_table_places_each_era_from_its_first_registry_row():
    rows = eras.markdown_table().splitlines()[2:]
    assert [row.split(" | ")[0] for row in rows] == [f"| `{era.id}`" for era in eras.ERAS]
    # reviewed: the eras' ranges as config-rules.md section 6 dates them (pre-seed from 0.11.1, seed at 0.13.0)
    assert "| `pre-seed` | 0.11.1 – 0.13.0 (excl.) | SupportsHMA, the factory check E-F" in rows[2]
    assert rows[3].startswith("| `seed` | 0.13.0 – 0.14.0 (excl.) | PR #29805: tri-state flag")
    major, minor, _ = releases.RELEASES[-1].key
    assert rows[-1].startswith(f"| `{eras.ERAS[-1].id}` | {eras.ERAS[-1].representative} – {major}.{minor}.x | ")


def test_the_readme_states_the_known_range_inside_its_sentence():
    """The README's range is a phrase of one line (an inline table): from the registry's oldest row to its newest
    row's minor, as the resolver refuses what lies outside."""
    oldest, newest = releases.RELEASES[0].key, releases.RELEASES[-1].key
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert (f"kvconform knows every era from <!-- known range: begin -->{'.'.join(map(str, oldest))} to "
            f"{newest[0]}.{newest[1]}.x<!-- known range: end --> and checks") in readme


def test_write_replaces_an_inline_phrase_only(tmp_path):
    _copy_pages(tmp_path)
    page = tmp_path / "README.md"
    text = page.read_text(encoding="utf-8")
    page.write_text(text.replace("-->0.10.0 to ", "-->0.10.0 to 0.1.x and "), encoding="utf-8")
    assert doc_tables.stale(tmp_path) == ["README.md (known range)"]
    assert doc_tables.write(tmp_path) == ["README.md"]
    assert page.read_text(encoding="utf-8") == text


def test_docs_rules_has_one_row_per_message_record():
    """docs/rules.md: each declared message id once, anchored by its id in lower case; the HMA block's dated
    messages in the first table (with their releases), the errors vLLM raises unchanged in the second."""
    page = (REPO / "docs" / "rules.md").read_text(encoding="utf-8")
    dated, unchanged = (doc_tables.shown(table, page) for table in doc_tables.TABLES
                        if table.name in ("message table", "unchanged error table"))
    ids = [[line.split("</a>", 1)[1].split(" |", 1)[0] for line in table.splitlines()[2:]]
           for table in (dated, unchanged)]
    assert sorted(ids[0] + ids[1]) == sorted(vocabulary.MESSAGES)
    assert {"W-A1", "W-B1", "E-F"} <= set(ids[0]) and {"E-KV-ROLE", "E-NO-LMCACHE"} <= set(ids[1])
    assert '| <a id="e-kv-role"></a>E-KV-ROLE | `ValueError` "Please specify kv_role when kv_connector is set" |' \
        in unchanged
    assert all(line.count(" | ") == 4 for line in dated.splitlines()[2:])
    assert all(line.count(" | ") == 3 for line in unchanged.splitlines()[2:])


def test_docs_rules_has_a_section_per_era_that_says_its_changes():
    """docs/rules.md: each era with a `rules_section` is a heading of its representative and id, an anchor
    `s-` + id without dots (what docs/reader.md and docs/vllm-0.34.md link) and one row per change; an era
    drafted from it starts without one (its prose is its own)."""
    page = (REPO / "docs" / "rules.md").read_text(encoding="utf-8")
    table = next(table for table in doc_tables.TABLES if table.name == "era sections")
    shown = doc_tables.shown(table, page)
    described = [era for era in eras.ERAS if era.rules_section is not None]
    assert "v0.34" in [era.id for era in described]
    assert shown.count("\n## vLLM ") + shown.startswith("## vLLM ") == len(described)
    for era in described:
        assert f"## vLLM {era.representative} (era {era.id})\n\n<a id=\"s-{era.id.replace('.', '')}\"></a>" in shown
        for change in era.rules_section.changes:
            assert f"| {change.change} | {change.effect} | {change.source} |\n" in shown
    assert '<a id="s-v034"></a>' in page and "(rules.md#s-v034)" in (REPO / "docs" / "vllm-0.34.md").read_text(
        encoding="utf-8")


def _copy_pages(root: Path) -> None:
    for table in doc_tables.TABLES:
        (root / table.page).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / table.page, root / table.page)


def test_write_replaces_only_a_stale_table(tmp_path):
    _copy_pages(tmp_path)
    page = tmp_path / "docs" / "reader.md"
    text = page.read_text(encoding="utf-8")
    page.write_text(text.replace("| `seed` | 0.13.0", "| `seed` | 0.12.9"), encoding="utf-8")
    assert doc_tables.stale(tmp_path) == ["docs/reader.md (era table)"]
    assert doc_tables.write(tmp_path) == ["docs/reader.md"]
    assert page.read_text(encoding="utf-8") == text and doc_tables.stale(tmp_path) == []
    assert doc_tables.write(tmp_path) == []


def test_a_page_without_its_markers_is_named(tmp_path):
    _copy_pages(tmp_path)
    page = tmp_path / "docs" / "releases.md"
    page.write_text(page.read_text(encoding="utf-8").replace("<!-- registry table: end -->", ""), encoding="utf-8")
    with pytest.raises(UsageError, match=r"^docs/releases.md: no '<!-- registry table: begin -->' \.\.\. "
                                         r"'<!-- registry table: end -->' around the registry table$"):
        doc_tables.write(tmp_path)


def test_check_names_a_stale_page_and_writes_nothing(tmp_path, monkeypatch, capsys):
    _copy_pages(tmp_path)
    page = tmp_path / "docs" / "releases.md"
    page.write_text(page.read_text(encoding="utf-8").replace("| 0.34.0 | v0.34 |", "| 0.34.0 | v0.33 |"),
                    encoding="utf-8")
    monkeypatch.setattr(doc_tables, "CHECKOUT", tmp_path)
    before = page.read_text(encoding="utf-8")
    assert doc_tables.main(["--check"]) == 1
    assert capsys.readouterr().out == ("doc_tables: docs/releases.md (registry table) differs from its data; "
                                       "run python -m harness.release.doc_tables\n")
    assert page.read_text(encoding="utf-8") == before
    assert doc_tables.main([]) == 0 and doc_tables.main(["--check"]) == 0
