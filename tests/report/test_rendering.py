"""Report rendering against hand-checked golden snippets (cells, footnotes, sections) and HTML structure."""

from __future__ import annotations

import random
import re

from harness.report import render_reports
from harness.report.build import build_document
from harness.report.html import render_html
from harness.report.markdown import extract_section, render_markdown
from harness.results_model import ResultsDocument, make_entry
from tests.report.md_helpers import html_table_after, footnotes, table_after
from tests.report.synthetic import E_F, E_H, TPU, W1, W2, config_document, config_entry, outcome, run_info

NOT_RUN = "not run: no result for this configuration (it was not selected or is not in the matrix)"


def test_era_tables_golden():
    md = render_markdown(build_document(config_document()))
    assert table_after(md, "### Era seed (vLLM 0.13.0)") == [
        ["connector", "features", "cuda · absent", "cuda · True", "cuda · False", "rocm · absent"],
        ["none", "none", "✅", "⚪❗[^1]", "❔[^2]", "❔[^3]"],
        ["LMCacheConnectorV1", "none", "⚪[^4]", "❔[^2]", "❌[^5]", "❔[^2]"],
    ]
    assert table_after(md, "A connector together with a feature in seed: 1 configuration (") == [
        ["connector", "features", "platform", "flag", "outcome"],
        ["LMCacheConnectorV1", "kv_events", "rocm", "True", "⚪[^4]"],
    ]
    assert table_after(md, "### Era v0.33 (vLLM 0.33.0)") == [
        ["connector", "features", "cuda · absent", "tpu · absent"],
        ["none", "none", "✅", "❔[^6]"],
        ["LMCacheConnectorV1", "none", "⚪[^7]", "❔[^2]"],
    ]
    assert table_after(md, "A connector together with a feature in v0.33: 1 configuration (") == [
        ["connector", "features", "platform", "flag", "outcome"],
        ["LMCacheConnectorV1", "hisparse", "tpu", "absent", "❌[^8]"],
    ]
    assert footnotes(md) == {
        "1": "differs from the oracle at stage config: expected resolved False",
        "2": NOT_RUN,
        "3": "not run: ROCm not modelled",
        "4": W1,
        "5": f"ValueError at stage create_connector: {E_F}",
        "6": f"unknown: {TPU}",
        "7": W2,
        "8": f"ValueError at stage config: {E_H}",
    }


def test_matrix_spelling_noconn_is_the_no_connector_row():
    """The matrix names the absent connector "noconn": its rows come first in the main table, never in the list."""
    entries = [
        config_entry("seed", None, "cuda", "kv_events", "noconn", actual=outcome(resolved=True, warnings=[W1])),
        config_entry("seed", None, "cuda", "none", "noconn"),
        config_entry("seed", None, "cuda", "none", "ExampleConnector", actual=outcome(resolved=True, warnings=[W1])),
        config_entry("seed", None, "cuda", "kv_events", "ExampleConnector"),
        config_entry("seed", None, "cpu", "chunked", "ExampleConnector"),
    ]
    md = render_markdown(build_document(ResultsDocument(run_info=run_info(), results=entries)))
    assert table_after(md, "### Era seed") == [
        ["connector", "features", "cuda · absent"],
        ["noconn", "none", "✅"],
        ["noconn", "kv_events", "⚪[^1]"],
        ["ExampleConnector", "none", "⚪[^1]"],
    ], "the cpu column has no main-table cell, so the main table has no cpu column"
    assert table_after(md, "A connector together with a feature in seed: 2 configurations (") == [
        ["connector", "features", "platform", "flag", "outcome"],
        ["ExampleConnector", "chunked", "cpu", "absent", "✅"],
        ["ExampleConnector", "kv_events", "cuda", "absent", "✅"],
    ]


def test_era_without_interactions_has_no_list():
    md = render_markdown(build_document(ResultsDocument(run_info=run_info(), results=[config_entry()])))
    assert "A connector together with a feature" not in md
    assert table_after(md, "### Era seed") == [["connector", "features", "cuda · absent"], ["none", "none", "✅"]]


