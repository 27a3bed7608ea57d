"""Report rendering against hand-checked golden snippets (cells, footnotes, sections) and HTML structure."""

from __future__ import annotations

import random
import re
import shutil
import subprocess

import pytest

from harness.failure_causes import cause_record
from harness.report import render_reports
from harness.report.build import build_document
from harness.report.connector_section import hma_verdict
from harness.report.html import render_html
from harness.report.markdown import extract_section, render_markdown
from harness.report.model import Document, Section, Table
from harness.results_model import ResultsDocument, make_entry
from reference_impl.vocabulary import NO_CONNECTOR
from tests.report.md_helpers import footnotes, html_page_tables, html_table_after, markdown_tables, table_after
from tests.report.synthetic import (E_F, E_H, TPU, W1, W2, big_matrix, config_document, config_entry, groups_record,
                                    na_record, outcome, run_info, skip_cause_record)

NOT_RUN = "not run: no result for this configuration (it was not selected or is not in the matrix)"


def test_era_tables_golden():
    md = render_markdown(build_document(config_document()))
    assert table_after(md, "### Era seed (vLLM 0.13.0)") == [
        ["connector", "feature", "cuda · auto", "cuda · --disable-…", "cuda · --no-disable-…", "rocm · auto"],
        ["no connector", "no feature", "✅ on (config only)", "⚪ off ❗ differs (config only) [1]", "❔ unknown [2]",
         "❔ unknown (config only) [3]"],
        ["LMCacheConnectorV1", "no feature", "⚪ off (config only) [4]", "❔ unknown [2]", "❌ E-F [5]", "❔ unknown [2]"],
    ], "the table's cells ran through create_connector unless they say they stopped at config"
    assert "Cells ran through stage `create_connector` unless they say otherwise" in md
    assert table_after(md, "A connector together with a feature in seed: 1 configuration (") == [
        ["connector", "feature", "platform", "flag", "outcome", "stage reached"],
        ["LMCacheConnectorV1", "KV events", "rocm", "--disable-…", "⚪ off [4]", "config"],
    ]
    assert footnotes(md, "### Era seed (vLLM 0.13.0)") == {
        "1": "differs from the oracle at stage config: expected resolved False",
        "2": NOT_RUN,
        "3": "not run: ROCm not modelled",
        "4": f"[W-A1](../docs/rules.md#w-a1) (warning): {W1}",
        "5": f"[E-F](../docs/rules.md#e-f): ValueError at stage create_connector: {E_F}",
    }, "notes are numbered per era and listed under its tables, message ids linked to docs/rules.md"
    assert table_after(md, "### Era v0.33 (vLLM 0.33.0)") == [
        ["connector", "feature", "cuda · auto", "tpu · auto"],
        ["no connector", "no feature", "✅ on", "❔ unknown [1]"],
        ["LMCacheConnectorV1", "no feature", "⚪ off [2]", "❔ unknown [3]"],
    ]
    assert table_after(md, "A connector together with a feature in v0.33: 1 configuration (") == [
        ["connector", "feature", "platform", "flag", "outcome", "stage reached"],
        ["LMCacheConnectorV1", "HiSparse", "tpu", "auto", "❌ E-HISPARSE-CUDA [4]", "create_connector"],
    ]
    assert footnotes(md, "### Era v0.33 (vLLM 0.33.0)") == {
        "1": f"unknown: {TPU}",
        "2": f"warning: {W2}",
        "3": NOT_RUN,
        "4": f"[E-HISPARSE-CUDA](../docs/rules.md#e-hisparse-cuda): ValueError at stage config: {E_H}",
    }


def test_at_a_glance_per_connector_and_feature_per_platform():
    md = render_markdown(build_document(config_document()))
    assert table_after(md, "### At a glance: cuda") == [
        ["connector", "feature", "flag auto (absent)", "explicit enable (--no-disable-… / --enable-…)"],
        ["no connector", "no feature", "✅ on (config only)", "not run"],
        ["LMCacheConnectorV1", "no feature", "⚪ off (config only)", "❌ E-F"],
    ], "a cell that stopped before create_connector says so"
    assert table_after(md, "### At a glance: tpu")[1:] == [
        ["no connector", "no feature", "❔ unknown from 0.33.0", "not run"],
    ], "the tpu cells of the synthetic run are v0.33's"
    entries = [config_entry(era, None, "cuda", "none", "NixlConnector",
                            actual=outcome(resolved=resolved, warnings=[] if resolved is False else [W1]))
               for era, resolved in (("seed", True), ("v0.20", True), ("v0.22", False), ("v0.33", False))]
    entries.append(config_entry("v0.22", None, "cuda", "none", "MoRIIOConnector"))
    md = render_markdown(build_document(ResultsDocument(run_info=run_info(), results=entries)))
    assert table_after(md, "### At a glance: cuda")[1:] == [
        ["MoRIIOConnector", "no feature", "✅ on from 0.22.0", "not run"],
        ["NixlConnector", "no feature", "⚪ off; ✅ on from 0.22.0", "not run"],
    ], "a connector that appears later says from which release; a change names the release it arrives in"


