"""Render the report document as one self-contained HTML file (inline CSS and JS, no network, no server).

Every table is plain HTML in the page: a reader with scripts off (text browsers, artifact viewers that
sandbox scripts, grep) sees every table, and the script only adds the filters, the search and the notes'
tooltips. The markup is kept small because a full report has some 40,000 cells: optional end tags
(``</td>``, ``</th>``, ``</tr>``) are left out, attribute values are unquoted where HTML allows it, a cell's
kind is a two-letter class (`KIND_CLASSES`), a cell's notes are its numbers (``<sup>2,3</sup>``, listed under
the section as in the Markdown), and the report's symbols are drawn by the style sheet: a cell whose text
starts with its kind's symbol (``✅ on``) gets the icon from its class, and any other symbol stays in the text
as ``<i class=y>✅</i>``, the icon drawn over it (`SYMBOL_CLASSES`), so a machine without an emoji font shows
them too and the page's text keeps them.

Filters for era, platform and connector hide the sections, table columns (their header cell is tagged) and
rows tagged with ``data-e`` (era), ``data-p`` (platform) and ``data-c`` (connector; `FILTER_ATTRS`); a tag may list
several values ("cuda rocm"), and the element shows when one of them is selected; a row's tag equal to its
section's is left to the section, and a tag a column names (a connector's label, the platform column) is set
by the script from that column (`_ColumnTags`). Hiding is done by one generated style
sheet (attribute selectors and column positions), not by touching every element, so changing or resetting a
filter stays fast on a page of thousands of rows. The search box keeps the rows whose text or notes contain
the query. The filters can be preset from the URL: ``compatibility.html?era=0.13.0&platform=cuda&q=lmcache``
(`URL_HELP`, shown on the page, documents the parameters; ``era`` takes a release or an era id). The
report's Markdown (code spans, bold, links between its pages) is rendered. Every heading has an anchor
(``#era-v0.33``, ``#support``) and the support table's rows one per connector (``#connector-LMCacheConnectorV1``).
``#kv-filter-status`` always says how many rows are shown (``data-visible-rows``).
"""

from __future__ import annotations

import html
import json
import re
from urllib.parse import quote

from harness.report.footnotes import Footnotes
from harness.report.labels import connector_label
from harness.report.model import BulletList, Cell, Document, Heading, Paragraph, Section, Table, display_text
from harness.report.spec_refs import link_references

FILTER_KEYS = ("era", "platform", "connector")
# The attribute each filter reads (short: a full report tags some 10,000 rows).
FILTER_ATTRS = {"era": "data-e", "platform": "data-p", "connector": "data-c"}