def test_changes_between_releases_golden():
    md = render_markdown(build_document(config_document()))
    assert table_after(md, "## What changed between releases") == [
        ["connector", "features", "platforms", "flag", "between", "before", "after"],
        ["LMCacheConnectorV1", "none", "cuda", "absent", "seed → v0.33", "⚪[^4]", "⚪[^7]"],
    ]


def test_changes_on_several_platforms_share_a_row():
    """Platforms whose outcome changes alike between the same eras are one row; a different change is not."""
    entries = [
        config_entry("seed", False, platform, "kv_events", "none",
                     actual=outcome(error={"type": "ValueError", "stage": "config", "message": "E-B"}))
        for platform in ("cuda", "rocm", "tpu")
    ] + [
        config_entry("v0.33", False, "cuda", "kv_events", "none", actual=outcome(resolved=False)),
        config_entry("v0.33", False, "rocm", "kv_events", "none", actual=outcome(resolved=False)),
        config_entry("v0.33", False, "tpu", "kv_events", "none", actual=outcome(unknown=TPU)),
    ]
    md = render_markdown(build_document(ResultsDocument(run_info=run_info(), results=entries)))
    rows = table_after(md, "## What changed between releases")
    assert [row[:5] for row in rows[1:]] == [
        ["none", "kv_events", "cuda, rocm", "False", "seed → v0.33"],
        ["none", "kv_events", "tpu", "False", "seed → v0.33"],
    ], rows
    assert rows[1][6] == "✅" and rows[2][6].startswith("❔"), rows


def test_summary_counts_against_the_oracle():
    md = render_markdown(build_document(config_document()))
    assert "1 of 10 tests that ran did not behave as expected (failed or error); 1 skipped." in md
    assert table_after(md, "## Summary") == [
        ["suite", "passed", "failed", "error", "skipped", "total"],
        ["config", "9", "1", "0", "1", "11"],
    ]
    assert ("9 of 11 matrix cases agree with the oracle, 1 differ, 0 could not be evaluated (error) "
            "and 1 were skipped.") in md
    assert "- `suites/config/test_matrix.py::test_cell[seed-T-cuda-none-none-config]`: expected resolved False" in md


def test_output_does_not_depend_on_entry_order():
    document = config_document()
    shuffled = list(document.results)
    random.Random(7).shuffle(shuffled)
    again = ResultsDocument(run_info=run_info(started_at="another day"), results=shuffled)
    assert render_reports(document)["compatibility.md"] == render_reports(again)["compatibility.md"]


def test_markdown_has_no_times_or_commits():
    md = render_reports(config_document())["compatibility.md"]
    assert "2026-01-01" not in md and "0" * 12 not in md, "run times and commits stay out of the Markdown"


def test_config_section_can_be_extracted():
    md = render_markdown(build_document(config_document()))
    section = extract_section(md, "config")
    assert section.startswith("<!-- kvconform:section config -->")
    assert section.endswith("<!-- /kvconform:section config -->")
    assert "## Summary" not in section and "### Era seed" in section and "[^8]: " in section


def connector_entry(connector, check, tier, preset, status="passed", message=None, evidence=None, description=""):
    return make_entry(nodeid=f"suites/connector/test_x.py::test_{check}[{connector}-{preset}]", suite="connector",
                      status=status, cell={"connector": connector, "check": check, "tier": tier, "preset": preset},
                      message=message, extra={"description": description or f"{check} description", "evidence": evidence})


NOT_CAPABLE = "not HMA-capable: ExampleNonHMA does not declare SupportsHMA"


