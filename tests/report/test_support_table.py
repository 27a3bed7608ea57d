"""The support table of deployable connectors and the resolver's cases (issue 32), on a small hand-made input.

Every expected cell below is written by hand from the input (and, for LMCacheMPConnector with lmcache 0.5.6, from
the reviewed fact measured on vLLM 0.33.0: its class subclasses SupportsHMA; vLLM 0.13.0's in-tree class does not);
none is computed by the code under test.
"""

from __future__ import annotations

import json

import pytest

from harness.report.connector_runs import RunFileError, RunVerdict, combined_runs, load_runs, parse_runs
from harness.report.markdown import render_markdown
from harness.report.model import Document
from harness.report.support_section import release_range, support_sections
from harness.results_model import ResultsDocument, make_entry
from tests.report.md_helpers import footnotes, table_after
from tests.report.synthetic import config_entry, groups_record, outcome, run_info

NIXL_E_F = "Connector NixlConnector does not support HMA but HMA is enabled."
LMCACHE_MISSING = "No module named 'lmcache'"
TPU = "TPU support comes from tpu_inference"


def _error(message: str, kind: str = "ValueError") -> dict:
    return outcome(error={"type": kind, "stage": "create_connector", "message": message})


def _enable(era: str, connector: str, actual: dict, platform: str = "cuda") -> dict:
    return config_entry(era, False, platform, "none", connector, stage="create_connector", actual=actual)


def small_input() -> list[dict]:
    """Three eras (seed alone; v0.33 and v0.34 next to each other), two registered connectors, two resolver cases."""
    return [
        _enable("seed", "NixlConnector", _error(NIXL_E_F)),
        _enable("v0.33", "NixlConnector", outcome(resolved=False)),
        _enable("v0.34", "NixlConnector", outcome(resolved=False)),
        _enable("v0.34", "NixlConnector", outcome(unknown=TPU), platform="tpu"),
        _enable("seed", "LMCacheMPConnector", _error(LMCACHE_MISSING, "ModuleNotFoundError")),
        _enable("v0.33", "LMCacheMPConnector", _error(LMCACHE_MISSING, "ModuleNotFoundError")),
        _enable("v0.34", "LMCacheMPConnector", _error(LMCACHE_MISSING, "ModuleNotFoundError")),
        _enable("v0.34", "FooConnector", _error("Unsupported connector type: FooConnector")),
        _enable("v0.34", "ExternalTwoArg", _error(
            "Connector ExternalTwoArgConnector uses deprecated 2-argument constructor signature. External v1 KV "
            "connectors must accept kv_cache_config as the third constructor argument and pass it to "
            "super().__init__().")),
        # a feature row and an auto flag are no support cells
        config_entry("v0.34", None, "cuda", "none", "NixlConnector", stage="create_connector",
                     actual=outcome(resolved=True)),
    ]


RUNS = [
    RunVerdict("NixlConnector", "0.33.0", "pass", "", "docs/x.md#nixl-033"),
    RunVerdict("NixlConnector", "0.34.0", "fail", "a cause", "docs/x.md#nixl-034"),
    RunVerdict("LMCacheMPConnector", "0.34.0", "fail", "reads a removed field", "docs/y.md#lmcache", "lmcache 0.5.6"),
    RunVerdict("LMCacheMPConnector", "0.13.0", "pass", "", "docs/y.md#old"),  # its config refuses HMA: not shown
]


def _markdown(entries, runs=RUNS) -> str:
    return render_markdown(Document("t", "run", support_sections(entries, runs)))


def test_support_table_golden():
    md = _markdown(small_input())
    assert table_after(md, "## Which connector runs with HMA: the support table") == [
        ["connector", "comes from", "cuda", "tpu"],
        ["LMCacheMPConnector", "LMCache, through vLLM (`lmcache`)",
         "config, with lmcache 0.5.6: ✅ on [0.33.0–0.34.x](#era-v0.33); ❌ E-F [0.13.x](#era-seed) · "
         "run ❌ [0.34.0](../docs/y.md#lmcache) [reads a removed field] [1,2]",
         "not run [3]"],
        ["NixlConnector", "vLLM",
         "config ✅ on [0.33.0–0.34.x](#era-v0.33); ❌ E-F [0.13.x](#era-seed) · run ✅ [0.33.0](../docs/x.md#nixl-033)"
         " · run ❌ [0.34.0](../docs/x.md#nixl-034) [a cause] [4]",
         "config ❔ unknown [0.34.x](#era-v0.34) [5]"],
    ], "newest release first; a missing optional package answered as installed; runs only where HMA is on"
    notes = footnotes(md, "## Which connector runs with HMA")
    assert notes["1"].startswith("[E-NO-LMCACHE](../docs/rules.md#e-no-lmcache): the modelled install lacks the "
                                 "optional package `lmcache`"), notes["1"]
    assert "\"with lmcache 0.5.6\": the answer for a deployment that has lmcache 0.5.6" in notes["1"]
    assert "`kvconform explain --installed lmcache ...`" in notes["1"]
    assert "Connector LMCacheMPConnector does not support HMA" in notes["2"]
    assert notes["4"] == f"[E-F](../docs/rules.md#e-f): ValueError at stage create_connector: {NIXL_E_F}"
    assert notes["5"] == f"unknown: {TPU}"
    assert "❌ refused (E-NO-LMCACHE)" not in md and "E-NO-LMCACHE [" not in md, "a missing package is no refusal"


