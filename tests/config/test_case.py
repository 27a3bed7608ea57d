"""The one case type (`reference_impl.config.case`): its parser names the field, the value and what is accepted; its
serialized form parses back to the same case; every evaluator reads the same parse.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings

from harness.eras import ERA_IDS
from harness.report.passes import capped_examples
from reference_impl.config.case import SIMPLE_KEYS, Case, CaseError, parse_case
from reference_impl.vocabulary import CASE_DEFAULTS, CASE_KEYS, FEATURES
from suites.config.matrix import cells_for
from tests.config.test_resolve_properties import CASES


@pytest.mark.parametrize("field, value, accepted", [
    ("case", [1], "a JSON object"),
    ("colour", "red", "a known key"),
    ("vllm_version", "banana", "neither a version X.Y.Z nor a profile"),
    ("profile", 7, "not a string"),
    ("stage", "bogus", "one of cli_parse, config, kv_cache_groups, create_connector"),
    ("flag", "yes", "null, true or false"),
    ("cli_args", "--x", "a list of strings"),
    ("platform", "gpu", "one of cuda, rocm, xpu, cpu, tpu, unspecified, auto"),
    ("env", {"A": 1}, "an object of string names to string values"),
    ("env.VLLM_USE_V1", "yes", "an integer such as 0 or 1"),
    ("kv_connector", 3, "a string or null"),
    ("kv_connector_module_path", "m", "null unless kv_connector names the class"),
    ("multi_connector_children", ["ExampleConnector"], "null unless kv_connector is set"),
    ("kv_connector_extra_config", [], "null or a JSON object"),
    ("kv_events", 1, "true or false"),
    ("attention_chunk_size", 0, "null or a positive integer"),
    ("speculative_method", 3, "a method name"),
    ("speculative_method.name", "eagle", "a name that is not a built-in speculative method"),
    ("hisparse", "no", "true or false"),
    ("kv_offloading_backend", "disk", "null, native or lmcache"),
    ("kv_offloading_size", "4", "null or a number (GiB)"),
    ("layers[1]", "attention", "one of full, sliding_window, chunked_local, mamba"),
])
def test_a_bad_field_is_named_with_its_value_and_what_is_accepted(field, value, accepted):
    raw = {
        "case": lambda: value,
        "env.VLLM_USE_V1": lambda: {"env": {"VLLM_USE_V1": value}},
        "speculative_method.name": lambda: {"speculative_method": {"name": value}},
        "layers[1]": lambda: {"layers": ["full", value]},
    }.get(field, lambda: {field: value})()
    with pytest.raises(CaseError) as caught:
        parse_case(raw)
    message = str(caught.value)
    assert message.startswith(f"{field}: {value!r} "), message
    assert accepted in message and "\n" not in message


# The gate runs fewer examples (tests/gate.toml's [searched]); --deferred-only all 200.
@settings(max_examples=capped_examples(200), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(raw=CASES)
def test_the_serialized_form_parses_back_to_the_same_case(raw):
    try:
        case = parse_case(dict(raw))
    except CaseError:
        return
    serialized = case.as_dict()
    assert tuple(serialized) == tuple(CASE_DEFAULTS)  # every key of the schema, in its order
    assert parse_case(serialized) == case


@pytest.mark.parametrize("era", [ERA_IDS[0], ERA_IDS[-1]])  # the oldest and the newest shapes; all eras: ~30 s
def test_every_matrix_cell_parses_and_round_trips(era):
    for cell in cells_for(era):
        case = parse_case(cell.case())
        assert case.era == era and parse_case(case.as_dict()) == case, cell.id


def test_a_case_is_frozen_and_its_defaults_are_the_vocabulary_s():
    case = parse_case({})
    with pytest.raises(dataclasses.FrozenInstanceError):
        case.flag = True  # type: ignore[misc]
    assert isinstance(case, Case) and case.as_dict() == {**CASE_DEFAULTS, "stage": "config"}
    assert case.release_selector is None and case.era == parse_case({"profile": "seed"}).era


def test_children_given_either_way_are_the_same_case():
    by_key = parse_case({"kv_connector": "MultiConnector", "multi_connector_children": [
        "ExampleConnector", {"kv_connector": "MultiConnector", "children": ["NixlConnector"]}]})
    in_extra = parse_case({"kv_connector": "MultiConnector", "kv_connector_extra_config": {"connectors": [
        {"kv_connector": "ExampleConnector", "kv_role": "kv_both"},
        {"kv_connector": "MultiConnector", "kv_connector_extra_config": {"connectors": ["NixlConnector"]}}]}})
    assert by_key == in_extra
    assert by_key.connector_names() == {"MultiConnector", "ExampleConnector", "NixlConnector"}


#: A value other than the default for every key of the schema, with the keys it is read together with (a simple key's
#: from its record, `CaseKey.given()`; a structured key's here).
NON_DEFAULT = {key: {key: spec.given()} for key, spec in CASE_KEYS.items() if spec.simple}
NON_DEFAULT |= {
    "id": {"id": "c1"}, "vllm_version": {"vllm_version": "0.13.0"}, "profile": {"profile": "v0.34"},
    "stage": {"stage": "create_connector"}, "flag": {"flag": False}, "cli_args": {"cli_args": ["--x"]},
    "platform": {"platform": "tpu"}, "kv_connector": {"kv_connector": "NixlConnector"},
    "kv_connector_module_path": {"kv_connector": "C", "kv_connector_module_path": "m"},
    "kv_role": {"kv_connector": "NixlConnector", "kv_role": "kv_producer"},
    "multi_connector_children": {"kv_connector": "MultiConnector", "multi_connector_children": ["NixlConnector"]},
    "kv_connector_extra_config": {"kv_connector": "NixlConnector", "kv_connector_extra_config": {"transfer_mode": "push"}},
    "speculative_method": {"speculative_method": "eagle"}, "env": {"env": {"VLLM_USE_V1": "0"}},
    "layers": {"layers": ["full"]},
}


def test_the_parser_reads_every_key_of_the_schema():
    """A key declared in the vocabulary that the parser accepted but dropped would reach no evaluator."""
    assert set(NON_DEFAULT) == set(CASE_DEFAULTS), "give a new case key a value here"
    for key, fields in NON_DEFAULT.items():
        others = {k: v for k, v in fields.items() if k != key}
        assert parse_case(fields) != parse_case(others), f"{key} does not change the parsed case"


@pytest.mark.parametrize("key", SIMPLE_KEYS)
def test_a_simple_key_is_parsed_from_its_record_alone(key):
    """A key of a simple kind needs no parse of its own: its record's values parse to the same field, a value of
    another type is refused naming the key, the value and what the record accepts, and the draws can set it."""
    spec = CASE_KEYS[key]
    values = spec.choices if spec.kind == "choice" else (spec.given(),)
    for value in values:
        assert getattr(parse_case({key: value}), key) == value
    assert getattr(parse_case({}), key) == spec.default
    with pytest.raises(CaseError) as caught:
        parse_case({key: ["x"]})
    assert str(caught.value) == f"{key}: ['x'] is not accepted; expected {spec.accepted()}"
    assert (spec.alone_feature or key) in FEATURES, "the matrix feature that sets it alone has a label"


def test_each_key_record_is_well_formed():
    kinds = {"bool", "choice", "positive_int", "number", "structured"}
    for key, spec in CASE_KEYS.items():
        assert spec.kind in kinds, key
        assert spec.since is None or spec.since in ERA_IDS, f"{key}: since names no era"
        assert spec.kind != "choice" or spec.choices, f"{key}: a choice without choices"
        assert spec.simple or spec.shape, f"{key}: a structured key names its table type"
