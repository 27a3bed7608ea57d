"""The config matrix oracle against hand-written expectations from the spec.

Every expectation below was written from config-rules.md (the section is in the test id), never produced
by running code: the rows of the §4 decision tables per era, vLLM's own cases listed in §7, the §6
timeline steps and the §10 addendum. Summaries use the golden format: `on` = HMA enabled (resolved False),
`off` = disabled, then `| warn <message ids in order>`; errors as `error <type>@<stage> <message id>`.
"""

from __future__ import annotations

import pytest

from suites.config.oracle import CHUNKED_ENV, SIMPLE_OFFLOAD_ENV, expected_outcome
from suites.config.outcomes import summarize

EXT = "suites.config.external_connectors"
CHUNK = {"attention_chunk_size": 8192}
CL_OFF = {**CHUNK, "env": {CHUNKED_ENV: "0"}}


def case(era, flag, platform="cuda", connector=None, stage="config", **fields):
    built = {"id": "oracle-test", "profile": era, "stage": stage, "flag": flag, "platform": platform}
    if connector:
        built["kv_connector"] = connector
    built.update(fields)
    return built


def multi(*children):
    return {"kv_connector": "MultiConnector", "multi_connector_children": list(children)}


def child(name, role="kv_both", children=None):
    entry = {"kv_connector": name}
    if role:
        entry["kv_role"] = role
    if children is not None:
        entry["children"] = children
    return entry


