"""`--kv-transfer-config` / `--kv-events-config` errors in pydantic's words (`reference_impl.config.json_configs`).

Every expected message below was observed: the JSON errors with pydantic 2.14.4's `validate_json` (the
pydantic of the vLLM 0.13.0 and 0.33.0 venvs), the field errors and whole command lines on vLLM 0.13.0 and
0.33.0 through kvconform's vllm target.
"""

from __future__ import annotations

import json

import pytest

from reference_impl.config import resolve_case
from reference_impl.config.json_configs import (KV_EVENTS_0_13, KV_EVENTS_0_33, KV_TRANSFER_0_13, KV_TRANSFER_0_33,
                                                 expand_human_numbers, field_errors, render, syntax_error)

# text -> what pydantic 2.14.4 said after "Invalid JSON: "
JSON_ERRORS = {
    "{bad": "key must be a string at line 1 column 2",
    "": "EOF while parsing a value at line 1 column 0",
    " ": "EOF while parsing a value at line 1 column 1",
    "{": "EOF while parsing an object at line 1 column 1",
    '{"a"': "EOF while parsing an object at line 1 column 4",
    '{"a":': "EOF while parsing a value at line 1 column 5",
    '{"a":1': "EOF while parsing an object at line 1 column 6",
    '{"a":1,': "EOF while parsing a value at line 1 column 7",
    '{"a":1,}': "trailing comma at line 1 column 8",
    "[1,": "EOF while parsing a value at line 1 column 3",
    "[1,]": "trailing comma at line 1 column 4",
    "[": "EOF while parsing a list at line 1 column 1",
    '"abc': "EOF while parsing a string at line 1 column 4",
    "tru": "EOF while parsing a value at line 1 column 3",
    '{"a" 1}': "expected `:` at line 1 column 6",
    '{"a":1 "b":2}': "expected `,` or `}` at line 1 column 8",
    '{"a":1}}': "trailing characters at line 1 column 8",
    "{} x": "trailing characters at line 1 column 4",
    '{"a":[1,2}': "expected `,` or `]` at line 1 column 10",
    '{"a":{"b":1]}': "expected `,` or `}` at line 1 column 12",
    "{'a':1}": "key must be a string at line 1 column 2",
    '{"a":01}': "invalid number at line 1 column 7",
    '{"a":1.}': "invalid number at line 1 column 8",
    '{"a":-}': "invalid number at line 1 column 7",
    '{"a":"\\x"}': "invalid escape at line 1 column 8",
    '{"a":"\n"}': "control character (\\u0000-\\u001F) found while parsing a string at line 2 column 0",
    '{\n"a":\n}': "expected value at line 3 column 1",
    "  {bad": "key must be a string at line 1 column 4",
    '{"a":1e}': "invalid number at line 1 column 8",
    '{"a":tru}': "expected ident at line 1 column 9",
    '{"a":"b"': "EOF while parsing an object at line 1 column 8",
    '{"a":"b': "EOF while parsing a string at line 1 column 7",
    "x": "expected value at line 1 column 1",
    "}": "expected value at line 1 column 1",
    "{,}": "key must be a string at line 1 column 2",
    '{"a":1,,"b":2}': "key must be a string at line 1 column 8",
    "[1 2]": "expected `,` or `]` at line 1 column 4",
}


@pytest.mark.parametrize("text", JSON_ERRORS)
def test_broken_json_gets_pydantics_words(text):
    assert syntax_error(text) == f"Invalid JSON: {JSON_ERRORS[text]}", f"pydantic's JSON error for {text!r}"


@pytest.mark.parametrize("text", ['{"a":NaN}', '{"a":Infinity}', '{"a": -Infinity}', ' {"a": [1, 2.5e-3, "x\\u00e9", null, true]} ',
                                  "[]", '"s"', "0"])
def test_json_pydantic_accepts_is_not_an_error(text):
    assert syntax_error(text) is None, f"pydantic parses {text!r}"


