"""Rendering speed: the Markdown and HTML reports of 50,000 results (goal: under 2 s; measured, not asserted)."""

from __future__ import annotations

from harness.report.build import build_document
from harness.report.html import render_html
from harness.report.markdown import render_markdown
from tests.report.synthetic import ERAS, big_matrix

RESULTS = 50_000


def test_render_50000_results(benchmark):
    results = big_matrix(RESULTS)
    assert len(results.results) == RESULTS

    def render() -> tuple[str, str]:
        document = build_document(results)
        return render_markdown(document), render_html(document)

    markdown, page = benchmark.pedantic(render, rounds=3, iterations=1)
    benchmark.extra_info["results"] = RESULTS
    eras = {era for era in ERAS if f"### Era {era} " in markdown}
    assert eras == {e["cell"]["era"] for e in results.results}, "one table per era present in the results"
    assert all(f'data-e={era}>' in page for era in eras), "every era's section is in the page"
