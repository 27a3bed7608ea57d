"""Every option is drawn on its own (issue 36): the matrix, the random cases and the connector trees leave each
option the resolver reads out somewhere and give it alone somewhere, so vLLM's default for the others runs.

The options come from the case schema itself (`reference_impl.vocabulary.CASE_DEFAULTS` and `ENV_VARS`): a new
key there is an option no generator draws yet until it is either drawn or listed in `options.NOT_OPTIONS` with a
reason, and this test fails in between.
"""

from __future__ import annotations

import pytest

from harness.eras import ERA_IDS
from reference_impl.vocabulary import CASE_DEFAULTS, ENV_VARS
from suites.config.matrix import cells_for
from suites.config.options import NOT_OPTIONS, PREREQUISITES, all_options, alone, options_of, present, uncovered
from suites.config.random_cases import connector_trees, random_cases

# The connector options a MultiConnector child can have, by the child's key.
CHILD_OPTIONS = {"kv_role": "kv_role", "kv_connector_module_path": "kv_connector_module_path",
                 "children": "multi_connector_children", "kv_connector_extra_config": "kv_connector_extra_config"}


def test_every_schema_key_is_an_option_or_says_why_not():
    keys = set(CASE_DEFAULTS)
    assert set(NOT_OPTIONS) <= keys, "NOT_OPTIONS names a key the schema does not have"
    options = set(all_options())
    assert keys - set(NOT_OPTIONS) <= options
    assert {f"env.{name}" for name in ENV_VARS} <= options
    assert set(PREREQUISITES) <= options and all(set(needs) <= options for needs in PREREQUISITES.values())


def test_the_options_of_an_era_follow_its_release():
    assert "env.VLLM_USE_V1" in options_of("v0.10") and "env.VLLM_USE_V1" not in options_of("pre-seed")
    assert "kv_offloading_size" not in options_of("v0.11") and "kv_offloading_size" in options_of("pre-seed")
    assert "env.VLLM_USE_SIMPLE_KV_OFFLOAD" not in options_of("v0.18")
    assert "env.VLLM_USE_SIMPLE_KV_OFFLOAD" in options_of("v0.19")
    assert "hisparse" not in options_of("v0.25") and "hisparse" in options_of("v0.30")
    assert "kv_connector_extra_config" not in options_of("v0.33") and "kv_connector_extra_config" in options_of("v0.34")


def test_presence_reads_the_schema_defaults():
    assert present({"kv_offloading_size": 4}) == {"kv_offloading_size"}
    assert present({"flag": False}) == {"flag"}, "an explicit enable is an option given"
    assert present({"kv_events": False, "hisparse": False}) == set()
    assert present({"kv_connector": "NixlConnector"}) == {"kv_connector", "kv_role"}, "the schema's kv_role is kv_both"
    assert present({"kv_connector": "NixlConnector", "kv_role": None}) == {"kv_connector"}
    assert present({"kv_role": "kv_producer"}) == set(), "a role without a connector configures nothing"
    assert alone("env.VLLM_USE_SIMPLE_KV_OFFLOAD", present({"kv_offloading_size": 4, "env": {"VLLM_USE_SIMPLE_KV_OFFLOAD": "1"}}))
    assert not alone("kv_offloading_size", present({"kv_offloading_size": 4, "kv_offloading_backend": "native"}))


def test_a_generator_that_pairs_two_options_fails():
    """The check can fail: the cases the matrix had before issue 36 (size and backend always together)."""
    paired = [{"profile": "v0.14"}, {"kv_offloading_backend": "native", "kv_offloading_size": 4}]
    assert {"kv_offloading_size", "kv_offloading_backend"} <= set(uncovered("v0.14", paired)["never alone"])
    assert uncovered("v0.14", [{"kv_events": True}])["never absent"] == ["kv_events"]


@pytest.mark.parametrize("era", ERA_IDS)
def test_the_matrix_draws_every_option_on_its_own(era):
    assert uncovered(era, [cell.case() for cell in cells_for(era)]) == {"never absent": [], "never alone": []}


@pytest.mark.parametrize("era", ERA_IDS)
def test_random_cases_draw_every_option_on_its_own(era):
    assert uncovered(era, random_cases(era, 200, 1)) == {"never absent": [], "never alone": []}


def _children(children):
    for child in children or ():
        yield child
        yield from _children(child.get("children"))


@pytest.mark.parametrize("era", ERA_IDS)
def test_connector_trees_draw_every_child_option_on_its_own(era):
    """The trees' options are their children's: each child option the era reads is left out of some child and
    given to some child with nothing but its connector (and, for the others, a role); the flag is drawn N/T/F."""
    cases = connector_trees(era)
    assert {case["flag"] for case in cases} == {None, True, False}
    wanted = {key for key, option in CHILD_OPTIONS.items() if option in options_of(era)}
    absent, alone_seen = set(), set()
    for case in cases:
        for child in _children(case["multi_connector_children"]):
            given = {key for key in CHILD_OPTIONS if child.get(key) is not None}
            absent |= wanted - given
            alone_seen |= {key for key in given if given <= {key, "kv_role"}}
    assert (sorted(wanted - absent), sorted(wanted - alone_seen)) == ([], [])