def test_newest_releases_at_a_glance():
    """Which connectors keep HMA on with an explicit enable on the newest two releases, per platform (issue 32's
    'which connectors run with HMA on ROCm on 0.33.0'), with their runs on that release."""
    md = _markdown(small_input())
    lines = md[md.index("**The newest releases at a glance**"):].split("\n\n")[1].splitlines()
    assert lines == [
        "- **0.34.x** ([tables](#era-v0.34)): cuda: LMCacheMPConnector (with lmcache 0.5.6, run ❌ 0.34.0), "
        "NixlConnector (run ❌ 0.34.0); tpu: none",
        "- **0.33.x** ([tables](#era-v0.33)): cuda: LMCacheMPConnector (with lmcache 0.5.6), NixlConnector "
        "(run ✅ 0.33.0); tpu: none",
    ]
    assert md.index("**The newest releases at a glance**") < md.index("| connector | comes from |")


def test_resolver_cases_are_apart_from_the_support_table():
    md = _markdown(small_input())
    support = table_after(md, "## Which connector runs with HMA: the support table")
    cases = table_after(md, "### The resolver's cases")
    assert [row[0] for row in support[1:]] == ["LMCacheMPConnector", "NixlConnector"]
    assert cases == [
        ["configuration", "what it tests", "cuda", "tpu"],
        ["external, 2-arg constructor", "an out-of-tree connector with the old two-argument constructor (no "
         "`kv_cache_config`), not `SupportsHMA`", "config ❌ E-TWO-ARG [0.34.x](#era-v0.34) [6]", "not run [3]"],
        ["FooConnector", "a connector name no release registers", "config – not registered [0.34.x](#era-v0.34)",
         "not run [3]"],
    ]
    for case in ("FooConnector", "external, 2-arg constructor"):
        assert all(case not in cell for row in support for cell in row), f"{case} is a resolver case"


def test_every_resolver_fixture_of_the_matrix_stays_out_of_the_support_table():
    """The matrix's lookup-precedence, bad-mode and unknown-name configurations (issue 32's examples) are no row."""
    fixtures = ["LMCacheConnectorV1ByPath", "NixlBadMode", "MultiBadGrandchild", "ExternalTwoArg", "FooConnector",
                "MultiConnector", "MultiMixed", "NoRole", "RenamedMulti", "ExternalHMA", "NixlPush", "MultiAllHMA"]
    entries = [_enable("v0.34", fixture, outcome(resolved=False)) for fixture in fixtures]
    entries.append(_enable("v0.34", "OffloadingConnector", outcome(resolved=False)))
    md = _markdown(entries, runs=[])
    support = table_after(md, "## Which connector runs with HMA: the support table")
    assert [row[0] for row in support[1:]] == ["MultiConnector", "OffloadingConnector"], (
        "MultiConnector's row is its deployed form (HMA-capable children), the bare name's fixture is a case")
    assert "configured as: `MultiConnector` whose two children are `SupportsHMA`" in md
    cases = [row[0] for row in table_after(md, "### The resolver's cases")[1:]]
    assert cases == ["connector without kv_role", "external, 2-arg constructor", "external, SupportsHMA",
                     "FooConnector", "LMCacheConnectorV1 by module path", "MultiConnector, HMA + non-HMA child",
                     'MultiConnector, no "connectors" key', "Nixl, push mode", "Nixl, unknown mode",
                     "renamed MultiConnector subclass", "unknown grandchild"]


def test_release_ranges():
    assert release_range("seed", "v0.20") == "0.13.0–0.20.x"
    assert release_range("v0.33", "v0.33") == "0.33.x"
    assert release_range("v0.10", "v0.10") == "0.10.x", "v0.11 starts at 0.11.0"
    assert release_range("v0.10", "v0.11") == "0.10.0–0.11.0"
    assert release_range("v0.11", "v0.11") == "0.11.0", "0.11.0 alone: pre-seed starts at 0.11.1"
    assert release_range("v0.33", "v0.34") == "0.33.0–0.34.x"


