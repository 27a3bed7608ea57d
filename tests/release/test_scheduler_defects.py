"""The reviewed vLLM scheduler defects (`harness/release/vllm_scheduler_defects.toml`) load, carry their evidence,
and `python -m harness.release.scheduler_defects` tells a run that fails exactly them from one that differs."""

from __future__ import annotations

import json

import pytest

from harness.release.scheduler_defects import ASYNC_CHECKS, compare, load_defects, main
from harness.connector_checks import CHECKS


def _entry(release: str, check: str, connector: str, preset: str, status: str, engine: str = "vllm") -> dict:
    cell = {"connector": f"vllm-{release}:{connector}", "check": f"{check} {CHECKS[check].name}", "tier": "MUST",
            "preset": preset, "engine": engine}
    return {"id": f"suites/connector/test_async_scheduling.py::x[{connector}-{preset}]", "suite": "connector",
            "cell": cell, "status": status}


def test_every_defect_names_an_async_check_releases_and_source_lines():
    defects = load_defects()
    assert defects
    for defect in defects:
        assert defect.invariant in ASYNC_CHECKS and defect.failing and defect.fixed_in
        assert "scheduler.py" in defect.evidence and "vllm-project/vllm#" in defect.upstream
        assert not set(defect.failing) & set(defect.passing)
        assert defect.describe().startswith(f"known vLLM defect {defect.id} ({defect.invariant}): ")


def test_a_run_failing_exactly_the_reviewed_cells_matches():
    entries = [_entry("0.13.0", "C42", "ExampleConnector", "fa_only", "failed"),
               _entry("0.13.0", "C43", "ExampleConnector", "fa_only", "skipped"),
               _entry("0.13.0", "C14", "ExampleConnector", "fa_only", "failed")]  # not an async check: not judged
    assert compare(entries, load_defects()) == []


def test_an_unreviewed_failure_and_a_defect_that_stopped_failing_are_differences():
    entries = [_entry("0.13.0", "C42", "ExampleConnector", "fa_only", "passed"),
               _entry("0.34.0", "C43", "OffloadingConnector", "fa+swa", "failed")]
    lines = compare(entries, load_defects())
    assert any(line.startswith("known defect DEF-SCHED-01 did not fail on vLLM 0.13.0 (passed)") for line in lines)
    assert any("unreviewed failure on vLLM 0.34.0: C43 [OffloadingConnector-fa+swa]" in line for line in lines)
    # kvconform's own engine is not vLLM's scheduler: its cells are not judged here.
    assert compare([_entry("0.34.0", "C42", "OffloadingConnector", "fa_only", "failed", engine=None)],
                   load_defects()) == []


def test_command_exit_codes(tmp_path, capsys):
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"format": "kvconform-results", "schema_version": 1, "run_info": {},
                                   "results": [_entry("0.34.0", "C42", "OffloadingConnector", "fa_only", "failed")]}))
    assert main([str(results)]) == 1
    assert "unreviewed failure on vLLM 0.34.0" in capsys.readouterr().out
    assert main([str(tmp_path / "missing.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "missing.json" in err, err
    with pytest.raises(SystemExit):
        main([])


def test_the_engine_section_marks_a_cell_a_reviewed_defect_explains():
    from harness.report.engine_section import engine_sections
    from harness.report.markdown import render_markdown
    from harness.report.model import Document

    ours = _entry("0.13.0", "C42", "ExampleConnector", "fa_only", "passed", engine=None)
    theirs = _entry("0.13.0", "C42", "ExampleConnector", "fa_only", "failed")
    del ours["cell"]["engine"]
    theirs["extra"] = {"evidence": "C42 [fa_only]: C42: block 33 ..."}
    text = render_markdown(Document("report", "one run", engine_sections([ours, theirs])))
    row = next(line for line in text.splitlines() if "C42 in-flight-blocks-kept" in line)
    assert "known vLLM defect DEF-SCHED-01 (C42): " in row and "(fixed in 0.32.0); C42 [fa_only]: C42: block 33" in row


def test_a_kvconform_connectors_cells_are_judged_on_the_release_given():
    cell = _entry("0.34.0", "C43", "LMCacheLikeConnector", "fa_only", "failed")
    cell["cell"]["connector"] = "LMCacheLikeConnector"  # a built-in's cells name no release
    assert compare([cell], load_defects()) == []  # no release given: not judged
    assert compare([cell], load_defects(), "0.34.0") == [
        "unreviewed failure on vLLM 0.34.0: C43 [LMCacheLikeConnector-fa_only] under --kv-engine vllm"]