# The report's symbols, each with the class that draws it and its icon (a 16x16 SVG). A browser without an
# emoji font shows an empty box for ✅ ❌ ❔; the icon is drawn by the style sheet instead (the text keeps the
# symbol for readers without CSS, and every symbol-only cell also carries its word: `display_text`).
SYMBOL_CLASSES = {"✅": "y", "⚪": "o", "❌": "x", "❔": "q", "❗": "d", "➖": "n", "🐞": "b"}
_ICONS = {
    "✅": '<circle cx="8" cy="8" r="7" fill="#1a7f37"/><path d="M4.5 8.5l2.3 2.3 4.7-5" stroke="#fff" '
         'stroke-width="1.8" fill="none"/>',
    "⚪": '<circle cx="8" cy="8" r="6.2" fill="#fff" stroke="#6e7781" stroke-width="1.6"/>',
    "❌": '<circle cx="8" cy="8" r="7" fill="#cf222e"/><path d="M5.2 5.2l5.6 5.6M10.8 5.2l-5.6 5.6" '
         'stroke="#fff" stroke-width="1.8"/>',
    "❔": '<circle cx="8" cy="8" r="7" fill="#bf8700"/><path d="M5.8 6.2a2.2 2.2 0 1 1 3 2c-.6.3-.8.7-.8 1.4" '
         'stroke="#fff" stroke-width="1.6" fill="none"/><circle cx="8" cy="12" r="1" fill="#fff"/>',
    "❗": '<path d="M8 1l7 13H1z" fill="#cf222e"/><path d="M8 5.5v4.5M8 11.5v1.2" stroke="#fff" stroke-width="1.6"/>',
    "➖": '<path d="M3 8h10" stroke="#6e7781" stroke-width="2"/>',
    "🐞": '<path d="M3.2 6.5L1 5M12.8 6.5L15 5M3 9.5H.8M13 9.5h2.2M3.4 12.5L1.5 14M12.6 12.5l1.9 1.5" stroke="#24292f" '
         'stroke-width="1.2"/><circle cx="8" cy="4" r="2.4" fill="#24292f"/><ellipse cx="8" cy="9.6" rx="4.8" '
         'ry="5.6" fill="#cf222e"/><path d="M8 4.6V15" stroke="#24292f" stroke-width="1"/><circle cx="5.9" cy="8.2" '
         'r="1" fill="#24292f"/><circle cx="10.1" cy="11.2" r="1" fill="#24292f"/>',
}
# A cell's kind -> its class (background colour) and the symbol its text starts with when it has one.
KIND_CLASSES = {"on": "on", "pass": "ok", "off": "of", "na": "na", "error": "er", "fail": "fl", "unknown": "un",
                "mismatch": "mm"}
KIND_SYMBOLS = {"on": "✅", "pass": "✅", "off": "⚪", "na": "➖", "error": "❌", "fail": "❌", "unknown": "❔",
                "mismatch": "❗"}


def _icon_url(symbol: str) -> str:
    svg = f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16">{_ICONS[symbol]}</svg>'.replace('"', "'")
    return 'url("data:image/svg+xml,' + quote(svg, safe=" /:='.,-") + '")'


def _icon_css() -> str:
    """One rule per symbol: the inline `<i>` of that symbol and the cells of each kind that starts with it."""
    rules = []
    for symbol, name in SYMBOL_CLASSES.items():
        kinds = [KIND_CLASSES[k] for k, s in KIND_SYMBOLS.items() if s == symbol]
        selectors = [f"i.{name}"] + [f"td.{k}::before" for k in kinds]
        rules.append(f"{','.join(selectors)}{{background-image:{_icon_url(symbol)}}}")
    return "\n".join(rules)


