"""Random cases of an era's dimensions: repeatable, inside the era's dimensions, answered by the reference, and
compared case by case (a target that changes one thing is caught exactly where it changes it)."""

from __future__ import annotations

import json

import pytest

from harness.eras import ERA_IDS
from reference_impl.config.cases import resolve_case
from reference_impl.vocabulary import FLAGS, MATRIX_STAGES, PLATFORMS
from suites.config.random_cases import differences, grouped_lines, main, random_cases, split_abstentions
from suites.config.tables import era_table

ERA = "v0.33"


def test_same_seed_same_cases_other_seed_other_cases():
    assert random_cases(ERA, 50, 1) == random_cases(ERA, 50, 1)
    assert random_cases(ERA, 50, 1) != random_cases(ERA, 50, 2)


def test_cases_stay_in_the_eras_dimensions():
    names = set(era_table(ERA)["connectors"]) | {"FooConnector", "MultiConnector"}
    for case in random_cases(ERA, 300, 3):
        assert case["profile"] == ERA
        assert case["flag"] in FLAGS.values() and case["platform"] in PLATFORMS and case["stage"] in MATRIX_STAGES.values()
        if case.get("hisparse"):  # HiSparse stays alone
            assert not case.get("attention_chunk_size") and not case.get("kv_offloading_backend")
        for child in case.get("multi_connector_children") or []:
            assert child["kv_connector"] in names


def test_no_case_asks_for_a_feature_its_release_lacks():
    """HiSparse arrived in 0.30.0: a case of an older era cannot ask for it (vLLM has no option for it), so the
    era's "unknown" would be no finding; the newer eras still draw it."""
    assert not any(case.get("hisparse") for case in random_cases("v0.25", 400, 11)), "v0.25 has no HiSparse"
    assert any(case.get("hisparse") for case in random_cases("v0.30", 400, 11)), "v0.30 has HiSparse: draw it"


def test_an_era_that_abstains_is_listed_apart_from_a_difference():
    cases = random_cases(ERA, 40, 5)
    era_unknown = lambda case: {**resolve_case(case), "unknown": "depends on the installed package", "error": None}  # noqa: E731
    found, _ = differences(cases, era_unknown, resolve_case)
    answered, abstained = split_abstentions(found)
    assert answered == [] and len(abstained) == len(found) > 0, "every difference here is the era's abstention"
    found, _ = differences(cases, resolve_case, lambda case: {**resolve_case(case), "resolved_disable_hma": "x"})
    assert split_abstentions(found)[0] == [d for d in found if not d["era"].get("unknown")] != []


def test_the_reference_answers_every_case_as_vllm_would_refuse_or_accept_it():
    for case in random_cases(ERA, 300, 4):
        outcome = resolve_case(case)
        assert not (outcome["error"] and outcome["error"]["stage"] in ("input", "internal")), (case, outcome)


def test_a_target_that_agrees_differs_nowhere():
    cases = random_cases(ERA, 100, 5)
    assert differences(cases, resolve_case, resolve_case) == ([], 0)


def test_a_target_that_never_warns_differs_exactly_on_the_cases_with_warnings():
    cases = random_cases(ERA, 200, 6)

    def silent(case):
        return dict(resolve_case(case), warnings=[])

    warned = [case["id"] for case in cases if resolve_case(case)["warnings"]]
    differing, unknown = differences(cases, resolve_case, silent)
    assert warned and [d["case"]["id"] for d in differing] == warned and unknown == 0
    assert all(d["differences"][0].startswith("warnings in order") for d in differing)


def test_a_target_that_cannot_evaluate_is_counted_not_differing():
    cases = random_cases(ERA, 20, 7)

    def unknowing(case):
        return dict(resolve_case(case), resolved_disable_hma=None, error=None, unknown="cannot here")

    known = sum(1 for case in cases if not resolve_case(case)["unknown"])
    assert differences(cases, resolve_case, unknowing) == ([], known)


def test_groups_name_both_outcomes_and_the_first_case():
    cases = random_cases(ERA, 200, 8)

    def always_on(case):
        return dict(resolve_case(case), resolved_disable_hma=False, error=None, warnings=[], unknown=None)

    differing, _ = differences(cases, resolve_case, always_on)
    lines = grouped_lines(differing)
    assert sum(int(line.split(" ")[0]) for line in lines) == len(differing)
    assert any("target `on`" in line and "era `off`" in line for line in lines)


def test_command_line(capsys):
    assert main(["--era", ERA, "--count", "3", "--seed", "9"]) == 0
    assert json.loads(capsys.readouterr().out) == random_cases(ERA, 3, 9)
    assert main(["--era", ERA]) == 0, "defaults: 200 cases of seed 1"
    assert json.loads(capsys.readouterr().out) == random_cases(ERA, 200, 1)
    assert main(["--era", ERA, "--trees"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 1260


@pytest.mark.parametrize("argv,message", [
    (["--era", "v9.9"], "--era: 'v9.9' is not an era id"),
    (["--era", ERA, "--count", "0"], "--count: 0 is not a positive number of cases"),
    (["--era", ERA, "--target", "mine"], "--target: 'mine' is not a known target; accepted: vllm"),
    (["--count", "3"], "the following arguments are required: --era"),
    (["--era", ERA, "--trees", "--count", "5"], "--count: --trees is a fixed list of cases; --count and --seed draw random ones"),
    (["--era", ERA, "--trees", "--seed", "2"], "--seed: --trees is a fixed list of cases; --count and --seed draw random ones"),
])
def test_bad_arguments_are_one_line_exit_2(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_connector_trees_cover_every_shape_of_one_or_two_children_once():
    from suites.config.random_cases import TREE_CHILDREN, connector_trees

    cases = connector_trees("v0.22")
    kinds = len(TREE_CHILDREN)
    assert len(cases) == (kinds + kinds * kinds) * len(FLAGS) * len(MATRIX_STAGES)
    assert len({case["id"] for case in cases}) == len(cases), "every case id is unique"
    assert connector_trees("v0.22") == cases, "the same list each time"
    for case in cases:
        assert case["kv_connector"] == "MultiConnector" and 1 <= len(case["multi_connector_children"]) <= 2
        outcome = resolve_case(case)
        assert not (outcome["error"] and outcome["error"]["stage"] in ("input", "internal")), (case, outcome)


@pytest.mark.parametrize("era", ERA_IDS)
def test_connector_trees_resolver_and_oracle_agree(era):
    """The order in which vLLM checks a MultiConnector's children (kv_role, class, HMA support, nested
    construction) decides which of two faults is reported: the resolver and the independent oracle must name the
    same one on every small tree (vLLM 0.22.0's config check stopping at the first non-HMA child was found so)."""
    from suites.config.oracle import expected_outcome
    from suites.config.outcomes import outcome_mismatches
    from suites.config.random_cases import connector_trees

    wrong = []
    for case in connector_trees(era):
        problems = outcome_mismatches(expected_outcome(case).outcome, resolve_case(case))
        if problems:
            wrong.append(f"{case['id']}: {problems[0]}")
    assert not wrong, f"{len(wrong)} trees where the resolver differs from the oracle, first: {wrong[:3]}"
