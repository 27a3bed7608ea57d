"""The HTML report in a real headless browser (Debian's chromium): tables stand without JavaScript; filters and
search work with it.

The page reads its filters from the URL (``?era=…&platform=…&connector=…&q=…``) and writes the number of
rows it shows into ``#kv-filter-status``; one browser (`tests.report.chromium`, the DevTools protocol on a
pipe) loads every URL and returns the DOM after the load event, with the page's scripts on or off.
"""

from __future__ import annotations

import re

import pytest

from harness.report.build import build_document
from harness.report.html import NO_SCRIPT_NOTE, render_html
from harness.report.markdown import render_markdown
from tests.report.chromium import CHROMIUM, Chromium
from tests.report.md_helpers import html_page_tables, html_table_after, table_after
from tests.report.synthetic import config_document

pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (Debian: apt-get install -y chromium)")


@pytest.fixture(scope="module")
def document():
    return build_document(config_document())


@pytest.fixture(scope="module")
def page(tmp_path_factory, document):
    path = tmp_path_factory.mktemp("html") / "compatibility.html"
    path.write_text(render_html(document), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    chromium = Chromium(tmp_path_factory.mktemp("chromium-profile"))
    yield chromium
    chromium.close()


def dump_dom(browser, page, query: str = "", scripts: bool = True) -> str:
    """The DOM after load, as chromium serialises it."""
    return browser.load(f"{page.as_uri()}{query}", scripts=scripts)


def visible_rows(dom: str) -> int:
    match = re.search(r'id="kv-filter-status"[^>]*data-visible-rows="(\d+)"', dom)
    assert match, "the filter script did not run (no row count in #kv-filter-status)"
    return int(match.group(1))


def test_every_table_stands_without_javascript(browser, page, document):
    """Scripts off: chromium builds every table of the page (the markup leaves out optional end tags), the
    support table shows the Markdown report's rows, and nothing was filtered."""
    dom = dump_dom(browser, page, "?era=v0.33&q=nothing-matches-this", scripts=False)
    assert re.search(r'<span id="kv-filter-status"></span>', dom), "the page's script ran: scripts were not off"
    assert html_page_tables(dom).tables == html_page_tables(page.read_text(encoding="utf-8")).tables
    support = html_table_after(dom, 'id="support"')
    assert support == table_after(render_markdown(document), '<a id="support"></a>')
    assert len(support) > 1 and "LMCacheConnectorV1" in support[1][0], "the synthetic run's one connector row"
    assert "class=\"kv-nomatch" not in dom and 'id="kv-filter-style"></style>' in dom, "nothing is hidden"
    assert NO_SCRIPT_NOTE in dom and '<html lang="en">' in dom, "the filters are hidden and the page says why"
    assert '<html lang="en" class="kv-js">' in dump_dom(browser, page), "with scripts the filters show"


# Query -> rows shown: the support table has 1 row (LMCacheConnectorV1, connector tag only), "at a glance"
# 2 rows on cuda, 1 on rocm and 1 on tpu (connector and platform tags), per era 2 main-table rows and 1 listed
# connector-with-feature row, and 1 row in "what changed" (era v0.33, platform cuda) -- worked out by hand
# from synthetic.config_document. Main-table rows carry no platform tag (the platform filter hides their
# columns); listed rows do.
@pytest.mark.parametrize(("query", "rows"), [
    ("", 12),
    ("?era=seed", 8),  # the change arrives in v0.33
    ("?era=v0.33", 9),
    ("?connector=LMCacheConnectorV1", 7),
    # "no connector" rows are tagged by the script from their label: three at-a-glance rows, one per era table
    ("?connector=noconn", 5),
    ("?era=seed&connector=noconn", 4),
    ("?platform=tpu", 7),  # the seed list's rocm row and the cuda-only change row are hidden
    ("?era=seed&platform=rocm", 5),
    ("?era=seed&platform=cuda", 5),
    ("?q=tpu_inference", 1),  # only a note of the v0.33 none/none row mentions it
    ("?q=LMCACHECONNECTORV1", 7),  # case-insensitive
    ("?q=nvidia", 1),  # the note of the v0.33 listed hisparse row
    ("?era=v0.33&q=tpu_inference", 1),
    ("?era=seed&q=tpu_inference", 0),
    ("?era=0.13.0", 8),  # a release selects its era, as ?era=seed
    ("?era=0.33", 9),
    ("?era=0.13.0&platform=cuda", 5),
])
def test_filters_and_search(browser, page, query, rows):
    dom = dump_dom(browser, page, query)
    assert visible_rows(dom) == rows, f"{query or 'no filter'}: rows shown"


def filter_style(dom: str) -> str:
    match = re.search(r'<style id="kv-filter-style">(.*?)</style>', dom, flags=re.S)
    assert match, "the page has no filter style sheet"
    return match.group(1)


def test_tables_render_and_era_filter_hides_other_eras(browser, page):
    dom = dump_dom(browser, page, "?era=seed&platform=cuda")
    assert dom.count("<table") == 12, ("summary, what went wrong (the synthetic run has a failing cell), the support "
                                       "table, at a glance on three platforms, legend, two eras with a table and a list "
                                       "each, what changed")
    style = filter_style(dom)
    assert '[data-e]:not([data-e~="seed"])' in style, "sections and rows of other eras are hidden"
    assert '[data-p]:not([data-p~="cuda"])' in style, "listed rows of other platforms are hidden"
    assert ":nth-child(6)" in style, "the rocm column (6th) of the seed table is hidden by position"
    assert re.search(r'<select id="kv-f-era">', dom) and 'value="seed"' in dom
    assert filter_style(dump_dom(browser, page)) == "", "no filter: nothing hidden"
