"""Reading rendered Markdown back in tests: tables as rows of cell texts, footnotes as a dict."""

from __future__ import annotations

import html
import re


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


def html_table_after(page: str, heading: str) -> list[list[str]]:
    """The first HTML table after the heading text `heading`, as rows of cell texts (tags removed)."""
    table = page[page.index(heading):]
    table = table[table.index("<table"):table.index("</table>")]
    rows = []
    for row in re.findall(r"<tr[^>]*>(.*?)</tr>", table, flags=re.S):
        cells = re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row, flags=re.S)
        rows.append([html.unescape(re.sub(r"<[^>]+>", "", cell)).strip() for cell in cells])
    return rows