def test_legend_explains_every_fixture_id_used():
    md = render_markdown(build_document(ResultsDocument(run_info=run_info(), results=[
        config_entry(connector="noconn", features="chunked_env0"),
        config_entry(connector="MultiConnector"),
        config_entry(connector="ExternalTwoArg")])))
    assert table_after(md, "### What the configurations are") == [
        ["label", "id in test names and results.json.gz", "kind", "configuration"],
        ["no feature", "`none`", "feature", "none of the features below"],
        ["chunked local, env 0", "`chunked_env0`", "feature",
         "chunked local attention with `VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=0`"],
        ["no connector", "`noconn`", "connector", "no `--kv-transfer-config`"],
        ["external, 2-arg constructor", "`ExternalTwoArg`", "connector",
         "an out-of-tree connector with the old two-argument constructor (no `kv_cache_config`), not `SupportsHMA`"],
        ['MultiConnector, no "connectors" key', "`MultiConnector`", "connector",
         '`MultiConnector` whose `kv_connector_extra_config` has no `"connectors"` key'],
    ]
    assert ['MultiConnector, no "connectors" key', "no feature", "✅ on"] in table_after(md, "### Era seed")


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
        ["connector", "feature", "cuda · auto"],
        ["no connector", "no feature", "✅ on"],
        ["no connector", "KV events", "⚪ off [1]"],
        ["ExampleConnector", "no feature", "⚪ off [1]"],
    ], "the cpu column has no main-table cell, so the main table has no cpu column"
    assert table_after(md, "A connector together with a feature in seed: 2 configurations (") == [
        ["connector", "feature", "platform", "flag", "outcome", "stage reached"],
        ["ExampleConnector", "chunked local attention", "cpu", "auto", "✅ on", "config"],
        ["ExampleConnector", "KV events", "cuda", "auto", "✅ on", "config"],
    ]


def test_flag_columns_use_the_release_spelling():
    entries = [config_entry(era, flag) for era in ("pre-seed", "v0.33") for flag in (None, True, False)]
    md = render_markdown(build_document(ResultsDocument(run_info=run_info(), results=entries)))
    assert table_after(md, "### Era pre-seed")[0][2:] == ["cuda · auto", "cuda · --disable-…", "cuda · --no-disable-…"]
    assert table_after(md, "### Era v0.33")[0][2:] == ["cuda · auto", "cuda · --disable-…", "cuda · --enable-…"]
    assert "**--enable-…** = `--enable-hybrid-kv-cache-manager` from 0.33.0" in md


def test_era_without_interactions_has_no_list():
    md = render_markdown(build_document(ResultsDocument(run_info=run_info(), results=[config_entry()])))
    assert "A connector together with a feature" not in md
    assert table_after(md, "### Era seed") == [["connector", "feature", "cuda · auto"],
                                              ["no connector", "no feature", "✅ on"]]


def test_empty_assertion_is_named_not_an_empty_note():
    entry = config_entry(connector="MultiConnector", stage="create_connector", actual=outcome(
        error={"type": "AssertionError", "stage": "create_connector", "text": ""}))
    md = render_markdown(build_document(ResultsDocument(run_info=run_info(), results=[entry])))
    assert table_after(md, "### Era seed")[1][2] == "❌ E-MULTI-NO-CONNECTORS [1]"
    assert footnotes(md, "### Era seed") == {"1": "[E-MULTI-NO-CONNECTORS](../docs/rules.md#e-multi-no-connectors): "
                                                  "AssertionError at stage create_connector, with no message"}


def test_changes_between_releases_golden():
    md = render_markdown(build_document(config_document()))
    assert table_after(md, "## What changed between releases") == [
        ["releases", "before", "after", "configurations", "which (connector + feature · flag · platforms)"],
        ["0.13.0 → 0.33.0", "⚪ off [1]", "⚪ off [2]", "1", "LMCacheConnectorV1 + no feature · auto · cuda"],
    ]
    assert footnotes(md, "## What changed between releases") == {
        "1": f"[W-A1](../docs/rules.md#w-a1) (warning): {W1}", "2": f"warning: {W2}"}


