"""The reviewed allocator findings on vLLM releases: the data file itself, and comparing a run with it.

Runs are written here (the oracle is the construction: which cell failed on which release), never produced
by the comparison under test.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from harness.errors import UsageError
from harness.release.allocator_findings import (AllocatorDefect, AllocatorFinding, compare, defect_for_cell,
                                                load_defects, load_findings, main, release_of)

REPO = Path(__file__).resolve().parents[2]
BUGGY = AllocatorFinding("suites/allocator/test_x.py::test_hit[full+swa]", ("0.13.0",), ("0.20.0",),
                         "root", "evidence", "vllm-project/vllm#1")


def _entry(test_id: str, status: str, release: str | None) -> dict:
    cell = {"target": f"vllm-{release}", "scenario": test_id.split("::")[-1]} if release else None
    return {"id": test_id, "suite": "allocator", "cell": cell, "status": status}


def _run(release: str, failing: set[str], passing: set[str] = frozenset({"suites/allocator/test_x.py::test_ok"})):
    return [_entry(t, "failed", release) for t in failing] + [_entry(t, "passed", release) for t in passing] \
        + [_entry("suites/allocator/test_x.py::test_na", "skipped", None)]  # an N/A skip records no target


def test_a_run_failing_exactly_its_reviewed_findings_has_no_difference():
    assert compare(_run("0.13.0", {BUGGY.test}), [BUGGY]) == ("0.13.0", [])


def test_an_unreviewed_failure_is_one_line_naming_the_test_and_release():
    _, lines = compare(_run("0.13.0", {BUGGY.test, "suites/allocator/test_x.py::test_new"}), [BUGGY])
    assert lines == ["unreviewed failure on vLLM 0.13.0: suites/allocator/test_x.py::test_new"], lines


def test_a_reviewed_finding_that_passes_is_reported():
    _, lines = compare(_run("0.13.0", set(), {BUGGY.test}), [BUGGY])
    assert lines == [f"reviewed finding did not fail on vLLM 0.13.0 (passed): {BUGGY.test}"], lines


def test_a_finding_does_not_excuse_the_same_test_on_another_release():
    _, lines = compare(_run("0.20.0", {BUGGY.test}), [BUGGY])
    assert lines == [f"unreviewed failure on vLLM 0.20.0: {BUGGY.test}"], lines


@pytest.mark.parametrize("targets", [["reference"], ["vllm-0.13.0", "vllm-0.33.0"], []])
def test_a_run_that_is_not_one_vllm_release_is_refused(targets):
    entries = [{"id": f"t{i}", "suite": "allocator", "cell": {"target": t}, "status": "passed"}
               for i, t in enumerate(targets)]
    with pytest.raises(UsageError, match="expected one vLLM release"):
        release_of(entries)


def test_the_command_exits_1_on_a_difference_and_2_on_a_bad_file(tmp_path, capsys):
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"format": "kvconform-results", "schema_version": 1, "run_info": {},
                                "results": _run("9.9.9", {"suites/allocator/test_x.py::test_new"})}))
    assert main([str(path)]) == 1
    assert "unreviewed failure on vLLM 9.9.9" in capsys.readouterr().out
    assert main([str(tmp_path / "missing.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "missing.json" in err, err


def test_a_malformed_entry_names_the_entry_and_the_accepted_fields(tmp_path):
    path = tmp_path / "findings.toml"
    path.write_text('[[finding]]\ntest = "x"\nfailing = []\nwhen = "now"\n')
    with pytest.raises(UsageError, match=r"finding 1: missing \['passing', 'root', 'evidence', 'upstream'\], "
                                         r"unknown \['when'\]; accepted fields"):
        load_findings(path)


@pytest.mark.parametrize("finding", load_findings(), ids=lambda f: f.test.split("::")[-1])
def test_each_reviewed_finding_names_an_existing_scenario_and_measured_releases(finding):
    path, _, name = finding.test.partition("::")
    function, _, param = name.partition("[")
    source = (REPO / path).read_text(encoding="utf-8")
    functions = {n.name for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef)}
    assert function in functions, f"{finding.test}: no test function {function} in {path}"
    if param:
        assert repr(param.rstrip("]")) in source or f'"{param.rstrip("]")}"' in source, \
            f"{finding.test}: the parameter id {param.rstrip(']')} is not written in {path}"
    releases = finding.failing + finding.passing
    assert all(re.fullmatch(r"\d+\.\d+\.\d+", r) for r in releases), f"{finding.test}: releases {releases}"
    assert finding.failing and not set(finding.failing) & set(finding.passing), \
        f"{finding.test}: a release is measured failing and passing: {finding.failing} / {finding.passing}"


def test_the_report_marks_a_reviewed_finding_and_only_on_its_release():
    from harness.report.allocator_section import allocator_sections
    from harness.report.model import BulletList

    finding = load_findings()[0]

    def failing_items(release):
        cell = {"target": f"vllm-{release}", "scenario": finding.test.split("::")[-1], "section": "4"}
        entry = {"id": finding.test, "suite": "allocator", "cell": cell, "status": "failed", "message": "assert 24 == 28"}
        blocks = allocator_sections([entry])[0].blocks
        return [item for b in blocks if isinstance(b, BulletList) for item in b.items]

    [item] = failing_items(finding.failing[0])
    assert f"(reviewed vLLM bug: {finding.root}; upstream: {finding.upstream})" in item, item
    [item] = failing_items("99.0.0")
    assert "reviewed" not in item, f"a release the finding does not list gets no reviewed mark: {item}"


# ------------------------------------------------------------------------------------ invariant defects
DEFECT = AllocatorDefect("DEF-KV-99", "INV-KV-08", "tenants share hits", {"0.13.0": ("full",)}, ("0.31.0",),
                         "0.31.0", "evidence", "vllm-project/vllm#1")
CELL = "suites/allocator/test_invariants.py::test_invariant[INV-KV-08-full]"


def test_an_expected_defect_cell_that_xfails_has_no_difference():
    entries = _run("0.13.0", set()) + [{**_entry(CELL, "skipped", "0.13.0"), "message": "xfail: known vLLM defect"}]
    assert compare(entries, [], [DEFECT]) == ("0.13.0", [])


@pytest.mark.parametrize("status", ["failed", "passed"])
def test_an_expected_defect_cell_that_passes_is_news(status):
    # A strict xfail that passes is reported as failed by pytest ("[XPASS(strict)]").
    _, lines = compare(_run("0.13.0", set()) + [_entry(CELL, status, "0.13.0")], [], [DEFECT])
    assert lines == [f"known defect DEF-KV-99 did not fail on vLLM 0.13.0 ({status}): {CELL}"], lines


def test_a_defect_does_not_excuse_its_cell_on_another_release_or_layout():
    other = CELL.replace("-full]", "-full+swa]")
    _, lines = compare(_run("0.31.0", {CELL}) + [_entry(other, "failed", "0.31.0")], [], [DEFECT])
    assert sorted(lines) == sorted([f"unreviewed failure on vLLM 0.31.0: {CELL}",
                                    f"unreviewed failure on vLLM 0.31.0: {other}"]), lines


def test_the_xfail_reason_names_the_defect_and_its_fix():
    assert DEFECT.describe() == "known vLLM defect DEF-KV-99 (INV-KV-08): tenants share hits (fixed in 0.31.0)"
    assert defect_for_cell("INV-KV-08", "full", "0.13.0", [DEFECT]) is DEFECT
    assert defect_for_cell("INV-KV-08", "full", "0.31.0", [DEFECT]) is None


def test_a_malformed_defect_names_the_entry_and_the_accepted_fields(tmp_path):
    path = tmp_path / "defects.toml"
    path.write_text('[[defect]]\nid = "D"\nfailing = ["0.13.0"]\n')
    with pytest.raises(UsageError, match=r"defect 1: missing \['invariant', 'sentence', 'passing', 'fixed_in', "
                                         r"'evidence', 'upstream'\], unknown nothing"):
        load_defects(path)


@pytest.mark.parametrize("defect", load_defects(), ids=lambda d: d.id)
def test_each_reviewed_defect_names_an_invariant_its_layouts_and_measured_releases(defect):
    from suites.allocator.invariants import INVARIANTS, LAYOUTS

    assert defect.invariant in INVARIANTS, f"{defect.id}: no invariant {defect.invariant}"
    assert defect.failing and all(defect.failing.values()), f"{defect.id}: no failing cell"
    unknown = {layout for layouts in defect.failing.values() for layout in layouts} - set(LAYOUTS)
    assert not unknown, f"{defect.id}: layouts {sorted(unknown)} are not in LAYOUTS"
    releases = [*defect.failing, *defect.passing] + ([defect.fixed_in] if defect.fixed_in else [])
    assert all(re.fullmatch(r"\d+\.\d+\.\d+", r) for r in releases), f"{defect.id}: releases {releases}"
    assert not set(defect.failing) & set(defect.passing) and defect.fixed_in not in defect.failing
    assert defect.evidence.strip() and defect.upstream.strip() and defect.sentence.strip()
