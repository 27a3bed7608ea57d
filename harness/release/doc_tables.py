"""The docs' tables written from data: each is the part of a page between `<!-- NAME: begin -->` and
`<!-- NAME: end -->`, rendered by the function that owns the data it shows (a table on lines of its own, or a
phrase inside a sentence: the README's range of releases).

    python -m harness.release.doc_tables [--check]

rewrites every table of `TABLES` in place (`--check`: writes nothing, exit 1 naming each stale page);
tests/release/test_doc_tables.py fails while a page and its data differ. A new vLLM release changes the tables
below (the registry's row; a new era's summary and section of changes; the known range's newest minor; a new
message's row), a new case key the case schema (its record in `reference_impl.vocabulary.CASE_KEYS`), a new
connector check the README's count of them (`harness.connector_checks`), so none is edited by hand: scripts/new-vllm-release.sh runs this after its draft era. Exit status 0 current or written, 1 stale
(--check), 2 a page without its markers.
"""

from __future__ import annotations

import sys
from functools import partial
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from harness.atomic_write import write_text_atomic
from harness.connector_checks import CHECKS
from harness.errors import UsageError
from reference_impl import releases, vocabulary
from reference_impl.config import eras

CHECKOUT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class DocTable:
    """One generated table: the page (relative to the checkout), its marker name and what renders it; `inline`:
    a phrase inside a line (the begin marker is not followed by a line break)."""

    page: str
    name: str
    render: Callable[[], str]
    inline: bool = False

    @property
    def begin(self) -> str:
        return f"<!-- {self.name}: begin -->" + ("" if self.inline else "\n")

    @property
    def end(self) -> str:
        return f"<!-- {self.name}: end -->"


TABLES: tuple[DocTable, ...] = (
    DocTable("docs/releases.md", "registry table", releases.markdown_table),
    DocTable("docs/reader.md", "era table", eras.markdown_table),
    DocTable("README.md", "known range", eras.known_range, inline=True),
    DocTable("docs/rules.md", "message table", partial(vocabulary.markdown_table, dated=True)),
    DocTable("docs/rules.md", "unchanged error table", partial(vocabulary.markdown_table, dated=False)),
    DocTable("docs/rules.md", "era sections", eras.rules_sections),
    DocTable("docs/reference.md", "case schema", vocabulary.schema_table),
    DocTable("README.md", "check count", lambda: str(len(CHECKS)), inline=True),
)


def shown(table: DocTable, text: str) -> str:
    """What `text` (the page) holds between the table's markers; UsageError naming the page and marker."""
    start, stop = text.find(table.begin), text.find(table.end)
    if start < 0 or stop < start:
        raise UsageError(f"{table.page}: no '{table.begin.strip()}' ... '{table.end}' around the {table.name}")
    return text[start + len(table.begin):stop]


def refreshed(table: DocTable, text: str) -> str:
    """The page `text` with the table's part rendered afresh (the rest of the page unchanged)."""
    shown(table, text)  # both markers are there
    start = text.index(table.begin) + len(table.begin)
    return text[:start] + table.render() + text[text.index(table.end, start):]


def stale(root: Path | None = None) -> list[str]:
    """The tables whose page under `root` (default: this checkout) differs from their data, as 'PAGE (NAME)'."""
    root = root or CHECKOUT
    return [f"{table.page} ({table.name})" for table in TABLES
            if shown(table, (root / table.page).read_text(encoding="utf-8")) != table.render()]


def write(root: Path | None = None) -> list[str]:
    """Render every table into its page under `root` (default: this checkout); the pages that changed, each once."""
    root = root or CHECKOUT
    changed = []
    for table in TABLES:
        path = root / table.page
        text = path.read_text(encoding="utf-8")
        new = refreshed(table, text)
        if new != text:
            write_text_atomic(path, new)
            changed.append(table.page)
    return list(dict.fromkeys(changed))  # a page of two tables once


def main(argv: list[str] | None = None) -> int:
    """Command line: write the tables (or, with --check, name the stale ones)."""
    from harness.cli import _Parser

    parser = _Parser(prog="python -m harness.release.doc_tables",
                     description="Write the docs' tables from their data (the release registry, the eras, "
                                 "the known range, the messages, the eras' changes).")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 naming each stale table")
    try:
        args = parser.parse_args(argv)
        if args.check:
            out_of_date = stale()
            for name in out_of_date:
                print(f"doc_tables: {name} differs from its data; run python -m harness.release.doc_tables")
            return 1 if out_of_date else 0
        changed = write()
        print(f"doc_tables: {'wrote ' + ', '.join(changed) if changed else 'every table is current'}")
    except UsageError as exc:
        print(f"doc_tables: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