def test_changes_group_configurations_and_skip_unknown_to_unknown():
    """Configurations that change alike share one row; an unknown whose reason names another release is no change."""
    entries = [
        config_entry("seed", False, platform, "kv_events", NO_CONNECTOR,
                     actual=outcome(error={"type": "ValueError", "stage": "config", "text": "E-B"}))
        for platform in ("cuda", "rocm", "tpu")
    ] + [
        config_entry("v0.33", False, "cuda", "kv_events", NO_CONNECTOR, actual=outcome(resolved=False)),
        config_entry("v0.33", False, "rocm", "kv_events", NO_CONNECTOR, actual=outcome(resolved=False)),
        config_entry("v0.33", False, "tpu", "kv_events", NO_CONNECTOR, actual=outcome(unknown=TPU)),
        config_entry("seed", None, "cuda", "hisparse", NO_CONNECTOR, actual=outcome(unknown="no HiSparse in 0.13.0")),
        config_entry("v0.33", None, "cuda", "hisparse", NO_CONNECTOR, actual=outcome(unknown="no HiSparse in 0.33.0")),
        config_entry("seed", False, "cuda", "none", "NixlConnector",
                     actual=outcome(error={"type": "ValueError", "stage": "config", "text": "E-B"})),
        config_entry("v0.33", False, "cuda", "none", "NixlConnector", actual=outcome(resolved=False)),
    ]
    md = render_markdown(build_document(ResultsDocument(run_info=run_info(), results=entries)))
    rows = table_after(md, "## What changed between releases")
    assert rows[1:] == [
        ["0.13.0 → 0.33.0", "❌ ValueError [1]", "✅ on", "2",
         "no connector + KV events · --enable-… · cuda, rocm; NixlConnector + no feature · --enable-… · cuda"],
        ["0.13.0 → 0.33.0", "❌ ValueError [1]", "❔ unknown [2]", "1", "no connector + KV events · --enable-… · tpu"],
    ], rows


def test_summary_counts_against_the_oracle():
    md = render_markdown(build_document(config_document()))
    assert "1 of 10 tests that ran did not behave as expected (failed or error); 1 skipped." in md
    assert table_after(md, "## Summary") == [
        ["suite", "passed", "failed", "error", "skipped", "total"],
        ["config", "9", "1", "0", "1", "11"],
    ]
    assert ("9 of 11 matrix cases agree with the oracle, 1 differ, 0 could not be evaluated (error) "
            "and 1 were skipped.") in md
    assert "- `suites/config/test_matrix.py::test_cell[seed-T-cuda-none-noconn-config]`: expected resolved False" in md


def test_the_failures_list_says_what_went_wrong_in_one_line():
    # A vendor's report listed "Failed: C31 [fa+swa+mamba]: ..." (pytest.fail's prefix) with the whole evidence.
    entry = make_entry(nodeid="test_hygiene.py::test_c31_state_hygiene[Mine-fa+swa+mamba]", suite="connector",
                       status="failed", cell={"connector": "Mine", "check": "C31 state-hygiene", "tier": "MUST",
                                              "preset": "fa+swa+mamba"},
                       message="Failed: C31 [fa+swa+mamba]: scheduler role keeps per-request state: {'requests': 33}\n"
                               "evidence: 30 random requests")
    md = render_markdown(build_document(ResultsDocument(run_info=run_info(), results=[entry])))
    assert ("- `test_hygiene.py::test_c31_state_hygiene[Mine-fa+swa+mamba]`: C31 [fa+swa+mamba]: scheduler role keeps "
            "per-request state: {'requests': 33}\n") in md


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
    assert "## Summary" not in section and "### Era seed" in section and "Notes:" in section


def test_config_tests_without_a_cell_are_no_matrix_cases():
    """A config-suite test that records no cell (the config invariants' strict xfails) shows as no era, platform or
    matrix case: the report had an 'Era none' page and a platform column 'none' for them."""
    document = config_document()
    plain = render_markdown(build_document(document))
    document.results.append(make_entry(nodeid="suites/config/test_invariants.py::test_config_invariant[INV-CFG-01-seed]",
                                       suite="config", status="skipped", message="xfail: known vLLM defect"))
    md = render_markdown(build_document(document))
    assert "Era none" not in md
    assert extract_section(md, "config") == extract_section(plain, "config")


