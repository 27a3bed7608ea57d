"""Reading rendered Markdown back in tests: tables as rows of cell texts, footnotes as a dict."""

from __future__ import annotations

import re
from html.parser import HTMLParser


def table_after(markdown: str, heading: str) -> list[list[str]]:
    """The first table after `heading`, as rows of stripped cell texts (header first, rule row dropped)."""
    lines = markdown[markdown.index(heading):].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        if not all(set(c) <= {"-", ":"} for c in cells):
            rows.append(cells)
    return rows


def footnotes(markdown: str, heading: str | None = None) -> dict[str, str]:
    """Note number -> text of the first "Notes:" list after `heading` (notes are numbered per section)."""
    text = markdown[markdown.index(heading):] if heading else markdown
    block = text[text.index("Notes:\n\n") + len("Notes:\n\n"):]
    block = block.split("\n\n", 1)[0]
    return dict(re.findall(r"^- \[(\d+)\] (.*)$", block, flags=re.M))


# The HTML page's cell classes and the symbol each draws (harness/report/html.py draws them from its style
# sheet; the Markdown writes the symbol): a cell so classed reads as its symbol, a space and its text, unless
# it also says `ni` (no icon).
CLASS_SYMBOLS = {"on": "✅", "ok": "✅", "of": "⚪", "na": "➖", "er": "❌", "fl": "❌", "un": "❔", "mm": "❗"}


class _PageTables(HTMLParser):
    """Every <table> of a page as rows of cell texts written as the Markdown writes them (`code`, **bold**,
    [text](href), notes as " [1,2]"); end tags HTML lets a page leave out (</td>, </tr>) are implied. The
    text inside <script> elements is kept apart (`scripts`): no table may live there."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tables: list[list[list[str]]] = []
        self.scripts: list[str] = []
        self._cell: list[str] | None = None
        self._links: list[str] = []
        self._script: list[str] | None = None

    def _close_cell(self) -> None:
        if self._cell is not None:
            self.tables[-1][-1].append(" ".join("".join(self._cell).split()))
            self._cell = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "script":
            self._script = []
        elif tag == "table":
            self.tables.append([])
        elif tag == "tr" and self.tables:
            self._close_cell()
            self.tables[-1].append([])
        elif tag in ("td", "th") and self.tables:
            self._close_cell()
            classes = (attrs.get("class") or "").split()
            symbol = next((CLASS_SYMBOLS[c] for c in classes if c in CLASS_SYMBOLS), None)
            self._cell = [symbol + " "] if symbol and "ni" not in classes else []
        elif self._cell is not None:
            self._cell.append({"sup": " [", "code": "`", "strong": "**", "a": "["}.get(tag, ""))
            if tag == "a":
                self._links.append(attrs.get("href") or "")

    def handle_endtag(self, tag):
        if tag == "script" and self._script is not None:
            self.scripts.append("".join(self._script))
            self._script = None
        elif tag in ("td", "th", "tr", "thead", "tbody", "table"):
            self._close_cell()
        elif self._cell is not None:
            if tag == "a":
                self._cell.append(f"]({self._links.pop() if self._links else ''})")
            else:
                self._cell.append({"sup": "]", "code": "`", "strong": "**"}.get(tag, ""))

    def handle_data(self, data):
        if self._script is not None:
            self._script.append(data)
        elif self._cell is not None:
            self._cell.append(data)


def html_page_tables(page: str) -> _PageTables:
    """The page read by the standard library's HTML parser: `.tables` (rows of cell texts) and `.scripts`."""
    parser = _PageTables()
    parser.feed(page)
    parser.close()
    return parser


def markdown_tables(markdown: str) -> list[list[list[str]]]:
    """Every table of a Markdown text, as `table_after` reads one (pipes unescaped)."""
    tables, rows = [], []
    for line in markdown.splitlines() + [""]:
        if line.startswith("|"):
            cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            if not all(set(c) <= {"-", ":"} for c in cells):
                rows.append(cells)
        elif rows:
            tables.append(rows)
            rows = []
    return tables


def html_table_after(page: str, heading: str) -> list[list[str]]:
    """The first HTML table after the heading text `heading`, as rows of cell texts (see `_PageTables`)."""
    return html_page_tables(page[page.index(heading):]).tables[0]
