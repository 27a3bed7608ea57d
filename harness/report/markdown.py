"""Render the report document as GitHub Markdown (tabulate "github" tables, numbered notes under each section).

`render_markdown_pages` splits it into a short main page and one page per era (and one for the changes
between releases), so the main file answers the common questions and stays small.

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
                          "see `compatibility.html` or `results.json.gz` next to it (neither is committed).")


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


_LOCAL_LINK = re.compile(r"\]\(#([^)\s]+)\)")


def _anchors(document: Document) -> dict[str, str | None]:
    """Anchor -> the page (None: the main page) whose heading defines it."""
    return {block.anchor: section.page for section in document.sections for block in section.blocks
            if isinstance(block, Heading) and block.anchor}


def _render_sections(sections, page: str | None, anchors: dict[str, str | None], main_name: str) -> list[str]:
    out: list[str] = []

    def relink(text: str) -> str:
        # a link to an anchor on another page names that page
        def target(match: re.Match) -> str:
            anchor = match.group(1)
            if anchor not in anchors or anchors[anchor] == page:
                return match.group(0)
            return f"]({anchors[anchor] or main_name}#{anchor})"
        return _LOCAL_LINK.sub(target, text) if "](#" in text else text

    for key, grouped in groupby(sections, key=lambda s: s.key):
        out += [SECTION_START.format(key=key), ""]
        for section in grouped:
            # notes are numbered per section and listed right under it, next to the tables using them
            footnotes = Footnotes()
            for block in section.blocks:
                if isinstance(block, Heading):
                    if block.anchor:
                        out.append(f'<a id="{block.anchor}"></a>')
                        out.append("")
                    out.append(f"{'#' * block.level} {block.text}")
                elif isinstance(block, Paragraph):
                    out.append(relink(_linked(block.text)))
                elif isinstance(block, BulletList):
                    out.append("\n".join(f"- {relink(_linked(_inline(item)))}" for item in block.items))
                elif isinstance(block, Table) and block.machine_dependent:
                    out.append(MACHINE_DEPENDENT_NOTE.format(rows=len(block.rows)))
                elif isinstance(block, Table):
                    out.append(relink(_table(block, footnotes)))
                out.append("")
            definitions = footnotes.take_new()
            if definitions:
                out.append("Notes:\n\n" + "\n".join(f"- [{number}] {_linked(_inline(text))}"
                                                     for number, text in definitions))
                out.append("")
        out += [SECTION_END.format(key=key), ""]
    return out


def render_markdown_pages(document: Document, main_name: str = "compatibility.md") -> dict[str, str]:
    """The report as Markdown pages: `main_name` with every section that has no page of its own, and one
    page per `Section.page` (an era's tables, the changes between releases), so no file is a wall of tables.
    Links to an anchor on another page are rewritten to name that page."""
    anchors = _anchors(document)
    pages: dict[str | None, list] = {None: []}
    for section in document.sections:
        pages.setdefault(section.page, []).append(section)
    rendered = {}
    with _narrow_width_mode():
        for page, sections in pages.items():
            title = document.title if page is None else f"{document.title}: {_page_title(sections)}"
            out = [f"# {title}", "", RUN_INFO_MARK, document.run_line, ""]
            if page is not None:
                out += [f"Part of the report; the summary and the support table are in [{main_name}]({main_name}).", ""]
            out += _render_sections(sections, page, anchors, main_name)
            rendered[page or main_name] = "\n".join(out).rstrip("\n") + "\n"
    return rendered


def _page_title(sections) -> str:
    for section in sections:
        for block in section.blocks:
            if isinstance(block, Heading):
                return block.text
    return "detail"


def render_markdown(document: Document) -> str:
    """The whole report as one Markdown text, every page's sections in order (ends with a newline)."""
    out = [f"# {document.title}", "", RUN_INFO_MARK, document.run_line, ""]
    with _narrow_width_mode():
        out += _render_sections(document.sections, None, {}, "")
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