def connector_entry(connector, check, tier, preset, status="passed", message=None, evidence=None, description="",
                    cause=None):
    return make_entry(nodeid=f"suites/connector/test_x.py::test_{check}[{connector}-{preset}]", suite="connector",
                      status=status, cell={"connector": connector, "check": check, "tier": tier, "preset": preset},
                      message=message, not_applicable=na_record(status, message),
                      skip_cause=skip_cause_record(status, message),
                      extra={"description": description or f"{check} description", "evidence": evidence,
                             **groups_record(preset), **({"cause": cause} if cause else {})})


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
        ["C01", "MUST", "C01 description", "✅ pass", "✅ pass", "✅ pass"],
        ["C02", "MUST", "C02 description", "➖ n/a [1]", "✅ pass", "❌ fail [2]"],
        ["C03", "SHOULD", "C03 description", "➖ n/a [3]", "✅ pass", "✅ pass"],
        ["C10", "SHOULD", "C10 description", "❔ unknown [4]", "❌ fail [5]", "❌ fail [6]"],
    ]
    assert footnotes(md, "## Connector conformance") == {
        "1": NOT_CAPABLE,
        "2": "C02 on preset fa+swa: block 5 of layer 2 differs",
        "3": "not applicable: no sliding window",
        "4": "C10 was not run for this connector",
        "5": "C10 on preset fa+swa: slow eviction",
        "6": 'C10 on preset fa+swa: {"block": 3}',
    }


def test_connector_hma_verdicts():
    md = render_markdown(build_document(connector_document()))
    assert ("- ➖ ExampleNonHMA does not declare `SupportsHMA`; its multi-group checks were not run, so it must "
            "pass them before it declares it.") in md
    assert ("- ✅ GoodHMA declares `SupportsHMA` and may: it passes every MUST check that applies on every "
            "multi-group preset (3 multi-group cells of 3 checks ran; SHOULD checks failing: C10).") in md
    assert ("- ❌ LMCacheLike declares `SupportsHMA` but must not: on multi-group models it fails MUST check(s) "
            "C02.") in md


REFUSED = "N/A: declares SupportsHMA, refuses multi-group models on this configuration: engine-driven mode"


RAISED = cause_record("hook-raised", hook="build_connector_meta", role="scheduler", exception="AttributeError")
DIFFERS = cause_record("expectation", site="test_data_path.test_c14_round_trip_bytes")