def connector_document() -> ResultsDocument:
    entries = []
    for connector in ("LMCacheLike", "GoodHMA", "ExampleNonHMA"):
        for preset in ("fa_only", "fa+swa"):
            entries.append(connector_entry(connector, "C01", "MUST", preset))
    entries += [
        connector_entry("LMCacheLike", "C02", "MUST", "fa_only"),
        connector_entry("LMCacheLike", "C02", "MUST", "fa+swa", status="failed", message="assert False",
                        evidence="block 5 of layer 2 differs"),
        connector_entry("GoodHMA", "C02", "MUST", "fa+swa"),
        connector_entry("ExampleNonHMA", "C02", "MUST", "fa+swa", status="skipped", message=NOT_CAPABLE),
        connector_entry("LMCacheLike", "C03", "SHOULD", "fa+swa"),
        connector_entry("GoodHMA", "C03", "SHOULD", "fa+swa"),
        connector_entry("ExampleNonHMA", "C03", "SHOULD", "fa+swa", status="skipped",
                        message="not applicable: no sliding window"),
        connector_entry("LMCacheLike", "C10", "SHOULD", "fa+swa", status="failed", evidence={"block": 3}),
        connector_entry("GoodHMA", "C10", "SHOULD", "fa+swa", status="failed", evidence="slow eviction"),
    ]
    return ResultsDocument(run_info=run_info(), results=entries)


def test_connector_check_table_golden():
    md = render_markdown(build_document(connector_document()))
    assert table_after(md, "## Connector conformance") == [
        ["check", "tier", "description", "ExampleNonHMA", "GoodHMA", "LMCacheLike"],
        ["C01", "MUST", "C01 description", "✅", "✅", "✅"],
        ["C02", "MUST", "C02 description", "➖[^1]", "✅", "❌[^2]"],
        ["C03", "SHOULD", "C03 description", "➖[^3]", "✅", "✅"],
        ["C10", "SHOULD", "C10 description", "❔[^4]", "❌[^5]", "❌[^6]"],
    ]
    assert footnotes(md) == {
        "1": NOT_CAPABLE,
        "2": "C02 on preset fa+swa: block 5 of layer 2 differs",
        "3": "not applicable: no sliding window",
        "4": "C10 was not run for this connector",
        "5": "C10 on preset fa+swa: slow eviction",
        "6": 'C10 on preset fa+swa: {"block": 3}',
    }


def test_connector_hma_verdicts():
    md = render_markdown(build_document(connector_document()))
    assert ("- ➖ ExampleNonHMA does not declare `SupportsHMA`; its HMA checks were not run, so it must pass "
            "them before it declares it.") in md
    assert ("- ✅ GoodHMA may declare `SupportsHMA`: it passes every MUST check on every preset "
            "(SHOULD checks failing: C10).") in md
    assert "- ❌ LMCacheLike must not declare `SupportsHMA`: it fails MUST check(s) C02." in md


def test_allocator_and_throughput_sections():
    entries = [
        make_entry(nodeid="suites/allocator/test_grouping.py::test_a", suite="allocator", status="passed",
                   cell={"target": "reference", "scenario": "uniform", "section": "3 grouping"}),
        make_entry(nodeid="suites/allocator/test_grouping.py::test_b", suite="allocator", status="passed",
                   cell={"target": "reference", "scenario": "unify", "section": "3 grouping"}),
        make_entry(nodeid="suites/allocator/test_pool.py::test_c", suite="allocator", status="failed",
                   message="free queue order", cell={"target": "reference", "scenario": "free_order",
                                                     "section": "5 block pool"}),
        make_entry(nodeid="suites/benchmarks/test_b.py::a", suite="benchmark", status="passed",
                   cell={"workload": "request_stream_full", "implementation": "vllm"},
                   extra={"metrics": {"requests_per_s": 690.0, "block_ops_per_s": 1000.0, "median_s": 0.5}}),
        make_entry(nodeid="suites/benchmarks/test_b.py::b", suite="benchmark", status="passed",
                   cell={"workload": "request_stream_full", "implementation": "reference"},
                   extra={"metrics": {"requests_per_s": 1380.0, "block_ops_per_s": 2000.0, "median_s": 0.25}}),
        make_entry(nodeid="suites/benchmarks/test_b.py::c", suite="benchmark", status="passed",
                   cell={"workload": "pool_churn_k1", "implementation": "reference"},
                   extra={"metrics": {"block_ops_per_s": 1300000.0}}),
        make_entry(nodeid="suites/benchmarks/test_b.py::d", suite="benchmark", status="passed",
                   cell={"workload": "lookup_32k", "implementation": "reference"}, extra={"metrics": None}),
    ]
    document = build_document(ResultsDocument(run_info=run_info(), results=entries))
    md, page = render_markdown(document), render_html(document)
    assert table_after(md, "## Allocator conformance") == [
        ["target", "section", "passed", "failed", "error", "skipped"],
        ["reference", "3 grouping", "2", "0", "0", "0"],
        ["reference", "5 block pool", "0", "1", "0", "0"],
    ]
    assert "- free_order (5 block pool, reference): free queue order" in md
    assert html_table_after(page, "<h2>Throughput") == [
        ["workload", "implementation", "requests/s", "block ops/s", "median s", "ratio vs vLLM"],
        ["pool_churn_k1", "reference", "–", "1,300,000", "–", "❔1"],
        ["request_stream_full", "reference", "1,380.0", "2,000", "0.250000", "2.00×"],
        ["request_stream_full", "vllm", "690.0", "1,000", "0.500000", "1.00×"],
    ]
    assert "Not timed (1 workloads" in md and "lookup_32k (reference)" in md
    throughput_md = md[md.index("## Throughput"):]
    assert "1,380" not in throughput_md and "The measured figures (3 rows) depend on the machine" in throughput_md, (
        "the committed Markdown carries no machine-dependent figure")
    assert "## Config resolution matrix" not in md, "a suite without records gets no section"


