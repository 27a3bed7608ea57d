"""The "vLLM X's connectors" report sections, rendered from hand-made results (no suite run): one section per
release, connector x check cells with the first failing evidence, one line for connectors that could not
be checked, the HMA declaration per connector, and `kvconform merge` of two releases' results."""

from __future__ import annotations

import re

from harness.cli import main
from harness.report import render_reports
from harness.results_model import ResultsDocument, load_results, make_entry
from tests.report.md_helpers import footnotes, table_after
from tests.report.synthetic import groups_record, na_record, run_info, skip_cause_record


def entry(connector, check, status, preset="fa_only", tier="MUST", message=None, evidence=None):
    """One connector-suite entry as suites/connector/conftest.py records it."""
    return make_entry(nodeid=f"suites/connector/test_x.py::test_{check}[{connector}-{preset}]", suite="connector",
                      status=status, cell={"connector": connector, "check": check, "tier": tier, "preset": preset},
                      message=message, not_applicable=na_record(status, message),
                      skip_cause=skip_cause_record(status, message),
                      extra={"description": f"what {check.split()[0]} checks", "evidence": evidence,
                             **groups_record(preset)})


NOT_HMA = "not HMA-capable: ExampleConnector does not declare SupportsHMA, so vLLM refuses it on the multi-group preset fa+swa"
NIXL = "cannot run here: NixlConnector needs the NIXL transfer library (UCX/RDMA) (package 'nixl' is not installed)"
ENTRIES_033 = [
    entry("vllm-0.33.0:ExampleConnector", "C14 round-trip-bytes", "passed"),
    entry("vllm-0.33.0:ExampleConnector", "C14 round-trip-bytes", "skipped", preset="fa+swa", message=NOT_HMA),
    entry("vllm-0.33.0:ExampleConnector", "C30 key-isolation", "failed", evidence="cache_salt tenant-b: hit 784"),
    entry("vllm-0.33.0:DecodeBenchConnector", "C14 round-trip-bytes", "failed", preset="fa+swa",
          evidence="block 1 differs from the content oracle"),
    entry("vllm-0.33.0:DecodeBenchConnector", "C30 key-isolation", "passed"),
    entry("vllm-0.33.0:NixlConnector", "C14 round-trip-bytes", "skipped", message=NIXL),
    entry("vllm-0.33.0:NixlConnector", "C30 key-isolation", "skipped", preset="fa+swa", message=NIXL),
    entry("LMCacheLikeConnector", "C14 round-trip-bytes", "passed"),
]


def _markdown(entries) -> str:
    return render_reports(ResultsDocument(run_info=run_info(), results=entries))["compatibility.md"]


def test_release_section_table_and_evidence():
    md = _markdown(ENTRIES_033)
    rows = table_after(md, "## vLLM 0.33.0's connectors")
    assert rows[0] == ["check", "tier", "description", "DecodeBenchConnector", "ExampleConnector"], \
        "a connector that could not run gets no column"
    cells = {row[0]: row[3:] for row in rows[1:]}
    notes = footnotes(md)
    decode_c14, example_c14 = cells["C14 round-trip-bytes"]
    assert example_c14 == "✅ pass", "the multi-group skip of a non-HMA connector does not hide its pass"
    assert decode_c14.startswith("❌")
    assert notes[decode_c14.split("[")[1].rstrip("]")] == (
        "C14 round-trip-bytes on preset fa+swa: block 1 differs from the content oracle")
    assert cells["C30 key-isolation"][0] == "✅ pass" and cells["C30 key-isolation"][1].startswith("❌")


def test_connectors_that_could_not_run_get_one_line_each():
    md = _markdown(ENTRIES_033)
    section = md[md.index("### vLLM 0.33.0's connectors the suite could not check here"):]
    assert f"- NixlConnector (declares `SupportsHMA`): {NIXL}" in section


def test_hma_declaration_and_verdict_per_connector():
    md = _markdown(ENTRIES_033)
    # both connectors that ran are vLLM's example connectors (vllm_connector_facts.EXAMPLE_CONNECTORS): their
    # verdicts follow their own table, and no deployed connector's SupportsHMA heading is written
    assert "### SupportsHMA in vLLM 0.33.0's connectors" not in md
    start = md.index("### vLLM 0.33.0's example connectors")
    section = md[start:md.index("### ", start + 1)]
    assert ("- ❌ DecodeBenchConnector declares `SupportsHMA` but must not: on multi-group models it fails MUST "
            "check(s) C14 round-trip-bytes.") in section
    # a single-group failure is a finding of its own, not evidence about HMA (which it does not declare)
    assert ("- ➖ ExampleConnector does not declare `SupportsHMA`; its multi-group checks were not run, so it must "
            "pass them before it declares it.") in section
    assert "ExampleConnector must not declare" not in section, "it does not declare SupportsHMA, so say so"


def test_vllm_connectors_stay_out_of_the_main_connector_table():
    md = _markdown(ENTRIES_033)
    assert table_after(md, "## Connector conformance")[0] == ["check", "tier", "description",
                                                              "kvconform:LMCacheLikeConnector"]


def test_kvconform_and_vllm_connectors_of_one_name_read_apart():
    """Issue 32: kvconform's own ExampleConnector and vLLM's share a class name; the report names kvconform's
    `kvconform:ExampleConnector` wherever it appears (column, verdicts, HTML filter) and vLLM's keeps its name."""
    from harness.report.build import build_document
    from harness.report.html import render_html

    entries = ENTRIES_033 + [entry("ExampleConnector", "C14 round-trip-bytes", "passed")]
    md = _markdown(entries)
    assert table_after(md, "## Connector conformance")[0][3:] == ["kvconform:ExampleConnector",
                                                                  "kvconform:LMCacheLikeConnector"]
    assert re.search(r"^- \S+ kvconform:ExampleConnector (does not )?declares? `SupportsHMA`", md, flags=re.M), md
    assert "- kvconform:ExampleConnector: none; every MUST check decided" in md
    assert "ExampleConnector" in table_after(md, "### vLLM 0.33.0's example connectors")[0], "vLLM's keeps its name"
    assert "kvconform:ExampleConnector" not in md[md.index("## vLLM 0.33.0's connectors"):]
    page = render_html(build_document(ResultsDocument(run_info=run_info(), results=entries)))
    assert '<option value="kvconform:ExampleConnector">kvconform:ExampleConnector</option>' in page
    assert '<option value="ExampleConnector">ExampleConnector</option>' in page, "vLLM's, from its own section"


def test_no_section_without_vllm_connector_results():
    assert "'s connectors" not in _markdown(ENTRIES_033[-1:])


def test_merged_releases_get_a_section_each_newest_first(tmp_path, capsys):
    old = [entry("vllm-0.13.0:ExampleConnector", "C14 round-trip-bytes", "failed", evidence="no hit")]
    paths = []
    for name, entries in (("a", ENTRIES_033), ("b", old)):
        path = tmp_path / f"{name}.json"
        path.write_text(ResultsDocument(run_info=run_info(), results=entries).dumps())
        paths.append(str(path))
    assert main(["merge", *paths, "-o", str(tmp_path / "merged.json")]) == 0
    md = _markdown(load_results(tmp_path / "merged.json").results)
    assert md.index("## vLLM 0.33.0's connectors") < md.index("## vLLM 0.13.0's connectors")
    assert table_after(md, "## vLLM 0.13.0's connectors")[1][3].startswith("❌")