@pytest.mark.parametrize(("cells", "expected"), [
    # (check, preset, status, message[, the cause key its check recorded]) of a connector that declares SupportsHMA
    ([("C01", "-", "passed", None), ("C02", "fa+swa", "passed", None)],
     "✅ Vendor declares `SupportsHMA` and may: it passes every MUST check that applies on every multi-group preset "
     "(1 multi-group cell of 1 check ran)."),
    ([("C01", "-", "passed", None), ("C02", "fa+swa", "failed", None)],
     "❌ Vendor declares `SupportsHMA` but must not: on multi-group models it fails MUST check(s) C02."),
    # C01 exercises a two-group model whatever its preset cell says
    ([("C01", "-", "failed", None), ("C02", "fa+swa", "passed", None)],
     "❌ Vendor declares `SupportsHMA` but must not: on multi-group models it fails MUST check(s) C01."),
    # a single-group failure is a finding of its own, not evidence about HMA
    ([("C01", "-", "passed", None), ("C02", "fa_only", "failed", None), ("C02", "fa+swa", "passed", None)],
     "✅ Vendor declares `SupportsHMA` and may: it passes every MUST check that applies on every multi-group preset "
     "(1 multi-group cell of 1 check ran)."),
    # a cause that fails single-group models too (a crash on every step) says nothing about HMA ...
    ([("C02", "fa_only", "failed", "C02 [fa_only]: hook raised AttributeError: no field 'x' (request 12)", RAISED),
      ("C14", "fa+swa", "failed", "C14 [fa+swa]: hook raised AttributeError: no field 'x' (request 345)", RAISED)],
     "❔ Vendor declares `SupportsHMA`, but the multi-group checks it fails fail on single-group models too (hook "
     "raised AttributeError: no field 'x' (request N)), so whether it may is unknown until that is fixed."),
    # ... by the cause key the checks recorded, however the messages word it ...
    ([("C02", "fa_only", "failed", "C02 [fa_only]: hook raised AttributeError: no field 'x'", RAISED),
      ("C14", "fa+swa", "failed", "C14 [fa+swa]: build_connector_meta raised AttributeError", RAISED)],
     "❔ Vendor declares `SupportsHMA`, but the multi-group checks it fails fail on single-group models too "
     "(build_connector_meta raised AttributeError), so whether it may is unknown until that is fixed."),
    # ... while a multi-group failure with a cause of its own does, however alike the messages read
    ([("C02", "fa_only", "failed", "C02 [fa_only]: hook raised AttributeError: no field 'x'", RAISED),
      ("C14", "fa+swa", "failed", "C14 [fa+swa]: block 3 of group 1 differs", DIFFERS)],
     "❌ Vendor declares `SupportsHMA` but must not: on multi-group models it fails MUST check(s) C14."),
    ([("C02", "fa_only", "failed", "C02 [fa_only]: block 3 of group 1 differs", RAISED),
      ("C14", "fa+swa", "failed", "C14 [fa+swa]: block 3 of group 1 differs", DIFFERS)],
     "❌ Vendor declares `SupportsHMA` but must not: on multi-group models it fails MUST check(s) C14."),
    # a harness error is no evidence about the connector: beside a passing multi-group check ...
    ([("C01", "-", "passed", None), ("C02", "fa+swa", "error", None), ("C03", "fa+swa", "passed", None)],
     "✅ Vendor declares `SupportsHMA` and may: it passes every MUST check that applies on every multi-group preset "
     "(1 multi-group cell of 1 check ran)."),
    # ... and alone it exercised nothing: the declaration check C01 reads the class, not multi-group behaviour
    ([("C01", "-", "passed", None), ("C02", "fa+swa", "error", None)],
     "❔ Vendor declares `SupportsHMA`, not exercised: only the declaration check C01 ran on a multi-group model, "
     "so whether it may is unknown."),
    # issue 31: LMCacheMPConnector's ✅ on 0.33.0 rested on C01 alone, every other multi-group check N/A
    ([("C01", "-", "passed", None), ("C02", "fa+swa", "skipped", "N/A on 0.33.0: no failed_recving"),
      ("C14", "fa+swa", "skipped", "N/A on 0.33.0: no failed_recving"), ("C02", "fa_only", "passed", None)],
     "❔ Vendor declares `SupportsHMA`, not exercised: only the declaration check C01 ran on a multi-group model "
     "(2 of 2 skipped: N/A on 0.33.0: no failed_recving), so whether it may is unknown."),
    ([("C01", "-", "skipped", "cannot run here: no GPU"), ("C02", "fa+swa", "skipped", "cannot run here: no GPU")],
     "❔ Vendor declares `SupportsHMA`, not exercised: no multi-group check ran (2 of 2 skipped: cannot run here: "
     "no GPU), so whether it may is unknown."),
    ([("C01", "-", "skipped", REFUSED), ("C02", "fa+swa", "skipped", REFUSED), ("C02", "fa_only", "passed", None)],
     "➖ Vendor declares `SupportsHMA`, not exercised: it refuses multi-group models on this configuration: "
     "engine-driven mode; no multi-group check applies."),
    ([("C01", "-", "passed", None), ("C02", "fa+swa", "skipped", REFUSED), ("C02", "fa_only", "passed", None)],
     "➖ Vendor declares `SupportsHMA`, not exercised: it refuses multi-group models on this configuration: "
     "engine-driven mode; no multi-group check applies."),
])
def test_hma_verdict_of_a_declaring_connector(cells, expected):
    entries = [connector_entry("Vendor", check, "MUST", preset, status=status, message=message,
                               cause=cause[0] if cause else None)
               for check, preset, status, message, *cause in cells]
    assert hma_verdict("Vendor", entries) == expected


def test_the_shared_cause_shown_is_picked_by_its_recorded_cause_not_its_words():
    """Two causes fail single- and multi-group models alike: the verdict shows the cell of the first recorded cause,
    so rewording the messages does not change which cause it names."""
    def verdict(raised_words, differs_words):
        cells = [("C02", "fa_only", raised_words, RAISED), ("C14", "fa+swa", raised_words, RAISED),
                 ("C03", "fa_only", differs_words, DIFFERS), ("C15", "fa+swa", differs_words, DIFFERS)]
        return hma_verdict("Vendor", [connector_entry("Vendor", check, "MUST", preset, status="failed",
                                                      message=f"{check} [{preset}]: {words}", cause=cause)
                                      for check, preset, words, cause in cells])

    first = verdict("build_connector_meta raised AttributeError", "block 3 differs")
    reworded = verdict("z: build_connector_meta raised AttributeError", "a: block 3 differs")
    assert "too (build_connector_meta raised AttributeError)" in first
    assert "too (z: build_connector_meta raised AttributeError)" in reworded