def test_throughput_ratio_against_a_versioned_vllm_name():
    """The allocator benchmark records vLLM as "vllm-<release>"; it is still the baseline."""
    entries = [
        make_entry(nodeid="suites/benchmarks/test_b.py::a", suite="benchmark", status="passed",
                   cell={"workload": "stream.full", "implementation": "vllm-0.33.0"},
                   extra={"metrics": {"requests_per_s": 500.0}}),
        make_entry(nodeid="suites/benchmarks/test_b.py::b", suite="benchmark", status="passed",
                   cell={"workload": "stream.full", "implementation": "reference"},
                   extra={"metrics": {"requests_per_s": 1150.0}}),
    ]
    page = render_html(build_document(ResultsDocument(run_info=run_info(), results=entries)))
    rows = html_table_after(page, "<h2>Throughput")
    assert [row[0:2] + row[-1:] for row in rows[1:]] == [
        ["stream.full", "reference", "2.30×"],
        ["stream.full", "vllm-0.33.0", "1.00×"],
    ]


def test_pipes_and_newlines_in_messages_do_not_break_tables():
    entry = config_entry(actual=outcome(error={"type": "ValueError", "stage": "config", "message": "a | b\nc"}))
    md = render_markdown(build_document(ResultsDocument(run_info=run_info(), results=[entry])))
    assert "[^1]: ValueError at stage config: a \\| b c" in md
    assert table_after(md, "### Era seed")[1] == ["none", "none", "❌[^1]"]


def test_html_is_self_contained_and_filterable():
    page = render_html(build_document(config_document()), ["Run 1: commit 000"])
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page), "no network references"
    assert "<script>" in page and "<style>" in page, "JS and CSS are inline"
    for control in ('id="kv-f-era"', 'id="kv-f-platform"', 'id="kv-f-connector"', 'id="kv-q"',
                    'id="kv-filter-status"'):
        assert control in page
    assert '<option value="seed">seed</option><option value="v0.33">v0.33</option>' in page
    assert '<section data-key="config" data-f-era="seed">' in page
    assert '<th data-f-platform="tpu">tpu · absent</th>' in page
    assert '<tr data-f-connector="LMCacheConnectorV1">' in page
    assert '<td class="k-off" data-f-platform="cuda">⚪<sup><a href="#fn-4">4</a></sup></td>' in page
    assert f'<li id="fn-4" value="4">{W1}</li>' in page
    assert '<tr data-f-connector="LMCacheConnectorV1" data-f-platform="rocm">' in page, (
        "a listed connector-with-feature row carries its platform for the platform filter")
    assert '<td>kv_events</td>' in page and '<td class="k-error">❌<sup><a href="#fn-8">8</a></sup></td>' in page
    assert "Run 1: commit 000" in page