CASES = {
    # §4 pre-seed column and the "absent" row (two-state flag; never raises).
    "§4-pre-seed-True-skips-all": (case("pre-seed", True, "tpu", "SharedStorageConnector", kv_events=True, **CL_OFF), "off"),
    "§4-pre-seed-False-is-absent-K": (case("pre-seed", False, connector="SharedStorageConnector"), "off | warn W-A1"),
    "§4-pre-seed-None-K": (case("pre-seed", None, connector="SharedStorageConnector"), "off | warn W-A1"),
    "§4-pre-seed-None-P": (case("pre-seed", None, "tpu"), "off"),
    "§4-pre-seed-None-EV": (case("pre-seed", None, kv_events=True), "off"),
    "§4-pre-seed-None-CE": (case("pre-seed", None, speculative_method="eagle", **CHUNK), "off"),
    "§4-pre-seed-None-CL": (case("pre-seed", None, **CL_OFF), "off | warn W-C"),
    "§1.3-pre-seed-K-before-CL": (case("pre-seed", None, "cuda", "SharedStorageConnector", **CL_OFF), "off | warn W-A1 W-C"),
    "§4-pre-seed-False-P-EV-never-raises": (case("pre-seed", False, "unspecified", kv_events=True), "off"),
    "§4-pre-seed-nothing": (case("pre-seed", None), "on"),
    "§8.5-pre-seed-offloading-after-block": (case("pre-seed", None, kv_offloading_backend="native", kv_offloading_size=4), "on"),
    "§8.5-pre-seed-offloading-E-F": (
        case("pre-seed", None, stage="create_connector", kv_offloading_backend="native", kv_offloading_size=4),
        "error ValueError@create_connector E-F(OffloadingConnector)",
    ),
    # §4 seed column.
    "§4-seed-True-CL-still-warns": (case("seed", True, **CL_OFF), "off | warn W-C"),
    "§4-seed-False-P": (case("seed", False, "tpu"), "error ValueError@config E-B"),
    "§4-seed-False-EV": (case("seed", False, kv_events=True), "error ValueError@config E-B"),
    "§4-seed-False-CE": (case("seed", False, speculative_method="mtp", **CHUNK), "error ValueError@config E-B"),
    "§4-seed-False-CL": (case("seed", False, **CL_OFF), "error ValueError@config E-B | warn W-C"),
    "§4-seed-False-K-config": (case("seed", False, connector="LMCacheConnectorV1"), "on"),
    "§2.7-seed-False-K-factory": (
        case("seed", False, connector="LMCacheConnectorV1", stage="create_connector"),
        "error ValueError@create_connector E-F(LMCacheConnectorV1)",
    ),
    "§2.7-seed-external-HMA-works": (
        case("seed", False, connector="ExternalHMAConnector", kv_connector_module_path=EXT, stage="create_connector"),
        "on",
    ),
    "§8.14-seed-registry-first": (
        case("seed", False, connector="LMCacheConnectorV1", kv_connector_module_path=EXT, stage="create_connector"),
        "error ValueError@create_connector E-F(LMCacheConnectorV1)",
    ),
    "§4-seed-None-K": (case("seed", None, "cuda", "NixlConnector"), "off | warn W-B1"),
    "§2.4-seed-None-CL-then-K": (case("seed", None, "cuda", "ExampleConnector", **CL_OFF), "off | warn W-C W-B1"),
    "§2.8-seed-env-default-0": (case("seed", None, **CHUNK), "off | warn W-C"),
    "§4-seed-None-P": (case("seed", None, "unspecified"), "off"),
    "§4-seed-None-nothing": (case("seed", None, "xpu"), "on"),
    "§2.2-seed-offloading-E-F": (
        case("seed", None, stage="create_connector", kv_offloading_backend="lmcache", kv_offloading_size=4),
        "error ValueError@create_connector E-F(LMCacheConnectorV1)",
    ),
    # §6 timeline steps between the seed and 0.33.
    "§6-0.14-env-default-1": (case("v0.14", None, **CHUNK), "on"),
    "§6-0.14-env-explicit-0": (case("v0.14", None, **CL_OFF), "off | warn W-C"),
    "§6-0.18-Nixl-HMA-factory": (case("v0.18", False, connector="NixlConnector", stage="create_connector"), "on"),
    "§6-0.20-EV-ignored": (case("v0.20", False, kv_events=True), "on"),
    "§6-0.21-rule-unconditional": (case("v0.21", None, "cuda", "OffloadingConnector"), "off | warn W-B1"),
    "§6-0.21-multi-assert": (
        case("v0.21", False, stage="create_connector", **multi(child("NixlConnector"), child("ExampleConnector"))),
        "error AssertionError@create_connector E-MULTI-ASSERT",
    ),
    "§6-0.22-class-check-HMA": (case("v0.22", None, "cuda", "MooncakeConnector"), "on"),
    "§6-0.22-multi-child-by-name": (
        case("v0.22", None, **multi(child("NixlConnector"), child("ExampleConnector"))),
        "off | warn W-22(MultiConnector)",
    ),
    "§6-0.22-offloading-before-block": (
        case("v0.22", None, "cuda", "ExampleConnector", kv_offloading_backend="native", kv_offloading_size=4),
        "on",
    ),
    "§8.3-0.22-renamed-multi-slips": (
        case("v0.22", None, connector="RenamedMultiConnector", kv_connector_module_path=EXT, multi_connector_children=[child("ExampleConnector")]),
        "on",
    ),
    "§6-0.23-multi-empty": (case("v0.23", None, **multi()), "off | warn W-C1"),
    "§6-0.23-factory-config-check": (
        case("v0.23", False, stage="create_connector", **multi(child("NixlConnector"), child("ExampleConnector"))),
        "error ValueError@create_connector E-F(MultiConnector)",
    ),
    "§6-0.30-hisparse-E-H": (case("v0.30", None, "cuda", "ExampleConnector", hisparse=True), "error ValueError@config E-H | warn W-C1"),
    "§6-0.30-E-B-text": (case("v0.30", False, "rocm", **CL_OFF), "error ValueError@config E-B | warn W-C"),
    # §4 0.33 column.
    "§4-0.33-True-CL": (case("v0.33", True, **CL_OFF), "off | warn W-C"),
    "§4-0.33-True-hisparse": (case("v0.33", True, hisparse=True), "error ValueError@config E-H"),
    "§4-0.33-False-P": (case("v0.33", False, "unspecified"), "error ValueError@config E-C"),
    "§4-0.33-False-CE-dflash": (case("v0.33", False, speculative_method="dflash", **CHUNK), "error ValueError@config E-C"),
    "§8.10-seed-dflash-is-not-eagle": (case("seed", False, speculative_method="dflash", **CHUNK), "error ValueError@config E-B | warn W-C"),
    "§4-0.33-False-EV-ignored": (case("v0.33", False, kv_events=True), "on"),
    "§4-0.33-False-K-config": (case("v0.33", False, connector="ExampleConnector"), "on"),
    "§4-0.33-None-Kn": (case("v0.33", None, "cpu", "FlexKVConnectorV1"), "off | warn W-C1"),
    "§4-0.33-None-K-HMA": (case("v0.33", None, "cuda", "MoRIIOConnector"), "on"),
    "§3.4-0.33-CL-before-W-C1": (case("v0.33", None, "cuda", "HF3FSKVConnector", **CL_OFF), "off | warn W-C W-C1"),
    "§8.13-0.33-tpu-unknown": (case("v0.33", None, "tpu"), "unknown"),
    "§8.13-0.33-tpu-decided-anyway": (case("v0.33", None, "tpu", "ExampleConnector"), "off | warn W-C1"),
    "§8.13-0.33-tpu-flag-True": (case("v0.33", True, "tpu"), "off"),
    "§3.3-0.33-module-path-first": (
        case("v0.33", None, connector="LMCacheConnectorV1", kv_connector_module_path=EXT),
        "on",
    ),
    "§3.3-0.33-lmcache-import": (case("v0.33", None, connector="LMCacheMPConnector"), "error ModuleNotFoundError@config E-NO-LMCACHE"),
    "§3.3-0.33-lmcache-import-at-factory": (
        case("v0.33", True, connector="LMCacheMPConnector", stage="create_connector"),
        "error ModuleNotFoundError@create_connector E-NO-LMCACHE",
    ),
    "§3.3-0.33-two-arg": (
        case("v0.33", None, connector="LegacyTwoArgConnector", kv_connector_module_path=EXT),
        "error ValueError@config E-TWO-ARG(LegacyTwoArgConnector)",
    ),
    "§3.3-seed-two-arg-shimmed": (
        case("seed", True, connector="LegacyTwoArgConnector", kv_connector_module_path=EXT, stage="create_connector"),
        "off",
    ),
    "§3.3-0.33-nested-all-HMA": (
        case("v0.33", None, **multi(child("MultiConnector", children=[child("NixlConnector")]), child("OffloadingConnector"))),
        "on",
    ),
    "§3.3-0.33-nested-non-HMA-grandchild": (
        case("v0.33", None, **multi(child("MultiConnector", children=[child("ExampleConnector")]), child("OffloadingConnector"))),
        "off | warn W-C1",
    ),
    "§10.5-0.33-child-without-kv_role": (
        case("v0.33", None, **multi(child("NixlConnector", role=None))),
        "error ValueError@config E-KV-ROLE",
    ),
    "§3.5-0.33-renamed-multi-asserts": (
        case("v0.33", None, connector="RenamedMultiConnector", kv_connector_module_path=EXT,
             multi_connector_children=[child("ExampleConnector")], stage="create_connector"),
        "error AssertionError@create_connector E-MULTI-ASSERT",
    ),
    "§10.2-0.33-hisparse-needs-cuda": (case("v0.33", None, "xpu", hisparse=True), "error ValueError@config E-HISPARSE-CUDA"),
    "§10.1-0.33-hisparse-auto-top-level": (case("v0.33", None, "cpu", "HiSparseConnector"), "error ValueError@config E-HISPARSE-CUDA"),
    "§10.1-0.33-hisparse-auto-direct-child": (
        case("v0.33", None, "rocm", **multi(child("HiSparseConnector"), child("NixlConnector"))),
        "error ValueError@config E-HISPARSE-CUDA",
    ),
    "§10.1-0.33-hisparse-not-grandchild": (
        case("v0.33", None, "rocm", **multi(child("MultiConnector", children=[child("HiSparseConnector")]), child("NixlConnector"))),
        "on",
    ),
    "§8.5-0.33-offloading-overwrites-connector": (
        case("v0.33", None, "cuda", "ExampleConnector", kv_offloading_size=4),
        "on",
    ),
    "§3.2-0.33-simple-offload-env": (
        case("v0.33", False, stage="create_connector", kv_offloading_size=4, env={SIMPLE_OFFLOAD_ENV: "1"}),
        "on",
    ),
    "§3.2-0.33-offload-lmcache": (
        case("v0.33", None, kv_offloading_backend="lmcache", kv_offloading_size=4),
        "error ModuleNotFoundError@config E-NO-LMCACHE",
    ),
    # §6 before the seed and features that do not exist yet.
    "§6-0.10-cpu-unsupported": (case("v0.10", None, "cpu"), "off"),
    "§6-0.10-no-env-branch": (case("v0.10", None, **CL_OFF), "on"),
    "§6-0.10-CE": (case("v0.10", None, speculative_method="eagle3", **CHUNK), "off"),
    "§6-0.10-K-silent": (case("v0.10", None, connector="NixlConnector"), "off"),
    "§6-0.10-no-factory-check": (case("v0.10", None, stage="create_connector", connector="SharedStorageConnector"), "off"),
    "§6-0.11-cpu-supported": (case("v0.11", None, "cpu"), "on"),
    "§6-0.11-CL-default-0": (case("v0.11", None, **CHUNK), "off | warn W-C"),
    "§6-0.11-no-offloading": (case("v0.11", None, kv_offloading_backend="native", kv_offloading_size=4), "unknown"),
    # §1.2 / §6 0.10.0: the block is gated on VLLM_USE_V1; with it off the flag keeps its value (absent: False).
    "§1.2-0.10-vllm-use-v1-off-skips-the-block": (case("v0.10", None, "xpu", "NixlConnector", env={"VLLM_USE_V1": "0"}), "on"),
    "§1.2-0.10-vllm-use-v1-off-keeps-true": (case("v0.10", True, env={"VLLM_USE_V1": "0"}), "off"),
    # measured on vLLM 0.10.0 and 0.11.0 (random cases, seed 36): the V1 factory refuses under the V0 engine before
    # it looks the connector up, so neither an unknown name nor a missing lmcache is reached (0.10.0 factory.py:59).
    "§1.2-0.10-v1-factory-refuses-under-v0": (
        case("v0.10", None, "cuda", "FooConnector", stage="create_connector", env={"VLLM_USE_V1": "0"}),
        "error ValueError@create_connector E-V1-CONNECTOR-UNDER-V0"),
    "§1.2-0.11-v1-factory-refuses-under-v0": (
        case("v0.11", None, "cuda", "LMCacheConnectorV1", stage="create_connector", env={"VLLM_USE_V1": "0"}),
        "error ValueError@create_connector E-V1-CONNECTOR-UNDER-V0"),
    "§1.2-pre-seed-no-v0-refusal": (
        case("pre-seed", None, "cuda", "NixlConnector", stage="create_connector", env={"VLLM_USE_V1": "0"}),
        "off | warn W-A1"),
    "§6-pre-seed-no-vllm-use-v1-gate": (case("pre-seed", None, "xpu", env={"VLLM_USE_V1": "0"}), "on"),
    "§6-0.11-gate-still-there": (case("v0.11", None, "tpu", env={"VLLM_USE_V1": "0"}), "on"),
    # KVTransferConfig refuses a connector without kv_role when it is built, before VllmConfig: every era, config.
    "§3.3-seed-connector-without-role": (case("seed", True, connector="NixlConnector", kv_role=None), "error ValueError@config E-KV-ROLE"),
    "§3.3-0.34-connector-without-role": (case("v0.34", None, connector="ExampleConnector", kv_role=None), "error ValueError@config E-KV-ROLE"),
    # issue 36: what triggers the kv-offloading shortcut (0.13.0 config/vllm.py:477-487; 0.14.0 config/vllm.py:501-503)
    "§2.2-seed-offloading-backend-without-size": (case("seed", None, kv_offloading_backend="native"), "error ValueError@config E-OFFLOAD-NO-SIZE"),
    "§2.2-seed-offloading-size-alone-does-nothing": (case("seed", None, stage="create_connector", kv_offloading_size=4), "on"),
    "§6-0.14-offloading-size-alone-is-native": (
        case("v0.14", None, stage="create_connector", kv_offloading_size=4),
        "error ValueError@create_connector E-F(OffloadingConnector)",
    ),
    "§6-0.14-offloading-backend-alone-does-nothing": (case("v0.14", None, stage="create_connector", kv_offloading_backend="lmcache"), "on"),
    "§6-seed-no-hisparse": (case("seed", None, hisparse=True), "unknown"),
    # MultiConnector.__init__ constructs its children, so a MultiConnector child without a "connectors" list
    # asserts as the root would, in every era (measured on vLLM 0.13.0, 0.20.0-0.22.0, 0.33.0, 0.34.0); an
    # empty list does not.
    "§3.5-seed-nested-multi-without-connectors": (
        case("seed", True, stage="create_connector", **multi(child("MultiConnector"))),
        "error AssertionError@create_connector E-MULTI-NO-CONNECTORS",
    ),
    "§3.5-0.34-grandchild-multi-without-connectors": (
        case("v0.34", None, "cpu", stage="create_connector",
             **multi(child("MultiConnector", children=[child("MultiConnector")]))),
        "error AssertionError@create_connector E-MULTI-NO-CONNECTORS | warn W-C1",
    ),
    # The flag-None connector check builds each child's KVTransferConfig (kv_role) one child at a time and stops
    # at the first child without HMA support: 0.22.0 config/vllm.py:1458-1468, 0.23.0 multi_connector.py:161-167
    # (measured on vLLM 0.22.0 and 0.23.0).
    "§6-0.22-child-without-role-at-config": (
        case("v0.22", None, **multi(child("ExampleConnector", role=None))),
        "error ValueError@config E-KV-ROLE",
    ),
    "§6-0.22-non-hma-child-first-hides-a-child-without-role": (
        case("v0.22", None, **multi(child("ExampleConnector"), child("NixlConnector", role=None))),
        "off | warn W-22(MultiConnector)",
    ),
    "§3.3-0.23-non-hma-child-first-hides-a-child-without-role": (
        case("v0.23", None, **multi(child("ExampleConnector"), child("NixlConnector", role=None))),
        "off | warn W-C1",
    ),
    "§3.3-0.23-hma-child-then-child-without-role": (
        case("v0.23", None, **multi(child("NixlConnector"), child("ExampleConnector", role=None))),
        "error ValueError@config E-KV-ROLE",
    ),
    # vLLM checks a child's kv_role and looks its class up before it looks at the next child (MultiConnector's
    # constructor in every era; 0.34's config-time walk of the tree, depth first): an unknown class in an earlier
    # child is the error, not a later child's missing kv_role (measured on vLLM 0.13.0, 0.21.0-0.23.0, 0.33.0, 0.34.0).
    "§3.5-seed-unknown-child-before-a-child-without-role": (
        case("seed", True, stage="create_connector", **multi(child("FooConnector"), child("ExampleConnector", role=None))),
        "error ValueError@create_connector E-UNSUPPORTED-CONNECTOR(FooConnector)",
    ),
    "§3.4-0.34-nested-unknown-before-a-child-without-role": (
        case("v0.34", True, **multi(child("MultiConnector", children=[child("FooConnector")]), child("ExampleConnector", role=None))),
        "error ValueError@config E-UNSUPPORTED-CONNECTOR(FooConnector)",
    ),
    "§3.5-0.33-nested-multi-empty-list": (
        case("v0.33", True, stage="create_connector", **multi(child("MultiConnector", children=[]))),
        "off",
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_oracle_matches_spec(name):
    spec_case, summary = CASES[name]
    expectation = expected_outcome(spec_case)
    assert summarize(expectation.outcome) == summary, (
        f"{name}: the oracle predicts {summarize(expectation.outcome)!r} where the spec says {summary!r}; "
        f"rules that fired: {'; '.join(expectation.because)}"
    )


# §7 item 3: vLLM's test_hma_auto_config.py (0.33, support_hybrid_kv_cache patched True, flag None).
SECTION_7_0_33 = {
    "hma_connector": ({"kv_connector": "SimpleCPUOffloadConnector"}, "on"),
    "non_hma_connector": ({"kv_connector": "ExampleConnector"}, "off | warn W-C1"),
    "multi_all_hma": (multi(child("SimpleCPUOffloadConnector"), child("OffloadingConnector")), "on"),
    "multi_mixed": (multi(child("SimpleCPUOffloadConnector"), child("ExampleConnector")), "off | warn W-C1"),
}


@pytest.mark.parametrize("name", sorted(SECTION_7_0_33))
def test_oracle_matches_vllm_hma_auto_config(name):
    fields, summary = SECTION_7_0_33[name]
    outcome = expected_outcome(case("v0.33", None, "cpu", **fields)).outcome
    assert summarize(outcome) == summary, f"§7.3 test_hma_auto_config[{name}]: oracle says {summarize(outcome)!r}, vLLM's test {summary!r}"


def test_oracle_explicit_hma_with_non_hma_connector_errors_at_factory():
    """§7.3: the config builds; create_connector raises 'does not support HMA but HMA is enabled'."""
    config = expected_outcome(case("v0.33", False, "cpu", "ExampleConnector")).outcome
    factory = expected_outcome(case("v0.33", False, "cpu", "ExampleConnector", stage="create_connector")).outcome
    assert config["error"] is None and config["resolved_disable_hma"] is False, f"§7.3: config should build with HMA on, got {config}"
    assert factory["error"]["stage"] == "create_connector", f"§7.3: the factory should raise, got {factory}"
    assert "does not support HMA but HMA is enabled" in factory["error"]["text"], f"§7.3: wrong factory error {factory['error']}"


def test_oracle_hisparse_rejects_disabled_hma():
    """§7.4: HiSparse + disable_hybrid_kv_cache_manager=True on CUDA raises 'requires the hybrid KV cache manager'."""
    error = expected_outcome(case("v0.33", True, "cuda", hisparse=True)).outcome["error"]
    assert error and error["type"] == "ValueError" and "requires the hybrid KV cache manager" in error["text"], (
        f"§7.4: expected ValueError 'requires the hybrid KV cache manager', got {error}"
    )


def test_oracle_upstream_test_config_explicit_true_respected():
    """§7.6 (newer than 0.33): an explicit True is respected, also with an LMCache MP connector at config time."""
    outcome = expected_outcome(case("v0.33", True, "cuda", "LMCacheMPConnector")).outcome
    assert outcome["resolved_disable_hma"] is True and outcome["error"] is None, f"§7.6: explicit True should stay True, got {outcome}"