def test_the_most_common_skip_is_counted_by_its_typed_record_not_its_words():
    """Two N/A cells of one record met on two releases read differently ("N/A on 0.33.0", "N/A on 0.34.0"): one
    reason, counted once, beside a reason of its own."""
    entries = [connector_entry("Vendor", "C01", "MUST", "-"),
               connector_entry("Vendor", "C02", "MUST", "fa+swa", "skipped", "N/A on 0.33.0: no failed_recving"),
               connector_entry("Vendor", "C14", "MUST", "fa+swa", "skipped", "N/A on 0.34.0: no failed_recving"),
               connector_entry("Vendor", "C03", "MUST", "fa+swa", "skipped", "cannot run here: no GPU")]
    assert hma_verdict("Vendor", entries) == (
        "❔ Vendor declares `SupportsHMA`, not exercised: only the declaration check C01 ran on a multi-group model "
        "(2 of 3 skipped: N/A on 0.33.0: no failed_recving), so whether it may is unknown.")


def test_hma_verdict_of_a_connector_that_does_not_declare_it():
    """A connector without SupportsHMA: its single-group failures say nothing about HMA, which it does not declare."""
    entries = [connector_entry("Plain", "C01", "MUST", "fa_only", status="skipped",
                               message="not HMA-capable: Plain does not declare SupportsHMA"),
               connector_entry("Plain", "C14", "MUST", "fa_only", status="failed", evidence="block 1 differs")]
    verdict = hma_verdict("Plain", entries)
    assert verdict == ("➖ Plain does not declare `SupportsHMA`; its multi-group checks were not run, so it must "
                       "pass them before it declares it.")
    assert hma_verdict("Plain", entries[:1]) == verdict


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
    assert html_table_after(page, '<h2 id="throughput">Throughput') == [
        ["workload", "implementation", "requests/s", "block ops/s", "median s", "ratio vs vLLM"],
        ["pool_churn_k1", "reference", "–", "1,300,000", "–", "❔ unknown [1]"],
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
    rows = html_table_after(page, '<h2 id="throughput">Throughput')
    assert [row[0:2] + row[-1:] for row in rows[1:]] == [
        ["stream.full", "reference", "2.30×"],
        ["stream.full", "vllm-0.33.0", "1.00×"],
    ]


def _throughput(md: str) -> str:
    return md[md.index("## Throughput"):md.index("<!-- /kvconform:section benchmark -->")] if "## Throughput" in md else ""


def test_benchmarks_not_run_are_said_once_in_the_throughput_section():
    """A run whose run_info records the benchmarks as not run (no peer importable): the throughput section says so,
    why, and the command that runs them; the summary has no benchmark row, as for any suite that did not run."""
    record = {"mode": "not run", "peer": "vllm", "peer_importable": False}
    entries = [config_entry(), make_entry(nodeid="suites/allocator/t.py::a", suite="allocator", status="passed",
                                          cell={"target": "reference", "scenario": "uniform", "section": "3 grouping"})]
    document = build_document(ResultsDocument(run_info=run_info(benchmarks=record), results=entries))
    md, page = render_markdown(document), render_html(document)
    assert _throughput(md).strip() == (
        "## Throughput\n\nThe benchmarks were not run: vLLM, the peer every figure is compared with, was not "
        "importable, so there was no ratio to show. `kvconform report --timing` runs them timed anyway (the "
        "reference's own figures, in `compatibility.html` and `results.json.gz`); the README test command runs them "
        "untimed, as tests.")
    assert md.count("The benchmarks were not run") == 1 and page.count("The benchmarks were not run") == 1
    assert [row[0] for row in table_after(md, "## Summary")[1:]] == ["allocator", "config"], "no benchmark row"
    unrecorded = build_document(ResultsDocument(run_info=run_info(), results=entries))
    assert "## Throughput" not in render_markdown(unrecorded), "no record, no entries: no section (nothing guessed)"
    timed = build_document(ResultsDocument(run_info=run_info(benchmarks={**record, "mode": "timed"}), results=entries))
    assert "## Throughput" not in render_markdown(timed), "a run that timed them but recorded nothing says nothing"


def test_benchmarks_not_run_in_merged_runs():
    """Merged shards that each left the benchmarks out say so once; beside a run that timed them, its table shows."""
    record = {"mode": "not run", "peer": "vllm", "peer_importable": False}
    runs = [run_info(benchmarks=record), run_info(benchmarks=record)]
    merged = ResultsDocument(run_info=run_info(), runs=runs, results=[config_entry()])
    assert "The benchmarks were not run: vLLM" in _throughput(render_markdown(build_document(merged)))
    figure = make_entry(nodeid="suites/benchmarks/test_b.py::a", suite="benchmark", status="passed",
                        cell={"workload": "stream.full", "implementation": "reference"},
                        extra={"metrics": {"requests_per_s": 1150.0}})
    mixed = ResultsDocument(run_info=run_info(), runs=[run_info(benchmarks=record),
                                                       run_info(benchmarks={**record, "mode": "timed"})],
                            results=[config_entry(), dict(figure, run=1)])
    throughput = _throughput(render_markdown(build_document(mixed)))
    assert "The measured figures (1 rows)" in throughput and "not run" not in throughput


def test_pipes_and_newlines_in_messages_do_not_break_tables():
    entry = config_entry(actual=outcome(error={"type": "ValueError", "stage": "config", "text": "a | b\nc"}))
    md = render_markdown(build_document(ResultsDocument(run_info=run_info(), results=[entry])))
    assert footnotes(md, "### Era seed") == {"1": "ValueError at stage config: a \\| b c"}
    assert table_after(md, "### Era seed")[1] == ["no connector", "no feature", "❌ ValueError [1]"]


def test_html_is_self_contained_and_filterable():
    page = render_html(build_document(config_document()), ["Run 1: commit 000"])
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page), "no network references"
    assert "<script>" in page and "<style>" in page, "JS and CSS are inline"
    for control in ('id="kv-f-era"', 'id="kv-f-platform"', 'id="kv-f-connector"', 'id="kv-q"',
                    'id="kv-filter-status"', 'id="kv-filter-style"'):
        assert control in page
    assert '<option value="seed">seed</option><option value="v0.33">v0.33</option>' in page
    assert ('<select id="kv-f-platform"><option value="">all</option><option value="cuda">cuda</option>'
            '<option value="rocm">rocm</option><option value="tpu">tpu</option></select>') in page, (
        "platforms in the report's order")
    assert '<section data-key="config" data-e=seed>' in page
    assert '<th data-p=tpu>tpu · auto<' in page
    assert '<th data-tag=data-c>connector<th>feature' in page and "\n<tr><td>LMCacheConnectorV1<td>no feature" in page, (
        "an era table's rows are tagged from their connector column by the script (no attribute per row)")
    assert '"data-c": {"no connector": "noconn"}' in page, "the labels that are not their connector's id"
    assert "<td data-" not in page, "only header cells carry a column's tag (the page stays small)"
    # section 4 (after the summary, "What went wrong" and the support table): its note 4, listed at its end
    assert '<td class=of>off<sup>4</sup>' in page, "the class draws the symbol; the note is its number"
    assert ('<li id="fn-4-4" value="4"><a href="../docs/rules.md#w-a1">W-A1</a> (warning): Turning off hybrid kv '
            'cache manager because <code>--kv-transfer-config</code> is set.</li>') in page
    assert '<tr data-c=LMCacheConnectorV1 data-p=rocm>' in page, (
        "a listed connector-with-feature row carries its platform for the platform filter")
    assert '<td>KV events<' in page
    assert '<td class=er>E-HISPARSE-CUDA<sup>4</sup>' in page
    assert '<li id="fn-5-4" value="4">' in page, "the v0.33 section lists its own note 4"
    assert 'config <i class=x>❌</i> E-F' in page, "a symbol inside a text is marked for the style sheet to draw"
    icons = re.search(r"<style>(.*?)</style>", page, flags=re.S).group(1)
    assert "<i class=b>🐞</i> = the outcome is that of a known vLLM defect" in page, "the defect mark is drawn too"
    for selector in ("i.y", "td.on::before", "i.x", "td.er::before", "i.o", "td.of::before", "i.b"):
        assert re.search(rf"(^|,){re.escape(selector)}[,{{][^}}]*data:image/svg\+xml", icons, flags=re.M), (
            f"{selector} draws its icon (a font may lack the emoji)")
    assert '<h3 id="era-seed">Era seed (vLLM 0.13.0)<a class="kv-anchor" href="#era-seed"' in page
    assert '<tr data-c=LMCacheConnectorV1 id=connector-LMCacheConnectorV1>' in page
    assert "**" not in page, "Markdown bold is rendered"
    assert "<strong>auto</strong>" in page and "era=0.33.0" in page, "the filter URL is documented"
    assert "Run 1: commit 000" in page


