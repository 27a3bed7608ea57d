"""The report as data: sections of headings, paragraphs, lists and tables of cells.

Builders (one module per suite) produce these blocks; the Markdown and HTML renderers turn them into text.
A cell's notes become auto-numbered, de-duplicated footnotes when rendered.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Cell:
    """One table cell: a short symbol or value, a style kind, and footnote texts explaining it."""

    text: str
    kind: str = ""
    notes: tuple[str, ...] = ()


@dataclass(slots=True)
class Table:
    """A table; `row_filters`/`column_filters` tag rows and columns for the HTML filters (e.g. connector).

    A `machine_dependent` table (timings) is shown in the HTML only: the committed Markdown must not change
    when the same results are produced on another machine.
    """

    headers: list[str]
    rows: list[list[Cell | str]]
    row_filters: list[dict[str, str]] | None = None
    column_filters: list[dict[str, str]] | None = None
    search: bool = False
    machine_dependent: bool = False
    row_anchors: list[str | None] | None = None  # link targets of the rows (HTML ids), e.g. one per connector


@dataclass(slots=True)
class Heading:
    """A heading (level 2 or 3 inside the report); `anchor` is its stable link target (`#era-v0.33`)."""

    level: int
    text: str
    anchor: str | None = None


@dataclass(slots=True)
class Paragraph:
    """A paragraph of plain text; `code` spans in backticks are kept."""

    text: str


@dataclass(slots=True)
class BulletList:
    """A bulleted list of plain-text items."""

    items: list[str]


Block = Heading | Paragraph | BulletList | Table


@dataclass(slots=True)
class Section:
    """A titled part of the report; `key` names it (the staleness test compares the `config` section)."""

    key: str
    blocks: list[Block] = field(default_factory=list)
    filters: dict[str, str] = field(default_factory=dict)
    # The Markdown file the section goes to (None: the main page); the HTML page holds every section.
    page: str | None = None


@dataclass(slots=True)
class Document:
    """The whole report: a title, a line about the run, and sections."""

    title: str
    run_line: str
    sections: list[Section]


# A cell whose text is only a symbol also gets a word, so it reads without an emoji font.
_SYMBOLS = frozenset("✅⚪❌❔➖❗")
KIND_WORDS = {"on": "on", "off": "off", "error": "error", "unknown": "unknown", "pass": "pass", "fail": "fail",
              "na": "n/a", "mismatch": "differs"}


def display_text(cell: Cell) -> str:
    """The cell's text, with its kind's word added when the text is nothing but symbols."""
    if cell.text and set(cell.text) <= _SYMBOLS and cell.kind in KIND_WORDS:
        return f"{cell.text} {KIND_WORDS[cell.kind]}"
    return cell.text