def test_runs_from_merged_results_fill_releases_the_reviewed_file_lacks():
    """A results file merged from the CI job carries `vllm-<release>:<Name>` connector entries."""
    def entry(status, preset="fa+swa", check="C05 lookup-none-then-value", message=None):
        return make_entry(nodeid=f"suites/connector/test_lookup.py::t[{check}-{preset}]", suite="connector",
                          status=status, message=message,
                          cell={"connector": "vllm-0.35.0:NixlConnector", "check": check, "preset": preset,
                                "tier": "MUST"},
                          extra={"declares_hma": True, **groups_record(preset)})
    runs = combined_runs([entry("passed")], RUNS)
    assert [(r.release, r.verdict) for r in runs["NixlConnector"]] == [("0.33.0", "pass"), ("0.34.0", "fail"),
                                                                       ("0.35.0", "pass")], runs
    assert runs["NixlConnector"][2].evidence == "#vllm-connectors-0.35.0"
    reviewed = [RunVerdict("NixlConnector", "0.35.0", "fail", "reviewed", "docs/z.md")]
    assert combined_runs([entry("passed")], reviewed)["NixlConnector"][0].cause == "reviewed", "the reviewed file wins"


@pytest.mark.parametrize("document, message", [
    ({"runs": [{"connector": "X", "release": "0.34", "verdict": "pass"}]}, "runs[0].release: '0.34' is not accepted"),
    ([{"connector": "X", "release": "0.34.0", "verdict": "great"}], "runs[0].verdict: 'great' is not accepted; "
                                                                     "expected one of pass, fail"),
    ([{"release": "0.34.0", "verdict": "pass"}], "runs[0].connector: None is not accepted"),
    ({"runs": 3}, "runs: int is not accepted"),
])
def test_bad_run_file_names_the_field(document, message):
    with pytest.raises(RunFileError, match=None) as raised:
        parse_runs(document)
    assert message in str(raised.value)


def test_run_file_accepts_the_summary_spellings(tmp_path):
    path = tmp_path / "runs.json"
    path.write_text(json.dumps([{"connector": "X", "release": "0.34.0", "verdict": "Failed", "cause": "c",
                                 "evidence": "docs/a.md", "with": "lmcache 0.5.6", "extra": 1}]))
    assert load_runs(path) == [RunVerdict("X", "0.34.0", "fail", "c", "docs/a.md", "lmcache 0.5.6")]


def test_committed_run_file_is_valid_and_points_at_existing_docs():
    from pathlib import Path

    from harness.report.connector_runs import committed_runs

    repo = Path(__file__).resolve().parents[2]
    assert load_runs(), "harness/report/connector_runs.json has records"
    runs = committed_runs()  # and the rejudged verdict files, where they are committed
    for run in runs:
        path = run.evidence.split("#", 1)[0]
        assert not path or (repo / path).exists(), f"{run.connector} {run.release}: evidence {run.evidence} is missing"


def test_the_support_table_answers_the_newcomers_questions():
    """Issue 32's 'Done when', read from the support table of the report built on the input above."""
    md = _markdown(small_input())
    rows = {row[0]: row for row in table_after(md, "## Which connector runs with HMA: the support table")}
    header = table_after(md, "## Which connector runs with HMA: the support table")[0]
    cuda = header.index("cuda")
    # does LMCache's MP connector work with HMA on vLLM 0.34.0 on CUDA? config yes (with lmcache), run fails
    assert "✅ on [0.33.0–0.34.x]" in rows["LMCacheMPConnector"][cuda]
    assert "run ❌ [0.34.0]" in rows["LMCacheMPConnector"][cuda]
    # what --enable-hybrid-kv-cache-manager does with NixlConnector on 0.34.0: HMA on
    assert rows["NixlConnector"][cuda].startswith("config ✅ on [0.33.0–0.34.x]")


def test_build_document_puts_the_support_table_before_the_matrix():
    md = render_markdown(__import__("harness.report.build", fromlist=["build_document"]).build_document(
        ResultsDocument(run_info=run_info(), results=small_input())))
    assert md.index("## Which connector runs with HMA") < md.index("## Config resolution matrix")