def test_html_filter_options_are_single_values():
    """A row tagged with several platforms ("cuda rocm") adds each to the filter, never the pair."""
    entries = [config_entry("seed", None, platform, "kv_events", NO_CONNECTOR, actual=outcome(resolved=True, warnings=[W1]))
               for platform in ("rocm", "cuda")]
    entries += [config_entry("v0.33", None, platform, "kv_events", NO_CONNECTOR) for platform in ("rocm", "cuda")]
    page = render_html(build_document(ResultsDocument(run_info=run_info(), results=entries)))
    assert '<tr data-e=v0.33 data-c=noconn data-p="cuda rocm">' in page
    assert 'value="cuda rocm"' not in page
    assert ('<option value="">all</option><option value="cuda">cuda</option><option value="rocm">rocm</option>'
            '</select>') in page


def _same_tables(document) -> None:
    """Every table of the Markdown report is a <table> of the HTML page, in the same order, with the same rows
    (read back by the standard library's HTML parser), and no script holds any of it."""
    page = html_page_tables(render_html(document))
    shown = [block for section in document.sections for block in section.blocks if isinstance(block, Table)]
    assert len(page.tables) == len(shown), "one <table> per table of the report"
    in_markdown = [table for table, block in zip(page.tables, shown) if not block.machine_dependent]
    # a link to another Markdown page is the same anchor on the one HTML page
    expected = [[[re.sub(r"\]\([\w.-]+\.md(#[^)\s]+)\)", r"](\1)", cell) for cell in row] for row in table]
                for table in markdown_tables(render_markdown(document))]
    assert in_markdown == expected
    assert page.scripts and all("<t" not in script and "\\u003c" not in script.lower() for script in page.scripts)
    assert sum(len(script) for script in page.scripts) < 20_000, "the script only filters and searches"