@pytest.mark.parametrize("value,forbid,expected", [
    ([1, 2], True, [("KVTransferConfig", "Input should be an object")]),
    (None, False, [("KVTransferConfig", "Input should be an object")]),
    ({"kv_connector": 5, "kv_role": "kv_both"}, True, [("kv_connector", "Input should be a valid string")]),
    ({"kv_port": "x"}, False, [("kv_port", "Input should be a valid integer, unable to parse string as an integer")]),
    ({"kv_port": 1.5}, False, [("kv_port", "Input should be a valid integer, got a number with a fractional part")]),
    ({"kv_port": "12", "enable_permute_local_kv": "yes", "kv_rank": None}, False, []),
    ({"kv_port": "0-5"}, False, []),  # pydantic-core reads leading zeros then a minus as a negative number
    ({"kv_port": "0+5"}, False, [("kv_port", "Input should be a valid integer, unable to parse string as an integer")]),
    ({"kv_load_failure_policy": "x"}, False, [("kv_load_failure_policy", "Input should be 'recompute' or 'fail'")]),
    ({"kv_connector_extra_config": []}, True, [("kv_connector_extra_config", "Input should be an object")]),
    ({"nope": 1, "kv_buffer_size": 1e9}, True, [("nope", "Unexpected keyword argument"),
                                                 ("kv_buffer_size", "Unexpected keyword argument")]),
    ({"nope": 1, "kv_buffer_size": 1e9}, False, []),  # 0.13.0 ignores unknown keys; kv_buffer_size is a field
    ({"enable_permute_local_kv": 2}, True, [("enable_permute_local_kv",
                                             "Input should be a valid boolean, unable to interpret input")]),
    ({"enable_permute_local_kv": 1.5}, True, [("enable_permute_local_kv", "Input should be a valid boolean")]),
    ({"kv_role": {"a": 1}, "kv_port": "1e3"}, True, [
        ("kv_role", "Input should be 'kv_producer', 'kv_both' or 'kv_consumer'"),
        ("kv_port", "Input should be a valid integer, unable to parse string as an integer")]),
])
def test_fields_are_checked_as_pydantic_does(value, forbid, expected):
    schema = KV_TRANSFER_0_33 if forbid else KV_TRANSFER_0_13
    assert field_errors(value, schema) == expected, f"{value!r} ({'0.33' if forbid else '0.13'} fields)"


@pytest.mark.parametrize("value,schema,expected", [
    ({"enable_kv_cache_events": "x"}, KV_EVENTS_0_33,
     [("enable_kv_cache_events", "Input should be a valid boolean, unable to interpret input")]),
    ({"nope": 1}, KV_EVENTS_0_33, [("nope", "Unexpected keyword argument")]),
    ({"nope": 1}, KV_EVENTS_0_13, []),
    ([1], KV_EVENTS_0_13, [("KVEventsConfig", "Input should be an object")]),
])
def test_kv_events_fields(value, schema, expected):
    assert field_errors(value, schema) == expected, f"{value!r} as {schema.title} ({schema.forbid_extra=})"


@pytest.mark.parametrize("text,expanded", [
    ('{"kv_port": 2k}', '{"kv_port": 2000}'), ('{"a": 1K, "b": 1.5m}', '{"a": 1024, "b": 1500000}'),
    ('{"kv_connector": "2k"}', '{"kv_connector": "2k"}'), ('{"a": 12kb}', '{"a": 12kb}')])
def test_0_33_expands_bare_human_readable_numbers(text, expanded):
    assert expand_human_numbers(text) == expanded


def test_errors_render_on_one_line():
    assert render([("kv_port", "Input should be a valid integer")], "KVTransferConfig") == \
        "1 validation error for KVTransferConfig: kv_port: Input should be a valid integer"
    assert render([("a", "x"), ("b", "y")], "KVEventsConfig") == "2 validation errors for KVEventsConfig: a: x; b: y"


