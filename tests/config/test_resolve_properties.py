"""Property tests over the whole case space of every era: `resolve_case` answers every case with an outcome of
the schema and never raises, and a failure of the resolver on one case of a batch stays that case's outcome.

The strategies draw every case field, from values vLLM accepts and values it does not: every era, profile and
version; every flag, platform and stage; connector trees of registered, unregistered and module-path
connectors with nested MultiConnector children; one to four layer kinds with repeats; command lines.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.report.passes import capped_examples
from reference_impl.config import cases as C
from reference_impl.config.eras import ERAS, PROFILES, VLLM_REGISTERED_CONNECTORS
from reference_impl.vocabulary import LAYER_KINDS, OUTCOME_ONLY_STAGES, PLATFORMS, STAGES
from suites.config.external_connectors import MODULE_PATH

OUTCOME_KEYS = {"id", "resolved_disable_hma", "warnings", "error", "rules", "unknown"}
ERROR_STAGES = {*STAGES, *OUTCOME_ONLY_STAGES}
NAMES = sorted({info.name for info in VLLM_REGISTERED_CONNECTORS} | {"FooConnector", "LMCacheLikeConnector", ""})
EXTERNAL = ["ExternalHMAConnector", "ExternalPlainConnector", "LegacyTwoArgConnector", "RenamedMultiConnector",
            "NoSuchClass"]
# Every character but the surrogates: the alphabet of a plain `st.text()` (`st.characters(codec="utf-8")`), spelled by
# Unicode category. The same intervals give the same draws; the codec spelling has Hypothesis encode all 1.1 million
# code points the first time it runs in a checkout (2 CPU-s of the README test command in a fresh clone, where
# .hypothesis/unicode_data holds no cached answer yet), the category spelling reads Python's own Unicode table.
TEXT_CHARS = st.characters(exclude_categories=["Cs"])
ROLES = st.sampled_from(["kv_producer", "kv_consumer", "kv_both", "both", "", None])
SHORT_TEXT = st.text(TEXT_CHARS, max_size=5)
ANY_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | SHORT_TEXT,
                        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(SHORT_TEXT, inner, max_size=3),
                        max_leaves=5)


# a connector's kv_connector_extra_config: the keys vLLM reads (Nixl, HiSparse), any JSON, or not an object
EXTRA = st.none() | ANY_JSON | st.fixed_dictionaries({}, optional={
    "transfer_mode": st.sampled_from(["pull", "push", "sideways", None, 1]),
    "host_pool_gib": st.sampled_from([4, 0, -1, "2", "abc", None, [1], 10 ** 400]),
    "connectors": st.none() | st.lists(st.sampled_from(NAMES), max_size=2) | ANY_JSON,
})
SPECULATIVE = st.sampled_from([None, "eagle", "eagle3", "mtp", "dflash", "ngram", "draft_model", "no_such_method"]) | (
    st.fixed_dictionaries({"name": st.sampled_from(["my_drafter", "eagle", "", 3])},
                          optional={"uses_target_hidden_states": st.sampled_from([True, False, "yes"]), "other": st.none()}))


def _child(depth: int):
    plain = st.sampled_from(NAMES)
    fields = {
        "kv_connector": st.sampled_from(NAMES + EXTERNAL) | st.none(),
        "kv_role": ROLES,
        "kv_connector_module_path": st.sampled_from([MODULE_PATH, "no_such_module_xyz", "os"]) | st.none(),
    }
    if depth > 0:
        fields["children"] = st.none() | st.lists(_child(depth - 1), max_size=3)
    fields["kv_connector_extra_config"] = EXTRA
    return plain | st.fixed_dictionaries({}, optional=fields)


VERSIONS = st.sampled_from([*PROFILES, *(era.id for era in ERAS), *(era.representative for era in ERAS),
                            "0.9.0", "0.34.0", "0.13.0+cpu", "banana", ""])
LAYERS = st.lists(st.sampled_from(LAYER_KINDS), min_size=1, max_size=4)
CLI_TOKENS = st.sampled_from([
    "--disable-hybrid-kv-cache-manager", "--no-disable-hybrid-kv-cache-manager", "--enable-hybrid-kv-cache-manager",
    "--disable_hybrid_kv_cache_manager", "--kv-transfer-config", '{"kv_connector": "ExampleConnector", "kv_role": "kv_both"}',
    '{"kv_connector": "FooConnector", "kv_role": "kv_both"}', '{"kv_connector": "NixlConnector"}', "{", "[]",
    "--kv-events-config", "{}", "--speculative-config", '{"method": "eagle"}', "--hf-overrides",
    '{"attention_chunk_size": 64}', "--kv-offloading-backend", "native", "--kv-offloading-size", "-4", "abc",
    "--bogus",
])
FIELDS = {
    "id": st.integers() | st.text(TEXT_CHARS, max_size=4),
    "vllm_version": VERSIONS | st.none(),
    "profile": VERSIONS | st.none(),
    "stage": st.sampled_from([*STAGES, "bogus"]) | st.none(),
    "flag": st.sampled_from([None, True, False, "yes", 0]),
    "cli_args": st.none() | st.lists(CLI_TOKENS, max_size=4),
    "platform": st.sampled_from([*PLATFORMS, "mainframe"]),
    "kv_connector": st.sampled_from(NAMES + EXTERNAL + ["MultiConnector"] * 3) | st.none(),
    "kv_connector_module_path": st.sampled_from([MODULE_PATH, "no_such_module_xyz"]) | st.none(),
    "kv_role": ROLES,
    "multi_connector_children": st.none() | st.lists(_child(2), max_size=3),
    "kv_events": st.booleans(),
    "attention_chunk_size": st.sampled_from([None, 64, 8192, 0, -1]),
    "speculative_method": SPECULATIVE,
    "kv_connector_extra_config": EXTRA,
    "env": st.dictionaries(st.sampled_from(["VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE", "VLLM_USE_V1",
                                            "VLLM_USE_SIMPLE_KV_OFFLOAD", "OTHER"]),
                           st.sampled_from(["0", "1", "yes", ""]), max_size=2),
    "hisparse": st.booleans(),
    "kv_offloading_backend": st.sampled_from([None, "native", "lmcache", "disk"]),
    "kv_offloading_size": st.sampled_from([None, 4, 0.5, 0, -4]),
    "layers": st.none() | LAYERS,
}
CASES = st.fixed_dictionaries({}, optional=FIELDS)


def assert_schema(result, case_id) -> None:
    """The outcome shape the resolve schema (docs/reference.md) promises."""
    assert isinstance(result, dict) and set(result) - {"kv_cache_groups"} == OUTCOME_KEYS, result
    assert result["id"] == case_id
    assert result["resolved_disable_hma"] in (None, True, False)
    assert isinstance(result["warnings"], list) and all(set(w) == {"id", "text"} and isinstance(w["text"], str)
                                                        for w in result["warnings"])
    assert isinstance(result["rules"], list) and all(isinstance(r, str) for r in result["rules"])
    assert result["unknown"] is None or isinstance(result["unknown"], str)
    error = result["error"]
    if error is not None:
        assert list(error) == ["id", "type", "stage", "text"] and error["stage"] in ERROR_STAGES, error
        assert isinstance(error["text"], str)
        assert result["resolved_disable_hma"] is None and result["unknown"] is None
    if result["unknown"] is not None:
        assert result["resolved_disable_hma"] is None
    json.dumps(result)  # an outcome is JSON


# The gate runs fewer examples of both searches (tests/gate.toml's [searched]); --deferred-only 400 and 150.
@settings(max_examples=capped_examples(400), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=CASES)
def test_every_case_gets_a_schema_outcome_and_no_internal_error(case):
    result = C.resolve_case(dict(case))
    assert_schema(result, case.get("id"))
    assert (result["error"] or {}).get("type") != "InternalError", f"the resolver failed on {case}: {result['error']}"


@settings(max_examples=capped_examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=st.one_of(CASES, ANY_JSON, st.dictionaries(st.text(TEXT_CHARS, max_size=8), ANY_JSON, max_size=4)))
def test_anything_at_all_gets_an_outcome(case):
    result = C.resolve_case(case)
    assert_schema(result, case.get("id") if isinstance(case, dict) else None)
    assert (result["error"] or {}).get("type") != "InternalError", f"the resolver failed on {case!r}: {result['error']}"


def test_an_internal_error_is_that_cases_outcome_and_the_batch_goes_on(monkeypatch):
    real = C.run_case

    def broken(case):
        if case.id == "boom":
            raise RuntimeError("a bug\nover two lines")
        return real(case)

    monkeypatch.setattr(C, "run_case", broken)
    results = C.resolve_cases([{"id": "a", "flag": True}, {"id": "boom"}, {"id": "c", "flag": False}])
    assert [r["id"] for r in results] == ["a", "boom", "c"]
    assert results[0]["resolved_disable_hma"] is True and results[2]["resolved_disable_hma"] is False
    assert results[1]["error"] == {"id": None, "type": "InternalError", "stage": "internal",
                                   "text": "RuntimeError: a bug over two lines"}
    for result, case_id in zip(results, ["a", "boom", "c"]):
        assert_schema(result, case_id)


@pytest.mark.parametrize("layers", [["full"], ["mamba", "mamba"], ["full", "sliding_window", "chunked_local", "mamba"]])
def test_layers_without_a_stage_are_grouped(layers):
    """`layers` imply the kv_cache_groups stage; at an explicit stage config the outcome says they were not."""
    grouped = C.resolve_case({"id": 1, "flag": True, "layers": layers})
    assert "kv_cache_groups" in grouped["rules"], grouped
    skipped = C.resolve_case({"id": 1, "flag": True, "layers": layers, "stage": "config"})
    assert "kv_cache_groups_not_evaluated" in skipped["rules"] and "kv_cache_groups" not in skipped