def test_html_tables_are_the_markdown_tables():
    _same_tables(build_document(config_document()))


def test_html_tables_are_the_markdown_tables_of_a_big_matrix():
    """Every era, the changes between them, the support table and the at-a-glance tables."""
    _same_tables(build_document(big_matrix(4_000)))


def test_page_script_is_valid_javascript(tmp_path):
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed (needed to syntax-check the page's script)")
    page = render_html(build_document(config_document()))
    script = page[page.index("<script>") + len("<script>"):page.rindex("</script>")]
    (tmp_path / "page.js").write_text(script)
    done = subprocess.run([node, "--check", str(tmp_path / "page.js")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_a_cell_a_known_vllm_defect_produced_is_marked_with_the_defect_and_its_fix():
    """A matrix entry noting a reviewed defect (suites/config/test_matrix.py records them): 🐞 beside the outcome
    and the defect's line as the cell's note; the same outcome without the note stays unmarked."""
    defect = {"id": "VLLM-CFG-01", "sentence": "a KV events config turns HMA off", "fixed_in": "0.20.0"}
    marked = config_entry(features="kv_events", actual=outcome(resolved=True))
    marked["extra"] = {"defects": [defect]}
    plain = config_entry(platform="rocm", features="kv_events", actual=outcome(resolved=True))
    md = render_markdown(build_document(ResultsDocument(run_info=run_info(), results=[marked, plain])))
    rows = table_after(md, "### Era seed (vLLM 0.13.0)")
    assert rows[1][1:] == ["KV events", "⚪ off 🐞 [1]", "⚪ off"]
    assert footnotes(md, "### Era seed (vLLM 0.13.0)") == {
        "1": "known vLLM defect VLLM-CFG-01: a KV events config turns HMA off (fixed in 0.20.0)"}


def test_a_short_row_tags_nothing_from_its_missing_column():
    """A row with fewer cells than the header keeps its own tags (no column can name them) and renders."""
    table = Table(["connector", "platform"], [["a", "cuda"], ["a"]],
                  row_filters=[{"platform": "cuda"}, {"platform": "rocm"}], search=True)
    page = render_html(Document("t", "run", [Section("config", [table])]))
    assert "\n<tr data-p=cuda><td>a<td>cuda\n<tr data-p=rocm><td>a</tbody>" in page
