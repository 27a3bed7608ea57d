"""Render the report document as one self-contained HTML file (inline CSS and JS, no network, no server).

Filters for era, platform and connector hide the sections, table columns (their header cell is tagged) and
rows tagged with ``data-f-era``, ``data-f-platform`` and ``data-f-connector``; a tag may list several values
("cuda rocm"), and the element shows when one of them is selected. Hiding is done by one generated style
sheet (attribute selectors and column positions), not by touching every element, so changing or resetting a
filter stays fast on a page of thousands of rows. The search box keeps the rows whose text or notes contain
the query. The filters can be preset from the URL: ``compatibility.html?era=seed&platform=cuda&q=lmcache``.
``#kv-filter-status`` always says how many rows are shown (``data-visible-rows``).
"""

from __future__ import annotations

import base64
import gzip
import html
import re

from harness.report.footnotes import Footnotes
from harness.report.model import BulletList, Document, Heading, Paragraph, Section, Table, display_text
from harness.report.spec_refs import link_references

FILTER_KEYS = ("era", "platform", "connector")

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:1.5em;color:#1b1f24;line-height:1.4}
h1{font-size:1.5em}h2{margin-top:1.6em;border-bottom:1px solid #d0d7de}h3{margin-top:1.2em}
.run{color:#57606a}
#kv-filters{position:sticky;top:0;background:#f6f8fa;padding:.5em;border:1px solid #d0d7de;z-index:2}
#kv-filters label{margin-right:1em}
table{border-collapse:collapse;margin:.5em 0;font-size:.85em}
th,td{border:1px solid #d0d7de;padding:.2em .45em;text-align:center;white-space:nowrap}
td:first-child,td:nth-child(2){text-align:left}
thead th{background:#f6f8fa;position:sticky;top:2.6em}
td.k-on,td.k-pass{background:#dafbe1}td.k-off,td.k-na{background:#eef0f2}
td.k-error,td.k-fail{background:#ffebe9}td.k-unknown{background:#fff8c5}
td.k-mismatch{background:#ffebe9;outline:2px solid #cf222e;outline-offset:-2px}
sup a{text-decoration:none;color:#0969da}
td.k-error,td.k-fail,td.k-mismatch{font-weight:600}
td.k-off,td.k-na{color:#57606a}
ol.footnotes{font-size:.85em;color:#3d444d}
.kv-hide,.kv-nomatch{display:none!important}
"""

_JS = """
(function () {
var packed = document.querySelectorAll('script[type="application/x-kv-section"]');
function unpack(element) {
  var binary = atob(element.textContent.trim());
  var bytes = new Uint8Array(binary.length);
  for (var i = 0; i < binary.length; i++) { bytes[i] = binary.charCodeAt(i); }
  var stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
  return new Response(stream).text().then(function (html) {
    element.insertAdjacentHTML("beforebegin", html);
    element.remove();
  });
}
if (!packed.length) {
  setup();
} else if (typeof DecompressionStream === "undefined") {
  document.getElementById("kv-filter-status").textContent =
    "this browser cannot unpack the packed sections (no DecompressionStream); see compatibility.md";
} else {
  Promise.all(Array.prototype.map.call(packed, unpack)).then(setup);
}
function setup() {
  var keys = ["era", "platform", "connector"];
  var box = document.getElementById("kv-q");
  var status = document.getElementById("kv-filter-status");
  var sheet = document.getElementById("kv-filter-style");
  var notes = {};
  document.querySelectorAll("ol.footnotes li").forEach(function (li) { notes[li.id] = li.textContent; });
  // per searchable row: its text (with its notes) and the filter tags of the row and its section
  var rows = [];
  document.querySelectorAll("table.kv-search tbody tr").forEach(function (row) {
    var tags = {};
    var section = row.closest("section");
    keys.forEach(function (key) {
      var own = row.getAttribute("data-f-" + key);
      var outer = section && section.getAttribute("data-f-" + key);
      tags[key] = (own || outer) ? ((own || "") + " " + (outer || "")).trim().split(" ") : null;
    });
    rows.push({row: row, tags: tags, text: null});
  });
  function textOf(entry) {
    if (entry.text === null) {
      var text = entry.row.textContent;
      entry.row.querySelectorAll("sup a").forEach(function (a) {
        text += " " + (notes[a.getAttribute("href").slice(1)] || "");
      });
      entry.text = text.toLowerCase();
    }
    return entry.text;
  }
  // the columns each table hides for a platform: from the tagged header cells
  var columnRules = {};
  document.querySelectorAll("table.kv").forEach(function (table, index) {
    table.setAttribute("data-kv-table", String(index));
    table.querySelectorAll("thead th[data-f-platform]").forEach(function (th) {
      var position = Array.prototype.indexOf.call(th.parentNode.children, th) + 1;
      var value = th.getAttribute("data-f-platform");
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
      rules.push("[data-f-" + key + "]:not([data-f-" + key + '~="' + css(values[key]) + '"])');
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
  keys.forEach(function (key) {
    var control = document.getElementById("kv-f-" + key);
    if (control && params.has(key)) { control.value = params.get(key); }
    if (control) { control.addEventListener("change", apply); }
  });
  if (params.has("q")) { box.value = params.get("q"); }
  box.addEventListener("input", apply);
  document.addEventListener("mouseover", function (event) {
    var cell = event.target.closest && event.target.closest("td");
    if (cell && !cell.title && cell.querySelector("sup a")) {
      var lines = [];
      cell.querySelectorAll("sup a").forEach(function (a) { lines.push(notes[a.getAttribute("href").slice(1)]); });
      cell.title = lines.join("\\n");
    }
  });
  apply();
}
})();
"""

_CODE_SPAN = re.compile(r"`([^`]+)`")


def _esc(text: str) -> str:
    return html.escape(text, quote=True)


def _inline(text: str) -> str:
    """Escaped text with `code` spans."""
    return _CODE_SPAN.sub(lambda m: f"<code>{m.group(1)}</code>", _esc(text))


def _filter_attrs(filters: dict[str, str] | None) -> str:
    if not filters:
        return ""
    return "".join(f' data-f-{key}="{_esc(value)}"' for key, value in filters.items() if key in FILTER_KEYS)


def _table(table: Table, footnotes: Footnotes, prefix: str) -> str:
    columns = table.column_filters or [{}] * len(table.headers)
    parts = [f'<table class="kv{" kv-search" if table.search else ""}"><thead><tr>']
    # only the header cell carries a column's tag: the page's style sheet hides the column by position
    parts += [f"<th{_filter_attrs(f)}>{_esc(h)}</th>" for h, f in zip(table.headers, columns)]
    parts.append("</tr></thead><tbody>")
    row_filters = table.row_filters or [None] * len(table.rows)
    for row, filters in zip(table.rows, row_filters):
        parts.append(f"<tr{_filter_attrs(filters)}>")
        for value in row:
            if isinstance(value, str):
                parts.append(f"<td>{_esc(value)}</td>")
                continue
            # one superscript, comma-separated, so notes 4 and 11 do not read as 411
            links = ",".join(f'<a href="#{prefix}{n}">{n}</a>' for n in (footnotes.number(note) for note in value.notes))
            refs = f"<sup>{links}</sup>" if links else ""
            kind = f' class="k-{value.kind}"' if value.kind else ""
            parts.append(f"<td{kind}>{_esc(display_text(value))}{refs}</td>")
        parts.append("</tr>")
    parts.append("</tbody></table>")
    return "".join(parts)


def _linked(text: str) -> str:
    """Escaped text with `code` spans, and spec references (§2.2, E-F, ...) linked to docs/rules.md."""
    return link_references(text, lambda label, href: f'<a href="{_esc(href)}">{_esc(label)}</a>', _inline)


def _block(block, footnotes: Footnotes, prefix: str) -> str:
    if isinstance(block, Heading):
        return f"<h{block.level}>{_esc(block.text)}</h{block.level}>"
    if isinstance(block, Paragraph):
        return f"<p>{_linked(block.text)}</p>"
    if isinstance(block, BulletList):
        return "<ul>" + "".join(f"<li>{_linked(item)}</li>" for item in block.items) + "</ul>"
    return _table(block, footnotes, prefix)


def _options(values: list[str]) -> str:
    return '<option value="">all</option>' + "".join(f'<option value="{_esc(v)}">{_esc(v)}</option>' for v in values)


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


# A page whose sections pass PACK_ABOVE_BYTES keeps its big sections gzip-compressed (base64) in the page and
# unpacks them when it loads (DecompressionStream): a full report is about 1 MB of tables, 10x less packed.
PACK_ABOVE_BYTES = 400_000
PACK_SECTION_BYTES = 16_000


def _section(index: int, section: Section) -> str:
    """One section's HTML; its notes are numbered per section and listed at its end, next to its tables."""
    footnotes, prefix = Footnotes(), f"fn-{index}-"
    parts = [f'<section data-key="{_esc(section.key)}"{_filter_attrs(section.filters)}>']
    parts += [_block(block, footnotes, prefix) for block in section.blocks]
    definitions = footnotes.take_new()
    if definitions:
        parts.append('<ol class="footnotes">' + "".join(
            f'<li id="{prefix}{n}" value="{n}">{_linked(text)}</li>' for n, text in definitions) + "</ol>")
    parts.append("</section>")
    return "\n".join(parts)


def _packed(section_html: str) -> str:
    """The section as a gzip + base64 script element the page's script unpacks (deterministic: mtime 0)."""
    data = base64.b64encode(gzip.compress(section_html.encode("utf-8"), compresslevel=9, mtime=0)).decode("ascii")
    return f'<script type="application/x-kv-section">{data}</script>'


def unpack_sections(page: str) -> str:
    """The page with its packed sections replaced by their HTML (what the browser shows; for tests and tools)."""
    return re.sub(r'<script type="application/x-kv-section">([^<]*)</script>',
                  lambda m: gzip.decompress(base64.b64decode(m.group(1))).decode("utf-8"), page)


def render_html(document: Document, run_details: list[str] | None = None) -> str:
    """The whole report as one HTML page; `run_details` adds lines about the run (times, commit)."""
    filter_values = _filter_values(document.sections)
    # eras and platforms in the report's order (columns come first); connectors alphabetically
    controls = "".join(
        f'<label>{key} <select id="kv-f-{key}">{_options(sorted(filter_values[key], key=str.lower) if key == "connector" else filter_values[key])}</select></label>'
        for key in FILTER_KEYS
    )
    body = [
        f"<h1>{_esc(document.title)}</h1>",
        f'<p class="run">{_esc(document.run_line)}</p>',
        *(f'<p class="run">{_esc(line)}</p>' for line in run_details or ()),
        f'<div id="kv-filters">{controls}<label>search <input id="kv-q" type="search" '
        f'placeholder="connector, feature, warning…"></label><span id="kv-filter-status"></span></div>',
    ]
    sections = [_section(index, section) for index, section in enumerate(document.sections)]
    if sum(len(text.encode()) for text in sections) > PACK_ABOVE_BYTES:
        sections = [_packed(text) if len(text.encode()) > PACK_SECTION_BYTES else text for text in sections]
    body += sections
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_esc(document.title)}</title><style>{_CSS}</style><style id=\"kv-filter-style\"></style>"
        "</head><body>\n"
        + "\n".join(body)
        + f"\n<script>{_JS}</script>\n</body></html>\n"
    )
