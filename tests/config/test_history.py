"""`python -m suites.config.history` / `kvconform history`: per changed cell, a rule change, a defect introduced or
a defect fixed. The expectations are written by hand from the spec's timeline and the reviewed defects."""

import pytest

from harness.cli import main as kvconform
from suites.config.history import FIXED, INTRODUCED, RULE_CHANGE, changes, main, steps


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
