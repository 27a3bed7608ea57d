"""The run verdicts file of vLLM's connectors (`harness.report.vllm_verdicts`) on hand-made results: each connector's
verdict word, root causes and checks that ran; a ✅ only where multi-group checks ran; the README tables put vLLM's
example connectors apart; a results file of two releases, or a file of another format, is refused in one line."""

from __future__ import annotations

import json

import pytest

from harness.errors import UsageError
from harness.failure_causes import cause_record
from harness.report.vllm_verdicts import (BEGIN, END, FORMAT, main, readme_tables, verdicts,
                                          write_between_markers)
from tests.report.test_vllm_findings import entry


def _entries():
    raised = cause_record("hook-raised", hook="start_load_kv", role="worker", exception="FileNotFoundError")
    return [
        entry("OffloadingConnector", "C14 round-trip-bytes", "passed", preset="fa+swa"),
        entry("OffloadingConnector", "C01 declares-hma", "passed", preset="fa+swa"),
        entry("SimpleCPUOffloadConnector", "C01 declares-hma", "passed", preset="fa+swa"),
        entry("SimpleCPUOffloadConnector", "C14 round-trip-bytes", "skipped", preset="fa+swa",
              message="N/A: C14 does not apply here"),
        entry("ExampleConnector", "C16 ownership-fence", "failed", message="C16 [fa_only]: it raised", cause=raised),
        entry("NixlConnector", "C14 round-trip-bytes", "skipped", message="cannot run here: NixlConnector needs NIXL"),
        entry("MooncakeConnector", "C14 round-trip-bytes", "skipped",
              message="not applicable: MooncakeConnector needs a model none of the presets is"),
    ]


def _by_name(data):
    return {(r["connector"], r["engine"]): r for r in data["connectors"]}


def test_each_connector_gets_its_verdict_causes_and_checks():
    data = verdicts(_entries(), ["results-connectors.json"], "abc")
    assert data["format"] == FORMAT and data["release"] == "0.33.0" and data["suite_commit"] == "abc"
    rows = _by_name(data)
    offloading = rows[("OffloadingConnector", "kvconform")]
    assert offloading["verdict"] == "pass" and offloading["multi_group_checks_ran"] == ["C14"]
    assert offloading["block"] == "deployed" and offloading["cells"]["passed"] == 2
    simple = rows[("SimpleCPUOffloadConnector", "kvconform")]
    assert simple["verdict"] != "pass", "only the declaration check ran on a multi-group model: no ✅"
    example = rows[("ExampleConnector", "kvconform")]
    assert example["block"] == "example" and example["cause"] == "lookup and load keys disagree"
    assert example["findings"] == [{"root": "lookup and load keys disagree", "verdict": "connector bug",
                                    "upstream": "", "checks": ["C16"], "cells": 1}]
    nixl = rows[("NixlConnector", "kvconform")]
    assert nixl["verdict"] == "cannot-run" and nixl["cause"].startswith("cannot run here")
    mooncake = rows[("MooncakeConnector", "kvconform")]  # a typed N/A (kind feature) of every check
    assert mooncake["verdict"] == "not-applicable" and mooncake["cause"].endswith("needs a model none of the presets is")


def test_the_readme_tables_keep_example_connectors_apart_and_releases_side_by_side():
    older = verdicts(_entries(), ["r.json"], None)
    newer = json.loads(json.dumps(older))
    newer["release"] = "0.34.0"
    text = readme_tables([older, newer])
    deployed, examples = text.split("vLLM's example connectors", 1)
    assert "| OffloadingConnector | ✅ declares HMA and may (1 multi-group checks ran on fa+swa only); 0 failed |" in deployed
    assert "ExampleConnector" not in deployed and "NixlConnector" not in text
    assert "0.33.0: HMA verdict" in deployed and "0.34.0: HMA verdict" in deployed
    row = next(line for line in examples.splitlines() if line.startswith("| ExampleConnector |"))
    assert row.count("1 failed: lookup and load keys disagree") == 2, row


def test_one_release_per_file_and_a_clear_error_otherwise(tmp_path, capsys):
    mixed = _entries() + [entry("OffloadingConnector", "C14 round-trip-bytes", "passed", release="0.34.0")]
    with pytest.raises(UsageError, match="one vLLM release"):
        verdicts(mixed, ["r.json"], None)
    bad = tmp_path / "v.json"
    bad.write_text('{"format": "something else"}')
    assert main(["readme", str(bad)]) == 2
    assert "format is 'something else'" in capsys.readouterr().err


def test_write_replaces_only_the_text_between_the_markers(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"before\n{BEGIN}\nold\n{END}\nafter\n")
    write_between_markers(str(readme), "new table\n")
    assert readme.read_text() == f"before\n{BEGIN}\nnew table\n{END}\nafter\n"
    (tmp_path / "plain.md").write_text("no markers\n")
    with pytest.raises(UsageError, match="lacks the markers"):
        write_between_markers(str(tmp_path / "plain.md"), "x")