def test_rejudged_verdict_files_plug_in_and_win(tmp_path):
    """The rejudge's per-release files (`docs/vllm-connector-verdicts/<release>.json`, format
    kvconform-vllm-connector-verdicts/1) are read as run verdicts; they win over the committed run-verdict file."""
    from harness.report.connector_runs import load_verdict_files

    folder = tmp_path / "docs" / "vllm-connector-verdicts"
    folder.mkdir(parents=True)
    (folder / "0.34.0.json").write_text(json.dumps({
        "format": "kvconform-vllm-connector-verdicts/1", "release": "0.34.0", "connectors": [
            {"connector": "NixlConnector", "engine": "kvconform", "block": "deployed", "verdict": "pass",
             "symbol": "✅", "cause": ""},
            {"connector": "NixlConnector", "engine": "vllm", "verdict": "fail", "cause": "vLLM's scheduler row"},
            {"connector": "FlexKVConnectorV1", "engine": "kvconform", "verdict": "cannot-run",
             "cause": "cannot run here: needs flexkv"},
            {"connector": "ExampleConnector", "engine": "kvconform", "verdict": "no-hma", "cause": "x"},
            {"connector": "LMCacheMPConnector", "engine": "kvconform", "verdict": "unknown",
             "cause": "reads a removed field", "cells": {"passed": 0, "failed": 51}}]}))
    (folder / "notes.json").write_text("{}")  # another JSON file there is not a verdict file
    runs = load_verdict_files(folder)
    evidence = "docs/vllm-connector-verdicts/0.34.0.json"
    assert runs == [RunVerdict("NixlConnector", "0.34.0", "pass", "", evidence),
                    RunVerdict("FlexKVConnectorV1", "0.34.0", "not-run", "cannot run here: needs flexkv", evidence),
                    RunVerdict("ExampleConnector", "0.34.0", "not-exercised", "x", evidence),
                    RunVerdict("LMCacheMPConnector", "0.34.0", "fail", "fails on every model, single-group too (51 "
                               "cells): reads a removed field", evidence)], "HMA unknown but crashing: a failed run"
    md = _markdown(small_input(), RUNS + runs)
    nixl = next(row for row in table_after(md, "## Which connector runs with HMA") if row[0] == "NixlConnector")
    assert "run ✅ [0.33.0](../docs/x.md#nixl-033), [0.34.0](../docs/vllm-connector-verdicts/0.34.0.json)" in nixl[2]
    assert "a cause" not in nixl[2], "the rejudged verdict replaced the committed one"
    (folder / "0.35.0.json").write_text(json.dumps({"format": "kvconform-vllm-connector-verdicts/1",
                                                    "release": "0.35", "connectors": []}))
    with pytest.raises(RunFileError, match="release: '0.35' is not accepted"):
        load_verdict_files(folder)


def test_a_vendor_connector_given_with_kv_connector_gets_a_row():
    """A connector the suite ran with --kv-connector MODULE:CLASS (neither kvconform's nor vLLM's) is a row: its
    config is the matrix's out-of-tree connector that declares SupportsHMA as it does, its run kvconform's engine."""
    def cell(check, preset, status="passed"):
        return make_entry(nodeid=f"suites/connector/test_lookup.py::t[{check}-{preset}]", suite="connector",
                          status=status, cell={"connector": "acme.kv:AcmeConnector", "check": check,
                                               "preset": preset, "tier": "MUST"},
                          extra={"declares_hma": True, **groups_record(preset)})
    entries = small_input() + [
        _enable("seed", "ExternalHMA", outcome(resolved=False)), _enable("v0.34", "ExternalHMA", outcome(resolved=False)),
        cell("C05 lookup-none-then-value", "fa+swa"), cell("C05 lookup-none-then-value", "fa_only"),
        # kvconform's own connector is no row
        make_entry(nodeid="suites/connector/test_lookup.py::t[C05-fa+swa-ref]", suite="connector", status="passed",
                   cell={"connector": "LMCacheLikeConnector", "check": "C05 lookup-none-then-value",
                         "preset": "fa+swa", "tier": "MUST"}, extra={"declares_hma": True, **groups_record("fa+swa")})]
    md = _markdown(entries, runs=[])
    rows = {row[0]: row for row in table_after(md, "## Which connector runs with HMA")[1:]}
    assert set(rows) == {"LMCacheMPConnector", "NixlConnector", "acme.kv:AcmeConnector"}
    assert rows["acme.kv:AcmeConnector"][1:3] == [
        "vendor (`--kv-connector`)",
        "config ✅ on [0.34.x](#era-v0.34); ✅ on [0.13.x](#era-seed) · run ✅ kvconform's engine [6,7]"]
    notes = footnotes(md, "## Which connector runs with HMA")
    assert notes["6"].startswith("config: acme.kv:AcmeConnector declares `SupportsHMA`, so this is the matrix's "
                                 "external, SupportsHMA")
    assert notes["7"].startswith("run: ✅ acme.kv:AcmeConnector declares `SupportsHMA` and may")
