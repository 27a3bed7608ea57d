"""The HTML report in a real headless browser (Debian's chromium): tables render, filters and search work.

The page reads its filters from the URL (``?era=…&platform=…&connector=…&q=…``) and writes the number of
rows it shows into ``#kv-filter-status``; chromium's ``--dump-dom`` prints the DOM after the scripts ran.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from harness.report.build import build_document
from harness.report.html import render_html
from tests.report.synthetic import config_document

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (Debian: apt-get install -y chromium)")


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    path = tmp_path_factory.mktemp("html") / "compatibility.html"
    path.write_text(render_html(build_document(config_document())), encoding="utf-8")
    return path


def dump_dom(page, query: str, profile) -> str:
    """The DOM after load, as chromium serialises it."""
    done = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}",
         "--dump-dom", f"{page.as_uri()}{query}"],
        capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, f"chromium failed: {done.stderr[-2000:]}"
    return done.stdout


def visible_rows(dom: str) -> int:
    match = re.search(r'id="kv-filter-status"[^>]*data-visible-rows="(\d+)"', dom)
    assert match, "the filter script did not run (no row count in #kv-filter-status)"
    return int(match.group(1))


def hidden(dom: str, tag_pattern: str) -> bool:
    match = re.search(tag_pattern, dom)
    assert match, f"{tag_pattern} not found in the DOM"
    return "kv-hide" in match.group(0) or "kv-nomatch" in match.group(0)


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
def test_filters_and_search(page, tmp_path, query, rows):
    dom = dump_dom(page, query, tmp_path / "profile")
    assert visible_rows(dom) == rows, f"{query or 'no filter'}: rows shown"


def filter_style(dom: str) -> str:
    match = re.search(r'<style id="kv-filter-style">(.*?)</style>', dom, flags=re.S)
    assert match, "the page has no filter style sheet"
    return match.group(1)


def test_tables_render_and_era_filter_hides_other_eras(page, tmp_path):
    dom = dump_dom(page, "?era=seed&platform=cuda", tmp_path / "profile")
    assert dom.count("<table") == 12, ("summary, what went wrong (the synthetic run has a failing cell), the support "
                                       "table, at a glance on three platforms, legend, two eras with a table and a list "
                                       "each, what changed")
    style = filter_style(dom)
    assert '[data-f-era]:not([data-f-era~="seed"])' in style, "sections and rows of other eras are hidden"
    assert '[data-f-platform]:not([data-f-platform~="cuda"])' in style, "listed rows of other platforms are hidden"
    assert ":nth-child(6)" in style, "the rocm column (6th) of the seed table is hidden by position"
    assert re.search(r'<select id="kv-f-era">', dom) and 'value="seed"' in dom
    assert filter_style(dump_dom(page, "", tmp_path / "profile2")) == "", "no filter: nothing hidden"