@pytest.mark.parametrize("profile,option,text,message", [
    ("v0.33", "--kv-transfer-config", "{bad",
     "argument --kv-transfer-config: 1 validation error for KVTransferConfig: KVTransferConfig: Invalid JSON: key "
     "must be a string at line 1 column 2"),
    ("seed", "--kv-transfer-config", "[1,2]",
     "argument --kv-transfer-config: 1 validation error for KVTransferConfig: KVTransferConfig: Input should be "
     "an object"),
    ("v0.33", "--kv-transfer-config", '{"kv_connector":"ExampleConnector","kv_role":"kv_both","nope":1}',
     "argument --kv-transfer-config: 1 validation error for KVTransferConfig: nope: Unexpected keyword argument"),
    ("seed", "--kv-transfer-config", '{"kv_connector":"ExampleConnector","kv_role":"kv_both","kv_port":"x"}',
     "argument --kv-transfer-config: 1 validation error for KVTransferConfig: kv_port: Input should be a valid "
     "integer, unable to parse string as an integer"),
    ("seed", "--kv-transfer-config", '{"kv_connector":"ExampleConnector","kv_role":"kv_both","kv_port": 2k}',
     "argument --kv-transfer-config: 1 validation error for KVTransferConfig: KVTransferConfig: Invalid JSON: "
     "expected `,` or `}` at line 1 column 68"),
    ("v0.33", "--kv-events-config", "{bad",
     "argument --kv-events-config: 1 validation error for KVEventsConfig: KVEventsConfig: Invalid JSON: key must "
     "be a string at line 1 column 2"),
    ("seed", "--kv-events-config", "null",
     "argument --kv-events-config: 1 validation error for KVEventsConfig: KVEventsConfig: Input should be an "
     "object"),
    ("v0.33", "--kv-events-config", '{"kv_connector":"ExampleConnector","kv_role":"kv_both","kv_port": 2k}',
     "argument --kv-events-config: 3 validation errors for KVEventsConfig: kv_connector: Unexpected keyword "
     "argument; kv_role: Unexpected keyword argument; kv_port: Unexpected keyword argument"),
])
def test_the_command_line_stops_with_vllms_message(profile, option, text, message):
    outcome = resolve_case({"profile": profile, "cli_args": [option, text]})
    assert outcome["error"] == {"id": None, "type": "SystemExit", "stage": "cli_parse", "text": message}, outcome


@pytest.mark.parametrize("profile", ["seed", "v0.33"])
def test_an_unknown_key_before_0_33_and_an_empty_value_are_no_error(profile):
    if profile == "seed":
        text = '{"kv_connector":"ExampleConnector","kv_role":"kv_both","nope":1}'
        assert resolve_case({"profile": profile, "cli_args": ["--kv-transfer-config", text]})["error"] is None
    assert resolve_case({"profile": profile, "cli_args": ["--kv-transfer-config", ""]})["error"] is None


@pytest.mark.parametrize("profile,args,error", [
    # vLLM formats its own json.loads into the message; here it is this process's
    ("v0.33", ["--speculative-config", "{bad"],
     {"type": "SystemExit", "stage": "cli_parse",
      "text": f"argument --speculative-config/-sc: Value {{bad cannot be converted to {json.loads}."}),
    ("seed", ["--speculative-config", "{bad"],
     {"type": "SystemExit", "stage": "cli_parse",
      "text": f"argument --speculative-config: Value {{bad cannot be converted to {json.loads}."}),
    ("seed", ["--speculative-config", "[1]"],
     {"type": "ValidationError", "stage": "config",
      "text": "1 validation error for VllmConfig: speculative_config: Input should be a dictionary or an instance "
                 "of SpeculativeConfig"}),
    ("v0.33", ["--hf-overrides", "{bad}"],
     {"type": "SystemExit", "stage": "cli_parse",
      "text": f"argument --hf-overrides: Value {{bad}} cannot be converted to {json.loads}."}),
    ("v0.33", ["--speculative-config", "None"], None),
    ("seed", ["--speculative-config", ""], None),
    ("seed", ["--hf-overrides", "{bad"], None),  # not object-shaped: kept as a string
    ("v0.33", ["--hf-overrides", "[1]"], None),
])
def test_speculative_config_and_hf_overrides_parse_as_vllm_does(profile, args, error):
    outcome = resolve_case({"profile": profile, "cli_args": args, "stage": "create_connector"})
    assert outcome["error"] == (error and {**error, "id": None}), outcome  # none of these texts has a message id