_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:1.5em auto;padding:0 1em;max-width:1400px;
color:#1b1f24;line-height:1.4;box-sizing:border-box}
h1{font-size:1.5em}h2{margin-top:1.6em;border-bottom:1px solid #d0d7de}h3{margin-top:1.2em}
.run{color:#57606a}
#kv-filters{position:sticky;top:0;background:#f6f8fa;padding:.5em;border:1px solid #d0d7de;z-index:2}
#kv-filters label{margin-right:1em}
html:not(.kv-js) #kv-controls{display:none}html:not(.kv-js) #kv-filters{position:static}
table{border-collapse:collapse;margin:.5em 0;font-size:.85em;display:block;max-width:100%;overflow-x:auto}
th,td{border:1px solid #d0d7de;padding:.2em .45em;text-align:center;white-space:normal;min-width:4em;max-width:32em}
i.y,i.o,i.x,i.q,i.d,i.n,i.b,td[class]::before{display:inline-block;width:.9em;height:.9em;vertical-align:-.1em;
overflow:hidden;text-indent:2em;white-space:nowrap;background:no-repeat center/contain;font-style:normal}
td[class]::before{content:"";margin-right:.3em}td.ni::before{content:none}
h2 a.kv-anchor,h3 a.kv-anchor{visibility:hidden;margin-left:.3em;text-decoration:none;color:#57606a}
h2:hover a.kv-anchor,h3:hover a.kv-anchor{visibility:visible}
#kv-url-help{font-size:.85em;color:#57606a;margin:.3em 0 0}
td:first-child,td:nth-child(2){text-align:left}
thead th{background:#f6f8fa}
td.on,td.ok{background:#dafbe1}td.of,td.na{background:#eef0f2}
td.er,td.fl{background:#ffebe9}td.un{background:#fff8c5}
td.mm{background:#ffebe9;outline:2px solid #cf222e;outline-offset:-2px}
td sup{color:#0969da;cursor:pointer}
td.er,td.fl,td.mm{font-weight:600}
td.of,td.na{color:#57606a}
ol.footnotes{font-size:.85em;color:#3d444d}
.kv-hide,.kv-nomatch{display:none!important}
"""

_JS = """
(function () {
document.documentElement.classList.add("kv-js");  // the filters show only where they work
var keys = ["era", "platform", "connector"];
var attrs = {era: "data-e", platform: "data-p", connector: "data-c"};
var box = document.getElementById("kv-q");
var status = document.getElementById("kv-filter-status");
var sheet = document.getElementById("kv-filter-style");
// a cell's notes are its <sup> numbers ("2,3"); their texts are the section's numbered list
function notesOf(cell) {
  var out = [];
  var section = cell.closest("section");
  cell.querySelectorAll("sup").forEach(function (sup) {
    sup.textContent.split(",").forEach(function (number) {
      var li = section && section.querySelector('ol.footnotes li[value="' + number.trim() + '"]');
      if (li) { out.push(li); }
    });
  });
  return out;
}
// rows whose tag is a column's text: the column's header says which tag (data-tag), the label -> value map
// the rest (kv-tag-names; a label missing from it is its own value)
var tagNames = JSON.parse(document.getElementById("kv-tag-names").textContent);
document.querySelectorAll("table.kv").forEach(function (table) {
  table.querySelectorAll("thead th[data-tag]").forEach(function (th) {
    var attr = th.getAttribute("data-tag"), names = tagNames[attr] || {};
    var position = Array.prototype.indexOf.call(th.parentNode.children, th);
    table.querySelectorAll("tbody tr").forEach(function (row) {
      var cell = row.children[position];
      if (!cell) { return; }
      var text = cell.textContent.trim();
      row.setAttribute(attr, Object.prototype.hasOwnProperty.call(names, text) ? names[text] : text);
    });
  });
});
// per searchable row: its text (with its notes) and the filter tags of the row and its section
var rows = [];
document.querySelectorAll("table.kv-search tbody tr").forEach(function (row) {
  var tags = {};
  var section = row.closest("section");
  keys.forEach(function (key) {
    var own = row.getAttribute(attrs[key]);
    var outer = section && section.getAttribute(attrs[key]);
    tags[key] = (own || outer) ? ((own || "") + " " + (outer || "")).trim().split(" ") : null;
  });
  rows.push({row: row, tags: tags, text: null});
});
function textOf(entry) {
  if (entry.text === null) {
    var text = entry.row.textContent;
    entry.row.querySelectorAll("td").forEach(function (cell) {
      if (cell.querySelector("sup")) { notesOf(cell).forEach(function (li) { text += " " + li.textContent; }); }
    });
    entry.text = text.toLowerCase();
  }
  return entry.text;
}
// the columns each table hides for a platform: from the tagged header cells
var columnRules = {};
document.querySelectorAll("table.kv").forEach(function (table, index) {
  table.setAttribute("data-kv-table", String(index));
  table.querySelectorAll("thead th[data-p]").forEach(function (th) {
    var position = Array.prototype.indexOf.call(th.parentNode.children, th) + 1;
    var value = th.getAttribute("data-p");
    (columnRules[value] = columnRules[value] || []).push(
      'table[data-kv-table="' + index + '"] tr > :nth-child(' + position + ')');
  });
});
function selected() {
  var values = {};
  keys.forEach(function (key) {
    var control = document.getElementById("kv-f-" + key);
    values[key] = control ? control.value : "";
  });
  return values;
}
function css(value) { return value.replace(/["\\\\]/g, "\\\\$&"); }
function apply() {
  var values = selected();
  var rules = [];
  keys.forEach(function (key) {
    if (!values[key]) { return; }
    rules.push("[" + attrs[key] + "]:not([" + attrs[key] + '~="' + css(values[key]) + '"])');
  });
  if (values.platform) {
    Object.keys(columnRules).forEach(function (platform) {
      if (platform !== values.platform) { rules = rules.concat(columnRules[platform]); }
    });
  }
  sheet.textContent = rules.length ? rules.join(",") + "{display:none!important}" : "";
  var needle = box.value.trim().toLowerCase();
  var shown = 0;
  rows.forEach(function (entry) {
    var match = !needle || textOf(entry).indexOf(needle) !== -1;
    if (entry.row.classList.contains("kv-nomatch") === match) { entry.row.classList.toggle("kv-nomatch", !match); }
    if (!match) { return; }
    for (var i = 0; i < keys.length; i++) {
      var key = keys[i], tag = entry.tags[key];
      if (values[key] && tag !== null && tag.indexOf(values[key]) === -1) { return; }
    }
    shown += 1;
  });
  status.textContent = shown + " rows shown";
  status.setAttribute("data-visible-rows", String(shown));
}
var params = new URLSearchParams(window.location.search);
// ?era= takes an era id (v0.33, seed) or a vLLM release (0.33.0, 0.33): the era whose first release is
// the last one at or before it (ERA_STARTS, written by the renderer from the era data)
function eraOf(value) {
  var starts = JSON.parse(document.getElementById("kv-era-starts").textContent);
  if (!/^\\d+(\\.\\d+){1,2}$/.test(value)) { return value; }
  var parts = value.split(".").map(Number);
  while (parts.length < 3) { parts.push(0); }
  function before(a, b) { for (var i = 0; i < 3; i++) { if (a[i] !== b[i]) { return a[i] < b[i]; } } return false; }
  var found = value;
  starts.eras.forEach(function (era) { if (!before(parts, era[1])) { found = era[0]; } });
  return before(parts, starts.eras[0][1]) || !before(parts, starts.newest_exclusive) ? value : found;
}
keys.forEach(function (key) {
  var control = document.getElementById("kv-f-" + key);
  if (control && params.has(key)) { control.value = key === "era" ? eraOf(params.get(key)) : params.get(key); }
  if (control) { control.addEventListener("change", apply); }
});
if (params.has("q")) { box.value = params.get("q"); }
box.addEventListener("input", apply);
// a cell's notes as its tooltip; a click on its note numbers goes to the first note
document.addEventListener("mouseover", function (event) {
  var cell = event.target.closest && event.target.closest("td");
  if (cell && !cell.title && cell.querySelector("sup")) {
    cell.title = notesOf(cell).map(function (li) { return li.value + ". " + li.textContent; }).join("\\n");
  }
});
document.addEventListener("click", function (event) {
  var sup = event.target.closest && event.target.closest("td sup");
  var notes = sup ? notesOf(sup.parentNode) : [];
  if (notes.length) { window.location.hash = notes[0].id; }
});
apply();
})();
"""

_CODE_SPAN = re.compile(r"`([^`]+)`")
_BOLD = re.compile(r"\*\*([^*]+)\*\*")
_LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")
_MD_PAGE_LINK = re.compile(r"^[\w.-]+\.md(#.+)$")
_SYMBOL = re.compile("([" + "".join(SYMBOL_CLASSES) + "])\ufe0f?")
_BARE_VALUE = re.compile(r"^[\w.:-]+$")


def _esc(text: str) -> str:
    return html.escape(text, quote=True)


def _attr(name: str, value: str) -> str:
    """` name=value`, quoted only where the value needs it (a full report has thousands of tagged rows)."""
    return f" {name}={value}" if _BARE_VALUE.match(value) else f' {name}="{_esc(value)}"'


def _href(target: str) -> str:
    """A link of the Markdown pages as the one HTML page has it: 'compatibility-seed.md#era-seed' -> '#era-seed'."""
    match = _MD_PAGE_LINK.match(target)
    return match.group(1) if match else target


def _inline(text: str) -> str:
    """Escaped text with the report's Markdown rendered: `code`, **bold**, [links](#anchor), symbols marked."""
    out = _esc(text)
    out = _CODE_SPAN.sub(lambda m: f"<code>{m.group(1)}</code>", out)
    out = _BOLD.sub(lambda m: f"<strong>{m.group(1)}</strong>", out)
    out = _LINK.sub(lambda m: f'<a href="{_href(html.unescape(m.group(2)))}">{m.group(1)}</a>', out)
    return _SYMBOL.sub(lambda m: f"<i class={SYMBOL_CLASSES[m.group(1)]}>{m.group(0)}</i>", out)


def _filter_attrs(filters: dict[str, str] | None, inherited: dict[str, str] | None = None) -> str:
    """The filter tags of an element, less those its section already carries with the same value."""
    if not filters:
        return ""
    inherited = inherited or {}
    return "".join(_attr(FILTER_ATTRS[key], value) for key, value in filters.items()
                   if key in FILTER_ATTRS and inherited.get(key) != value)


def _cell(value: Cell, footnotes: Footnotes) -> str:
    """One data cell: its kind's class, its text and its note numbers. A text that starts with its kind's
    symbol (`✅ on`) leaves the symbol to the class, which draws it; any other cell of a kind says `ni` (no icon)."""
    text = display_text(value)
    kind = KIND_CLASSES.get(value.kind)
    if kind:
        symbol = KIND_SYMBOLS[value.kind]
        if text.startswith(symbol):
            text = text[len(symbol):].lstrip("\ufe0f ")
        else:
            kind = f'"{kind} ni"'
    # one superscript, comma-separated, so notes 4 and 11 do not read as 411
    numbers = ",".join(str(footnotes.number(note)) for note in value.notes)
    refs = f"<sup>{numbers}</sup>" if numbers else ""
    return f"<td{f' class={kind}' if kind else ''}>{_inline(text)}{refs}"


class _ColumnTags:
    """Row tags the page's script reads from a column instead of an attribute on every row.

    A table whose rows all carry a tag that one column's text names, one label per value across the page (the
    listed rows' platform column, a connector's label), marks that column's header ``data-tag=c`` and leaves the rows untagged; the
    script tags them on load. One label -> value map per page (`names`, only where the two differ) keeps the
    labels that are not the value itself (``no connector`` -> ``noconn``); a table whose labels would
    contradict it keeps its row attributes."""

    def __init__(self) -> None:
        self._seen: dict[str, dict[str, str]] = {key: {} for key in FILTER_KEYS}

    def names(self) -> dict[str, dict[str, str]]:
        """Attribute -> label -> value, for the labels that differ from their value."""
        return {FILTER_ATTRS[key]: {label: value for label, value in seen.items() if label != value}
                for key, seen in self._seen.items()}

    def columns(self, table: Table) -> dict[str, int]:
        """Filter key -> the column whose text gives every row's tag (and remember the labels)."""
        found: dict[str, int] = {}
        filters = table.row_filters or []
        for key in FILTER_KEYS:
            values = [f.get(key) for f in filters]
            # a tag every row shares is no column's doing (the at-a-glance table of one platform)
            if len(set(values)) < 2 or None in values:
                continue
            texts = [[row[c] if c < len(row) and isinstance(row[c], str) and _plain(row[c]) else None
                      for row in table.rows] for c in range(len(table.headers))]
            # a column that shows the tag itself first (the listed rows' platform), then the others by position
            for column in sorted(range(len(texts)), key=lambda c: (texts[c] != values, c)):
                labels = texts[column]
                if None in labels:
                    continue
                # one label per value and one value per label, across the page: the column names the tag
                pairs, names = dict(self._seen[key]), {v: k for k, v in self._seen[key].items()}
                if all(pairs.setdefault(label, value) == value and names.setdefault(value, label) == label
                       for label, value in zip(labels, values)):
                    self._seen[key] = pairs
                    found[key] = column
                    break
        return found


_MARKUP = re.compile("[`*\\[" + "".join(SYMBOL_CLASSES) + "]")


def _plain(text: str) -> bool:
    """Whether the cell's text is its `textContent` in the page (no Markdown rendered, no symbol marked, no
    whitespace the script's trim would drop)."""
    return bool(text) and text == text.strip() and "\n" not in text and not _MARKUP.search(text)


def _table(table: Table, footnotes: Footnotes, inherited: dict[str, str], tags: _ColumnTags) -> str:
    columns = table.column_filters or [{}] * len(table.headers)
    from_columns = tags.columns(table)
    marks = {column: key for key, column in from_columns.items()}
    parts = [f'<table class="kv{" kv-search" if table.search else ""}"><thead><tr>']
    # only the header cell carries a column's tag: the page's style sheet hides the column by position
    parts += [f"<th{_filter_attrs(f)}{_attr('data-tag', FILTER_ATTRS[marks[i]]) if i in marks else ''}>{_inline(h)}"
              for i, (h, f) in enumerate(zip(table.headers, columns))]
    parts.append("</thead><tbody>")
    row_filters = table.row_filters or [None] * len(table.rows)
    anchors = table.row_anchors or [None] * len(table.rows)
    for row, filters, anchor in zip(table.rows, row_filters, anchors):
        own = {k: v for k, v in filters.items() if k not in from_columns} if filters else filters
        parts.append(f"\n<tr{_filter_attrs(own, inherited)}{_attr('id', anchor) if anchor else ''}>")
        parts += [f"<td>{_inline(value)}" if isinstance(value, str) else _cell(value, footnotes) for value in row]
    parts.append("</tbody></table>")
    return "".join(parts)


def _linked(text: str) -> str:
    """Escaped text with `code` spans, and spec references (§2.2, E-F, ...) linked to docs/rules.md."""
    return link_references(text, lambda label, href: f'<a href="{_esc(href)}">{_esc(label)}</a>', _inline)


def _block(block, footnotes: Footnotes, inherited: dict[str, str], tags: _ColumnTags) -> str:
    if isinstance(block, Heading):
        anchor = block.anchor or _slug(block.text)
        return (f'<h{block.level} id="{_esc(anchor)}">{_inline(block.text)}'
                f'<a class="kv-anchor" href="#{_esc(anchor)}" title="link to this part">#</a></h{block.level}>')
    if isinstance(block, Paragraph):
        return f"<p>{_linked(block.text)}</p>"
    if isinstance(block, BulletList):
        return "<ul>" + "".join(f"<li>{_linked(item)}</li>" for item in block.items) + "</ul>"
    return _table(block, footnotes, inherited, tags)


def _slug(text: str) -> str:
    """A heading's anchor when it names none: lower case, words joined by '-'."""
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-")


def _options(values: list[str], shown=lambda value: value) -> str:
    """The choices of a filter: each value (a tag in the page, an id without spaces) shown as `shown` labels it."""
    return '<option value="">all</option>' + "".join(f'<option value="{_esc(v)}">{_esc(shown(v))}</option>'
                                                     for v in values)


def _filter_options(key: str, values: list[str]) -> str:
    """Eras and platforms in the report's order (columns come first); connectors by the label the tables show
    (`harness.report.labels.connector_label`: a matrix id such as `ExternalTwoArg` reads "external, 2-arg
    constructor"), alphabetically."""
    if key != "connector":
        return _options(values)
    return _options(sorted(values, key=lambda v: connector_label(v).lower()), connector_label)


def _filter_values(sections: list[Section]) -> dict[str, list[str]]:
    """Every single value each filter can take (a tag "cuda rocm" gives two), in first-seen order."""
    values: dict[str, dict[str, None]] = {key: {} for key in FILTER_KEYS}

    def add(filters: dict[str, str]) -> None:
        for key, value in filters.items():
            for single in value.split():
                values.setdefault(key, {})[single] = None

    for section in sections:
        add(section.filters)
        for block in section.blocks:
            if isinstance(block, Table):
                for filters in (block.column_filters or []) + (block.row_filters or []):
                    add(filters)
    return {key: list(found) for key, found in values.items()}


def _section(index: int, section: Section, tags: _ColumnTags) -> str:
    """One section's HTML; its notes are numbered per section and listed at its end, next to its tables."""
    footnotes, prefix = Footnotes(), f"fn-{index}-"
    parts = [f'<section data-key="{_esc(section.key)}"{_filter_attrs(section.filters)}>']
    parts += [_block(block, footnotes, section.filters, tags) for block in section.blocks]
    definitions = footnotes.take_new()
    if definitions:
        parts.append('<ol class="footnotes">' + "".join(
            f'<li id="{prefix}{n}" value="{n}">{_linked(text)}</li>' for n, text in definitions) + "</ol>")
    parts.append("</section>")
    return "\n".join(parts)


URL_HELP = ("Link to a filtered view: `compatibility.html?era=0.33.0&platform=rocm&connector=LMCacheConnectorV1&q=E-F`. "
            "`era` takes a vLLM release (`0.33.0`, `0.33`) or an era id (`v0.33`, `seed`); `platform` one of the "
            "platform columns (`cuda`, `rocm`, `xpu`, `cpu`, `tpu`, `unspecified`); `connector` a connector id as in "
            "results.json.gz; `q` searches the rows and their notes (any case). Every part is optional; the "
            "filters need JavaScript, the tables do not.")


# Shown instead of the filters where scripts are off (the filters would do nothing there).
NO_SCRIPT_NOTE = "Scripts are off: every table below is complete; the filters and the search need JavaScript."


def _era_starts() -> dict:
    """The eras' first releases for the page's `?era=X.Y.Z` (from the era data, never a list typed here)."""
    from harness.eras import ERA_FIRST_VERSIONS, NEWEST_EXCLUSIVE

    return {"eras": [[era, list(first)] for era, first in ERA_FIRST_VERSIONS.items()],
            "newest_exclusive": list(NEWEST_EXCLUSIVE)}


def _json_in_script(data) -> str:
    """JSON that cannot end its <script> element early."""
    return json.dumps(data, ensure_ascii=False).replace("<", "\\u003c")


def render_html(document: Document, run_details: list[str] | None = None) -> str:
    """The whole report as one HTML page; `run_details` adds lines about the run (times, commit)."""
    filter_values = _filter_values(document.sections)
    controls = "".join(
        f'<label>{key} <select id="kv-f-{key}">{_filter_options(key, filter_values[key])}</select></label>'
        for key in FILTER_KEYS
    )
    body = [
        f"<h1>{_esc(document.title)}</h1>",
        f'<p class="run">{_esc(document.run_line)}</p>',
        *(f'<p class="run">{_esc(line)}</p>' for line in run_details or ()),
        f'<div id="kv-filters"><noscript><p>{NO_SCRIPT_NOTE}</p></noscript>'
        f'<span id="kv-controls">{controls}<label>search <input id="kv-q" type="search" '
        f'placeholder="connector, feature, warning…"></label><span id="kv-filter-status"></span></span>'
        f'<p id="kv-url-help">{_inline(URL_HELP)}</p></div>',
        f'<script type="application/json" id="kv-era-starts">{_json_in_script(_era_starts())}</script>',
    ]
    tags = _ColumnTags()
    body += [_section(index, section, tags) for index, section in enumerate(document.sections)]
    body.append(f'<script type="application/json" id="kv-tag-names">{_json_in_script(tags.names())}</script>')
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_esc(document.title)}</title><style>{_CSS}{_icon_css()}\n</style>"
        '<style id="kv-filter-style"></style>'
        "</head><body>\n"
        + "\n".join(body)
        + f"\n<script>{_JS}</script>\n</body></html>\n"
    )
