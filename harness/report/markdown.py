"""Render the report document as GitHub Markdown (tabulate "github" tables, numbered notes under each section).

Each run of sections with the same key is wrapped in ``<!-- kvconform:section KEY -->`` markers so a test can
compare one part (the config matrix) of two reports; the run line has its own marker.
"""

from __future__ import annotations

import contextlib
import re
from itertools import groupby

import tabulate as _tabulate

from harness.report.footnotes import Footnotes
from harness.report.model import BulletList, Cell, Document, Heading, Paragraph, Table, display_text
from harness.report.spec_refs import link_references

SECTION_START = "<!-- kvconform:section {key} -->"
SECTION_END = "<!-- /kvconform:section {key} -->"
RUN_INFO_MARK = "<!-- kvconform:run-info -->"
MACHINE_DEPENDENT_NOTE = ("The measured figures ({rows} rows) depend on the machine, so they are not in this file: "
                          "see `compatibility.html` or `results.json` next to it (neither is committed).")


@contextlib.contextmanager
def _narrow_width_mode():
    """Pad by code points, whether or not wcwidth is installed, so the output is the same everywhere."""
    saved = _tabulate.WIDE_CHARS_MODE
    _tabulate.WIDE_CHARS_MODE = False
    try:
        yield
    finally:
        _tabulate.WIDE_CHARS_MODE = saved


def _inline(text: str) -> str:
    """Text safe inside a table cell or a list item: one line, no bare pipes."""
    return " ".join(text.split()).replace("|", "\\|")


def _cell(value: Cell | str, footnotes: Footnotes) -> str:
    if isinstance(value, str):
        return _inline(value)
    numbers = ",".join(str(footnotes.number(note)) for note in value.notes)
    return _inline(display_text(value)) + (f" [{numbers}]" if numbers else "")


def _linked(text: str) -> str:
    """Spec references (§2.2, E-F, ...) as links to docs/rules.md."""
    return link_references(text, lambda label, href: f"[{label}]({href})", lambda plain: plain)


# Past this width nobody reads the raw table anyway; its padding only makes the file large.
_ALIGN_UP_TO = 200
_PADDING = re.compile(r" {2,}(?=\|)")
_RULE = re.compile(r"-{4,}")


def _table(table: Table, footnotes: Footnotes) -> str:
    rows = [[_cell(value, footnotes) for value in row] for row in table.rows]
    headers = [_inline(h) for h in table.headers]
    text = _tabulate.tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True)
    if len(text.partition("\n")[0]) > _ALIGN_UP_TO:
        text = _RULE.sub("---", _PADDING.sub(" ", text))
    return text


def render_markdown(document: Document) -> str:
    """The whole report as Markdown text (ends with a newline)."""
    out = [f"# {document.title}", "", RUN_INFO_MARK, document.run_line, ""]
    with _narrow_width_mode():
        for key, sections in groupby(document.sections, key=lambda s: s.key):
            out += [SECTION_START.format(key=key), ""]
            for section in sections:
                # notes are numbered per section and listed right under it, next to the tables using them
                footnotes = Footnotes()
                for block in section.blocks:
                    if isinstance(block, Heading):
                        out.append(f"{'#' * block.level} {block.text}")
                    elif isinstance(block, Paragraph):
                        out.append(_linked(block.text))
                    elif isinstance(block, BulletList):
                        out.append("\n".join(f"- {_linked(_inline(item))}" for item in block.items))
                    elif isinstance(block, Table) and block.machine_dependent:
                        out.append(MACHINE_DEPENDENT_NOTE.format(rows=len(block.rows)))
                    elif isinstance(block, Table):
                        out.append(_table(block, footnotes))
                    out.append("")
                definitions = footnotes.take_new()
                if definitions:
                    out.append("Notes:\n\n" + "\n".join(f"- [{number}] {_linked(_inline(text))}"
                                                         for number, text in definitions))
                    out.append("")
            out += [SECTION_END.format(key=key), ""]
    return "\n".join(out).rstrip("\n") + "\n"


def extract_section(markdown: str, key: str) -> str:
    """The text of every section group named `key` (markers included), for comparing two reports."""
    start, end = SECTION_START.format(key=key), SECTION_END.format(key=key)
    parts, position = [], 0
    while (begin := markdown.find(start, position)) != -1:
        finish = markdown.find(end, begin)
        if finish == -1:
            break
        parts.append(markdown[begin: finish + len(end)])
        position = finish + len(end)
    return "\n".join(parts)
