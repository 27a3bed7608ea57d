"""`python -m suites.config.history` / `kvconform history`: per changed cell, a rule change, a defect introduced or
a defect fixed. The expectations are written by hand from the spec's timeline and the reviewed defects."""

import pytest

from harness.cli import main as kvconform
from harness.results_model import ResultsDocument, load_results
from suites.config.history import FIXED, INTRODUCED, RULE_CHANGE, changes, main, steps
from tests.report.synthetic import config_entry, outcome, run_info


@pytest.fixture(scope="module")
def step_0_21_to_0_22():
    return {change.cell: change for change in changes("0.21.0", "0.22.0")[0]}


def test_the_offloading_shortcut_moved_before_the_decision_is_a_defect_fixed(step_0_21_to_0_22):
    change = step_0_21_to_0_22["N-cuda-offload_lmcache-noconn-create"]
    assert change.kind == FIXED and [d.id for d in change.defects] == ["VLLM-CFG-02"]
    assert change.before.startswith("error ValueError@create_connector E-F(LMCacheConnectorV1)")


def test_an_hma_connector_no_longer_turning_hma_off_is_a_defect_fixed(step_0_21_to_0_22):
    change = step_0_21_to_0_22["N-cuda-none-ExternalHMA"]
    assert (change.before, change.after, change.kind) == ("off | warn W-B1", "on", FIXED)
    assert [d.id for d in change.defects] == ["VLLM-CFG-03"]


def test_the_renamed_multiconnector_escaping_the_child_check_is_a_defect_introduced(step_0_21_to_0_22):
    change = step_0_21_to_0_22["N-cuda-none-RenamedMulti"]
    assert (change.after, change.kind, [d.id for d in change.defects]) == ("on", INTRODUCED, ["VLLM-CFG-09"])


def test_kv_events_no_longer_turning_hma_off_is_a_defect_fixed():
    found = {c.cell: c for c in changes("0.19.0", "0.20.0")[0]}
    assert found["N-cuda-kv_events-noconn"].kind == FIXED
    assert [d.id for d in found["N-cuda-kv_events-noconn"].defects] == ["VLLM-CFG-01"]


def test_the_env_default_flip_is_a_rule_change():
    found = {c.cell: c for c in changes("0.13.0", "0.14.0")[0]}
    change = found["N-cuda-chunked-noconn"]
    assert (change.before, change.after, change.kind) == ("off | warn W-C", "on", RULE_CHANGE)


def test_a_range_steps_through_every_era_boundary():
    assert steps("0.13.0", "0.20.0") == [("0.13.0", "0.14.0"), ("0.14.0", "0.17.0"), ("0.17.0", "0.18.0"),
                                         ("0.18.0", "0.19.0"), ("0.19.0", "0.20.0")]
    assert steps("0.14.1", "0.16.0") == [("0.14.1", "0.16.0")]


def test_two_releases_of_one_era_have_no_changes(capsys):
    assert main(["--from", "0.14.0", "--to", "0.16.2"]) == 0
    assert "the same rules (era v0.14): no cell changes" in capsys.readouterr().out


@pytest.mark.parametrize(("argv", "message"), [
    (["--from", "0.13.0"], "give --from X.Y.Z and --to X.Y.Z (or --range A..B)"),
    (["--from", "0.13.0", "--to", "9.0.0"], "--to: '9.0.0' is outside the releases kvconform knows"),
    (["--range", "0.13.0-0.20.0"], "--range: '0.13.0-0.20.0' is not accepted; expected two releases as A..B"),
    (["--range", "0.13.0..0.20.0", "--from", "0.13.0"], "--range: give either --range A..B or --from A --to B"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, argv, message):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_kvconform_history_runs_the_same_program(capfd):
    assert kvconform(["history", "--range", "0.24.0..0.25.0", "--summary"]) == 0
    assert "vLLM 0.24.0 (era v0.24) -> 0.25.0 (era v0.25): 0 of" in capfd.readouterr().out
    assert kvconform(["history", "--from", "0.13.0"]) == 2
    assert capfd.readouterr().err.strip() == "kvconform history: give --from X.Y.Z and --to X.Y.Z (or --range A..B)"


def _run_file(tmp_path, name, era, cells):
    """A results file of one release's matrix run: (flag, features, outcome, defects) per cell on cuda."""
    entries = []
    for flag, features, resolved, defects in cells:
        entry = config_entry(era=era, flag=flag, features=features, actual=outcome(resolved=resolved))
        if defects:
            entry["extra"] = {"defects": [{"id": d, "sentence": "s", "fixed_in": None} for d in defects]}
        entries.append(entry)
    path = tmp_path / name
    path.write_text(ResultsDocument(run_info=run_info(), results=entries).dumps())
    return str(path)


def test_two_results_files_are_compared_with_the_defects_each_run_recorded(tmp_path, capsys):
    old = _run_file(tmp_path, "old.json", "v0.19", [(None, "kv_events", True, ["VLLM-CFG-01"]),
                                                     (None, "chunked", False, []), (True, "none", True, [])])
    new = _run_file(tmp_path, "new.json", "v0.20", [(None, "kv_events", False, []),
                                                     (None, "chunked", True, []), (True, "none", True, [])])
    assert main(["--results", old, new]) == 0
    out = capsys.readouterr().out
    assert "(era v0.19) -> " in out and "2 of 3 cells changed (1 rule change, 1 defect fixed)" in out
    assert "  N-cuda-kv_events-noconn: off -> on: defect fixed: VLLM-CFG-01" in out
    assert "  N-cuda-chunked-noconn: on -> off: rule change" in out


def test_a_results_file_of_several_eras_is_one_line_and_exit_2(tmp_path, capsys):
    mixed = _run_file(tmp_path, "mixed.json", "v0.19", [(None, "none", False, [])])
    document = load_results(mixed)
    (tmp_path / "mixed.json").write_text(ResultsDocument(run_info=run_info(), results=[
        *document.results, config_entry(era="v0.20", platform="rocm")]).dumps())
    assert main(["--results", mixed, mixed]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("has config cells of 2 eras (v0.19, v0.20); expected the run of one release "
                        "(pytest suites/config --vllm-version X --kvconform-results)") and "\n" not in err
