"""Every rule and era of config-rules.md, with expectations written by hand from the spec.

Each row: (id, case, expected). `expected` keys: `resolved` (bool), `warnings` (ids from spec_texts, in
order), `error` ((type, substring, stage)), `unknown` (True). Section numbers refer to config-rules.md.
"""

from __future__ import annotations

import importlib.util

import pytest

from reference_impl.config import resolve_case
from tests.config import spec_texts as T

EXT = "tests.config.external_connectors"
CHUNK = {"attention_chunk_size": 8192}
ENV_ON = {"env": {"VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE": "1"}}
ENV_OFF = {"env": {"VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE": "0"}}


def multi(*children, **extra):
    return {"kv_connector": "MultiConnector", "multi_connector_children": list(children), **extra}


ROWS = [
    # --- section 1 / section 4: pre-seed (0.12.0) ------------------------------------------------
    ("pre-true-ignores-everything", {"profile": "pre-seed", "flag": True, "kv_connector": "NixlConnector", **CHUNK}, {"resolved": True, "warnings": []}),
    ("pre-absent-plain", {"profile": "pre-seed"}, {"resolved": False}),
    ("pre-false-equals-absent", {"profile": "pre-seed", "flag": False}, {"resolved": False}),
    ("pre-platform", {"profile": "pre-seed", "platform": "unspecified"}, {"resolved": True, "warnings": []}),
    ("pre-kv-transfer-W-A1", {"profile": "pre-seed", "kv_connector": "NixlConnector"}, {"resolved": True, "warnings": ["W-A1"]}),
    ("pre-W-A1-has-no-seed-suffix", {"profile": "pre-seed", "kv_connector": "NixlConnector"}, {"warning_absent": T.W_B1}),
    ("pre-kv-events", {"profile": "pre-seed", "kv_events": True}, {"resolved": True, "warnings": []}),
    ("pre-chunked-eagle", {"profile": "pre-seed", "speculative_method": "eagle", **CHUNK}, {"resolved": True, "warnings": []}),
    ("pre-chunked-env-off", {"profile": "pre-seed", **CHUNK}, {"resolved": True, "warnings": ["W-C"]}),
    ("pre-chunked-env-on", {"profile": "pre-seed", **CHUNK, **ENV_ON}, {"resolved": False, "warnings": []}),
    ("pre-order-W-A1-then-W-C", {"profile": "pre-seed", "kv_connector": "NixlConnector", **CHUNK}, {"resolved": True, "warnings": ["W-A1", "W-C"]}),
    ("pre-false-never-raises", {"profile": "pre-seed", "flag": False, "kv_events": True, "platform": "unspecified"}, {"resolved": True}),
    ("pre-factory-E-F-class-check", {"profile": "pre-seed", "flag": False, "kv_connector": "NixlConnector", "stage": "create_connector"}, {"resolved": True, "warnings": ["W-A1"], "error": None}),
    # --- 0.10.0 and 0.11.0 history (section 1.2) -----------------------------------------------------
    ("v0.10-xpu-unsupported", {"vllm_version": "0.10.0", "platform": "xpu"}, {"resolved": True}),
    ("v0.10-rocm-supported", {"vllm_version": "0.10.0", "platform": "rocm"}, {"resolved": False}),
    ("v0.10-chunked-without-eagle-keeps-hma", {"vllm_version": "0.10.0", **CHUNK}, {"resolved": False, "warnings": []}),
    ("v0.10-chunked-eagle", {"vllm_version": "0.10.0", "speculative_method": "eagle3", **CHUNK}, {"resolved": True}),
    ("v0.10-kv-transfer-silent", {"vllm_version": "0.10.0", "kv_connector": "NixlConnector"}, {"resolved": True, "warnings": []}),
    # a command line's connector without a role stops the parser, in the release's own words (measured through the
    # vllm target on 0.10.0, 0.11.0: kv_disagg_role; 0.12.0: kv_role)
    ("v0.10-cli-role-missing-disagg-text", {"vllm_version": "0.10.0", "cli_args": ["--kv-transfer-config", '{"kv_connector": "ExampleConnector"}']}, {"error": ("SystemExit", "Please specify kv_disagg_role when kv_connector is set", "cli_parse")}),
    ("v0.11-cli-role-missing-disagg-text", {"vllm_version": "0.11.0", "cli_args": ["--kv-transfer-config", '{"kv_connector": "ExampleConnector"}']}, {"error": ("SystemExit", "Please specify kv_disagg_role when kv_connector is set", "cli_parse")}),
    ("pre-cli-role-missing-role-text", {"vllm_version": "0.12.0", "cli_args": ["--kv-transfer-config", '{"kv_connector": "ExampleConnector"}']}, {"error": ("SystemExit", "Please specify kv_role when kv_connector is set", "cli_parse")}),
    # --hf-overrides' attention_chunk_size is the model's chunk size (measured on 0.13.0 through the vllm target)
    ("seed-cli-hf-overrides-chunk", {"vllm_version": "0.13.0", "cli_args": ["--hf-overrides", '{"attention_chunk_size": 8192}']}, {"resolved": True, "warnings": ["W-C"]}),
    # 0.10.x's SpeculativeConfig takes its Literal of methods, which has no plain "mtp" (0.10.0 config.py:2594-2595)
    ("v0.10-mtp-not-a-method", {"vllm_version": "0.10.0", "speculative_method": "mtp"}, {"error": ("ValidationError", "method: Input should be 'ngram', 'eagle', 'eagle3', 'medusa', 'mlp_speculator', 'draft_model' or 'deepseek_mtp'", "config")}),
    ("v0.11-mtp-a-method", {"vllm_version": "0.11.0", "speculative_method": "mtp"}, {"resolved": False}),
    # before 0.11.1 MultiConnector builds its children one at a time: a nested child's lookup failure comes before a
    # later child's missing kv_role (measured on 0.10.0 through the vllm target, random case seed 36 #88)
    ("v0.10-multi-children-one-at-a-time", {"vllm_version": "0.10.0", "flag": True, "stage": "create_connector", **multi({"kv_connector": "MultiConnector", "kv_role": "kv_both", "children": [{"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_consumer"}]}, {"kv_connector": "NixlConnector"})}, {"error": ("ModuleNotFoundError", "No module named 'lmcache'", "create_connector")}),
    ("pre-multi-children-configured-first", {"vllm_version": "0.12.0", "flag": True, "stage": "create_connector", **multi({"kv_connector": "MultiConnector", "kv_role": "kv_both", "children": [{"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_consumer"}]}, {"kv_connector": "NixlConnector"})}, {"error": ("ValueError", "Please specify kv_role when kv_connector is set", "create_connector")}),
    ("v0.10-vllm-use-v1-off-gate", {"vllm_version": "0.10.0", "kv_connector": "NixlConnector", "env": {"VLLM_USE_V1": "0"}}, {"resolved": False}),
    ("v0.11-cpu-supported", {"vllm_version": "0.11.0", "platform": "cpu"}, {"resolved": False}),
    ("v0.11-chunked-env-default-0", {"vllm_version": "0.11.0", **CHUNK}, {"resolved": True, "warnings": ["W-C"]}),
    ("v0.11-no-factory-check", {"vllm_version": "0.11.0", "kv_connector": "NixlConnector", "stage": "create_connector"}, {"resolved": True}),
    # measured on vLLM 0.11.0: with VLLM_USE_V1=0 the V1 factory refuses before anything else (factory.py:46)
    ("v0.11-v1-factory-under-v0", {"vllm_version": "0.11.0", "kv_connector": "NixlConnector", "stage": "create_connector", "env": {"VLLM_USE_V1": "0"}},
     {"error": ("ValueError", "Attempting to initialize a V1 Connector, but found envs.VLLM_USE_V1=False", "create_connector")}),
    # --- section 2: seed (0.13.0) ----------------------------------------------------------------
    ("seed-true-plain", {"profile": "seed", "flag": True}, {"resolved": True, "warnings": []}),
    ("seed-true-still-logs-W-C", {"profile": "seed", "flag": True, **CHUNK}, {"resolved": True, "warnings": ["W-C"]}),
    ("seed-false-plain", {"profile": "seed", "flag": False}, {"resolved": False}),
    ("seed-false-platform-E-B", {"profile": "seed", "flag": False, "platform": "unspecified"}, {"error": ("ValueError", T.E_B, "config")}),
    ("seed-false-tpu-E-B", {"profile": "seed", "flag": False, "platform": "tpu"}, {"error": ("ValueError", T.E_B, "config")}),
    ("seed-false-kv-events-E-B", {"profile": "seed", "flag": False, "kv_events": True}, {"error": ("ValueError", T.E_B, "config")}),
    ("seed-false-chunked-eagle-E-B", {"profile": "seed", "flag": False, "speculative_method": "mtp", **CHUNK}, {"error": ("ValueError", T.E_B, "config"), "warnings": []}),
    ("seed-false-chunked-W-C-then-E-B", {"profile": "seed", "flag": False, **CHUNK}, {"error": ("ValueError", T.E_B, "config"), "warnings": ["W-C"]}),
    ("seed-false-connector-passes-config", {"profile": "seed", "flag": False, "kv_connector": "LMCacheConnectorV1"}, {"resolved": False, "warnings": []}),
    ("seed-false-connector-fails-factory", {"profile": "seed", "flag": False, "kv_connector": "LMCacheConnectorV1", "stage": "create_connector"}, {"error": ("ValueError", "Connector LMCacheConnectorV1 does not support HMA but HMA is enabled", "create_connector")}),
    ("seed-false-multi-fails-factory", {"profile": "seed", "flag": False, "stage": "create_connector", **multi("NixlConnector")}, {"error": ("ValueError", "Connector MultiConnector does not support HMA", "create_connector")}),
    ("seed-none-kv-transfer-W-B1", {"profile": "seed", "kv_connector": "NixlConnector"}, {"resolved": True, "warnings": ["W-B1"]}),
    ("seed-none-W-C-before-W-B1", {"profile": "seed", "kv_connector": "NixlConnector", **CHUNK}, {"resolved": True, "warnings": ["W-C", "W-B1"]}),
    ("seed-none-kv-events", {"profile": "seed", "kv_events": True}, {"resolved": True, "warnings": []}),
    ("seed-none-platform", {"profile": "seed", "platform": "unspecified"}, {"resolved": True}),
    ("seed-none-plain", {"profile": "seed"}, {"resolved": False}),
    ("seed-none-cpu", {"profile": "seed", "platform": "cpu"}, {"resolved": False}),
    ("seed-none-chunked-env-on", {"profile": "seed", **CHUNK, **ENV_ON}, {"resolved": False, "warnings": []}),
    ("seed-none-chunked-mtp", {"profile": "seed", "speculative_method": "mtp", **CHUNK, **ENV_ON}, {"resolved": True, "warnings": []}),
    ("seed-none-chunked-ngram-not-eagle", {"profile": "seed", "speculative_method": "ngram", **CHUNK, **ENV_ON}, {"resolved": False}),
    ("seed-dflash-not-eagle-yet", {"profile": "seed", "speculative_method": "dflash", **CHUNK, **ENV_ON}, {"resolved": False}),
    ("seed-offloading-after-block", {"profile": "seed", "kv_offloading_backend": "native", "kv_offloading_size": 4}, {"resolved": False, "warnings": []}),
    ("seed-offloading-factory-E-F", {"profile": "seed", "kv_offloading_backend": "native", "kv_offloading_size": 4, "stage": "create_connector"}, {"error": ("ValueError", "Connector OffloadingConnector does not support HMA", "create_connector")}),
    ("seed-registry-first", {"profile": "seed", "flag": False, "kv_connector": "LMCacheConnectorV1", "kv_connector_module_path": EXT, "stage": "create_connector"}, {"error": ("ValueError", T.E_F, "create_connector")}),
    ("seed-external-hma-connector-works", {"profile": "seed", "flag": False, "kv_connector": "ExternalHMAConnector", "kv_connector_module_path": EXT, "stage": "create_connector"}, {"resolved": False}),
    ("seed-external-plain-connector-E-F", {"profile": "seed", "flag": False, "kv_connector": "ExternalPlainConnector", "kv_connector_module_path": EXT, "stage": "create_connector"}, {"error": ("ValueError", "Connector ExternalPlainConnector does not support HMA", "create_connector")}),
    # An unregistered name is vLLM's answer, not bad input: the seed looks the class up only in the factory.
    ("seed-unknown-name-at-config", {"profile": "seed", "kv_connector": "NoSuchConnector"}, {"resolved": True}),
    ("seed-unknown-name-at-create", {"profile": "seed", "stage": "create_connector", "kv_connector": "NoSuchConnector"}, {"error": ("ValueError", "Unsupported connector type: NoSuchConnector", "create_connector")}),
    ("seed-name-of-a-later-era-at-create", {"profile": "seed", "stage": "create_connector", "flag": True, "kv_connector": "HiSparseConnector"}, {"error": ("ValueError", "Unsupported connector type: HiSparseConnector", "create_connector")}),
    ("v033-removed-name-at-config", {"profile": "v0.33", "kv_connector": "P2pNcclConnector"}, {"error": ("ValueError", "Unsupported connector type: P2pNcclConnector", "config")}),
    ("v033-unknown-name-explicit-flag-passes-config", {"profile": "v0.33", "flag": True, "kv_connector": "NoSuchConnector"}, {"resolved": True}),
    ("seed-invalid-role", {"profile": "seed", "kv_connector": "ExampleConnector", "kv_role": "both"}, {"error": ("ValidationError", "kv_role: Input should be 'kv_producer', 'kv_both' or 'kv_consumer'", "config")}),
    ("v033-negative-offloading-size", {"profile": "v0.33", "kv_offloading_size": -4}, {"resolved": False}),
    ("v033-module-path-does-not-import", {"profile": "v0.33", "kv_connector": "C", "kv_connector_module_path": "no_such_module_xyz"}, {"error": ("ModuleNotFoundError", "No module named 'no_such_module_xyz'", "config")}),
    ("seed-unknown-child-name-at-create", {"profile": "seed", "stage": "create_connector", "flag": True, **multi("NixlConnector", "NoSuch")}, {"error": ("ValueError", "Unsupported connector type: NoSuch", "create_connector")}),
    ("seed-two-arg-constructor-not-an-error", {"profile": "seed", "flag": False, "kv_connector": "TwoArgConnector", "kv_connector_module_path": EXT, "stage": "create_connector"}, {"resolved": False}),
    # --- timeline (section 6) --------------------------------------------------------------------
    ("v0.14-env-default-on", {"vllm_version": "0.14.0", **CHUNK}, {"resolved": False, "warnings": []}),
    ("v0.14-env-explicit-off", {"vllm_version": "0.17.0", **CHUNK, **ENV_OFF}, {"resolved": True, "warnings": ["W-C"]}),
    ("v0.17-nixl-not-hma", {"vllm_version": "0.17.0", "flag": False, "kv_connector": "NixlConnector", "stage": "create_connector"}, {"error": ("ValueError", T.E_F, "create_connector")}),
    ("v0.18-nixl-hma", {"vllm_version": "0.18.0", "flag": False, "kv_connector": "NixlConnector", "stage": "create_connector"}, {"resolved": False}),
    ("v0.18-still-W-B1-for-hma-connector", {"vllm_version": "0.18.0", "kv_connector": "NixlConnector"}, {"resolved": True, "warnings": ["W-B1"]}),
    ("v0.19-kv-events-E-B", {"vllm_version": "0.19.0", "flag": False, "kv_events": True}, {"error": ("ValueError", T.E_B, "config")}),
    ("v0.20-kv-events-ignored", {"vllm_version": "0.20.0", "flag": False, "kv_events": True}, {"resolved": False}),
    ("v0.20-offloading-not-hma", {"vllm_version": "0.20.0", "kv_offloading_backend": "native", "kv_offloading_size": 4, "stage": "create_connector"}, {"error": ("ValueError", T.E_F, "create_connector")}),
    ("v0.21-offloading-hma", {"vllm_version": "0.21.0", "kv_offloading_backend": "native", "kv_offloading_size": 4, "stage": "create_connector"}, {"resolved": False}),
    ("v0.21-multi-still-unconditional", {"vllm_version": "0.21.0", **multi("NixlConnector")}, {"resolved": True, "warnings": ["W-B1"]}),
    ("v0.22-class-check-non-hma", {"vllm_version": "0.22.0", "kv_connector": "ExampleConnector"}, {"resolved": True, "warnings": ["W-22"], "warning_has": "connector ExampleConnector does not subclass"}),
    ("v0.22-class-check-hma", {"vllm_version": "0.22.0", "kv_connector": "NixlConnector"}, {"resolved": False, "warnings": []}),
    ("v0.22-multi-child-by-name", {"vllm_version": "0.22.0", **multi("NixlConnector", "ExampleConnector")}, {"resolved": True, "warning_has": "connector MultiConnector does not subclass"}),
    ("v0.22-multi-all-hma", {"vllm_version": "0.22.0", **multi("NixlConnector", "OffloadingConnector")}, {"resolved": False}),
    ("v0.22-offloading-before-block", {"vllm_version": "0.22.0", "kv_connector": "ExampleConnector", "kv_offloading_size": 4}, {"resolved": False, "warnings": []}),
    ("v0.23-empty-multi-not-hma", {"vllm_version": "0.23.0", **multi()}, {"resolved": True, "warnings": ["W-C1"]}),
    ("v0.23-hisparse-absent", {"vllm_version": "0.23.0", "hisparse": True}, {"unknown": True}),
    ("v0.30-hisparse-E-H", {"vllm_version": "0.30.0", "flag": True, "hisparse": True}, {"error": ("ValueError", T.E_H, "config")}),
    ("v0.32-E-B-text", {"vllm_version": "0.32.0", "flag": False, "kv_events": False, "platform": "unspecified"}, {"error": ("ValueError", T.E_B, "config")}),
    # --- section 3: 0.33.0 -----------------------------------------------------------------------
    ("v033-none-plain", {"profile": "v0.33"}, {"resolved": False}),
    ("v033-none-kv-events-ignored", {"profile": "v0.33", "kv_events": True}, {"resolved": False}),
    ("v033-false-kv-events-ok", {"profile": "v0.33", "flag": False, "kv_events": True}, {"resolved": False}),
    ("v033-false-platform-E-C", {"profile": "v0.33", "flag": False, "platform": "unspecified"}, {"error": ("ValueError", T.E_C, "config")}),
    ("v033-false-chunked-W-C-then-E-C", {"profile": "v0.33", "flag": False, **CHUNK, **ENV_OFF}, {"error": ("ValueError", T.E_C, "config"), "warnings": ["W-C"]}),
    ("v033-dflash-is-eagle", {"profile": "v0.33", "speculative_method": "dflash", **CHUNK}, {"resolved": True, "warnings": []}),
    ("v033-true-chunked-W-C", {"profile": "v0.33", "flag": True, **CHUNK, **ENV_OFF}, {"resolved": True, "warnings": ["W-C"]}),
    ("v033-W-C-before-W-C1", {"profile": "v0.33", "kv_connector": "ExampleConnector", **CHUNK, **ENV_OFF}, {"resolved": True, "warnings": ["W-C", "W-C1"]}),
    # 0.14.0's platforms/tpu.py defines no TpuPlatform: it re-exports tpu_inference's (measured on 0.17.0's matrix)
    ("v0.14-tpu-unknown", {"vllm_version": "0.17.0", "platform": "tpu"}, {"unknown": True}),
    ("v0.14-tpu-false-unknown", {"vllm_version": "0.14.0", "platform": "tpu", "flag": False}, {"unknown": True}),
    # the same outcome with the support True or False is known: 0.22.0's MultiConnector.__init__ asserts a
    # "connectors" list whichever way HMA was resolved (the oracle and the vllm target try both values too)
    ("v0.22-tpu-multi-without-children-asserts-either-way", {"vllm_version": "0.22.0", "platform": "tpu", "kv_connector": "MultiConnector", "stage": "create_connector"}, {"error": ("AssertionError", "", "create_connector")}),
    ("v0.22-tpu-multi-without-children-config-unknown", {"vllm_version": "0.22.0", "platform": "tpu", "kv_connector": "MultiConnector"}, {"unknown": True}),
    # vLLM 0.21.0 (measured with era v0.21's matrix): MultiConnector.__init__ asserts over its constructed
    # children (multi_connector.py:163-175): an empty list passes, a nested MultiConnector asserts on its own
    # children; the 2-argument constructor is a ValueError (factory.py:115-122); 0.20.0 looks a module path up
    # before the registry (factory.py:113-130); ExampleHiddenStatesConnector is registered, not yet SupportsHMA.
    ("v0.21-multi-empty-list-passes", {"vllm_version": "0.21.0", "flag": False, "stage": "create_connector", **multi()}, {"resolved": False, "error": None}),
    ("v0.21-multi-nested-non-hma-grandchild-asserts", {"vllm_version": "0.21.0", "flag": False, "stage": "create_connector", "kv_connector": "MultiConnector", "multi_connector_children": [{"kv_connector": "MultiConnector", "kv_role": "kv_both", "children": [{"kv_connector": "ExampleConnector", "kv_role": "kv_both"}]}, {"kv_connector": "NixlConnector", "kv_role": "kv_both"}]}, {"error": ("AssertionError", T.E_MULTI, "create_connector")}),
    ("v0.21-two-arg-constructor-error", {"vllm_version": "0.21.0", "flag": True, "kv_connector": "TwoArgConnector", "kv_connector_module_path": EXT, "stage": "create_connector"}, {"error": ("ValueError", T.E_DEPRECATED, "create_connector")}),
    ("v0.20-two-arg-constructor-not-an-error", {"vllm_version": "0.20.0", "flag": True, "kv_connector": "TwoArgConnector", "kv_connector_module_path": EXT, "stage": "create_connector"}, {"resolved": True, "error": None}),
    ("v0.21-hidden-states-registered-not-hma", {"vllm_version": "0.21.0", "flag": False, "kv_connector": "ExampleHiddenStatesConnector", "stage": "create_connector"}, {"error": ("ValueError", "ExampleHiddenStatesConnector", "create_connector")}),
    ("v033-tpu-unknown", {"profile": "v0.33", "platform": "tpu"}, {"unknown": True}),
    ("v033-tpu-true-known", {"profile": "v0.33", "platform": "tpu", "flag": True}, {"resolved": True}),
    ("v033-tpu-false-with-cl-known", {"profile": "v0.33", "platform": "tpu", "flag": False, **CHUNK, **ENV_OFF}, {"error": ("ValueError", T.E_C, "config")}),
    # section 7 item 3: test_hma_auto_config
    ("v033-hma-connector", {"profile": "v0.33", "platform": "cpu", "kv_connector": "SimpleCPUOffloadConnector"}, {"resolved": False}),
    ("v033-non-hma-connector", {"profile": "v0.33", "platform": "cpu", "kv_connector": "ExampleConnector"}, {"resolved": True, "warnings": ["W-C1"]}),
    ("v033-multi-all-hma", {"profile": "v0.33", "platform": "cpu", **multi("SimpleCPUOffloadConnector", "OffloadingConnector")}, {"resolved": False}),
    ("v033-multi-mixed", {"profile": "v0.33", "platform": "cpu", **multi("SimpleCPUOffloadConnector", "ExampleConnector")}, {"resolved": True, "warnings": ["W-C1"]}),
    ("v033-explicit-non-hma-config-ok", {"profile": "v0.33", "platform": "cpu", "flag": False, "kv_connector": "ExampleConnector"}, {"resolved": False}),
    ("v033-explicit-non-hma-factory", {"profile": "v0.33", "platform": "cpu", "flag": False, "kv_connector": "ExampleConnector", "stage": "create_connector"}, {"error": ("ValueError", T.E_F, "create_connector")}),
    ("v033-multi-empty", {"profile": "v0.33", **multi()}, {"resolved": True, "warnings": ["W-C1"]}),
    ("v033-multi-nested-mixed", {"profile": "v0.33", **multi({"kv_connector": "MultiConnector", "kv_role": "kv_both", "children": ["NixlConnector", "ExampleConnector"]})}, {"resolved": True, "warnings": ["W-C1"]}),
    ("v033-multi-nested-all-hma", {"profile": "v0.33", **multi({"kv_connector": "MultiConnector", "kv_role": "kv_both", "children": ["NixlConnector"]}, "OffloadingConnector")}, {"resolved": False}),
    ("v033-multi-child-without-role", {"profile": "v0.33", **multi({"kv_connector": "NixlConnector"})}, {"error": ("ValueError", T.E_KV_ROLE, "config")}),
    ("v033-multi-factory-mixed-E-F", {"profile": "v0.33", "flag": False, "stage": "create_connector", **multi("NixlConnector", "ExampleConnector")}, {"error": ("ValueError", "Connector MultiConnector does not support HMA", "create_connector")}),
    ("v033-renamed-multi-slips-through", {"profile": "v0.33", "kv_connector": "RenamedMultiConnector", "kv_connector_module_path": EXT, "multi_connector_children": ["ExampleConnector"]}, {"resolved": False, "warnings": []}),
    ("v033-renamed-multi-asserts", {"profile": "v0.33", "kv_connector": "RenamedMultiConnector", "kv_connector_module_path": EXT, "multi_connector_children": ["ExampleConnector"], "stage": "create_connector"}, {"error": ("AssertionError", T.E_MULTI, "create_connector")}),
    ("v033-empty-kv-transfer-config", {"profile": "v0.33", "cli_args": ["--kv-transfer-config", "{}"]}, {"error": ("ValueError", T.E_NAME_NOT_SET, "config")}),
    ("v033-unknown-name-in-cli", {"profile": "v0.33", "cli_args": ["--kv-transfer-config", '{"kv_connector": "NoSuchConnector", "kv_role": "kv_both"}']}, {"error": ("ValueError", "Unsupported connector type: NoSuchConnector", "config")}),
    ("v033-two-arg-constructor-error", {"profile": "v0.33", "kv_connector": "TwoArgConnector", "kv_connector_module_path": EXT}, {"error": ("ValueError", T.E_DEPRECATED, "config")}),
    ("v033-module-path-first", {"profile": "v0.33", "flag": False, "kv_connector": "LMCacheConnectorV1", "kv_connector_module_path": EXT, "stage": "create_connector"}, {"resolved": False}),
    ("v033-external-hma", {"profile": "v0.33", "kv_connector": "ExternalHMAConnector", "kv_connector_module_path": EXT}, {"resolved": False}),
    ("v033-external-plain", {"profile": "v0.33", "kv_connector": "ExternalPlainConnector", "kv_connector_module_path": EXT}, {"resolved": True, "warnings": ["W-C1"]}),
    ("v033-offloading-overwrites-connector", {"profile": "v0.33", "kv_connector": "ExampleConnector", "kv_offloading_size": 8, "stage": "create_connector"}, {"resolved": False, "warnings": []}),
    ("v033-hisparse-needs-cuda", {"profile": "v0.33", "hisparse": True, "platform": "cpu"}, {"error": ("ValueError", T.E_HISPARSE_CUDA, "config")}),
    ("v033-hisparse-cuda-ok", {"profile": "v0.33", "hisparse": True}, {"resolved": False}),
    ("v033-hisparse-true-E-H", {"profile": "v0.33", "hisparse": True, "flag": True}, {"error": ("ValueError", T.E_H, "config")}),
    ("v033-hisparse-connector-auto-enables", {"profile": "v0.33", "kv_connector": "HiSparseConnector", "platform": "cpu"}, {"error": ("ValueError", T.E_HISPARSE_CUDA, "config")}),
    ("v033-hisparse-direct-child-auto-enables", {"profile": "v0.33", "platform": "cpu", **multi("HiSparseConnector")}, {"error": ("ValueError", T.E_HISPARSE_CUDA, "config")}),
    ("v033-hisparse-grandchild-does-not", {"profile": "v0.33", "platform": "cpu", **multi({"kv_connector": "MultiConnector", "kv_role": "kv_both", "children": ["HiSparseConnector"]})}, {"resolved": False}),
    # --- vLLM 0.34.0 (read from its source; the same cases agree on the release) ------------------------
    ("v034-profile-and-version", {"vllm_version": "0.34.7"}, {"resolved": False}),
    ("v034-umbp-registered-hma", {"profile": "v0.34", "kv_connector": "UMBPStoreConnector"}, {"resolved": False, "warnings": []}),
    ("v034-umbp-unknown-in-033", {"profile": "v0.33", "kv_connector": "UMBPStoreConnector"}, {"error": ("ValueError", T.E_UNSUPPORTED, "config")}),
    ("v034-nixl-default-pull", {"profile": "v0.34", "flag": False, "kv_connector": "NixlConnector", "stage": "create_connector"}, {"resolved": False}),
    ("v034-nixl-push", {"profile": "v0.34", "kv_connector": "NixlConnector", "kv_connector_extra_config": {"transfer_mode": "push"}}, {"resolved": False}),
    ("v034-nixl-bad-mode-even-flag-true", {"profile": "v0.34", "flag": True, "kv_connector": "NixlConnector", "kv_connector_extra_config": {"transfer_mode": "sideways"}}, {"error": ("ValueError", T.E_NIXL_MODE + "'sideways'", "config")}),
    ("v034-nixl-mode-is-case-sensitive", {"profile": "v0.34", "kv_connector": "NixlConnector", "kv_connector_extra_config": {"transfer_mode": "PULL"}}, {"error": ("ValueError", T.E_NIXL_MODE + "'PULL'", "config")}),
    ("v034-nixl-mode-repr-of-a-number", {"profile": "v0.34", "kv_connector": "NixlConnector", "kv_connector_extra_config": {"transfer_mode": 1}}, {"error": ("ValueError", T.E_NIXL_MODE + "1", "config")}),
    ("v033-nixl-mode-ignored", {"profile": "v0.33", "kv_connector": "NixlConnector", "kv_connector_extra_config": {"transfer_mode": "sideways"}}, {"resolved": False}),
    ("v034-nixl-bad-mode-in-child", {"profile": "v0.34", "flag": False, **multi({"kv_connector": "NixlConnector", "kv_role": "kv_both", "kv_connector_extra_config": {"transfer_mode": "x"}})}, {"error": ("ValueError", T.E_NIXL_MODE + "'x'", "config")}),
    ("v034-unknown-name-explicit-flag-fails-config", {"profile": "v0.34", "flag": True, "kv_connector": "NoSuchConnector"}, {"error": ("ValueError", T.E_UNSUPPORTED, "config")}),
    ("v034-child-without-role-explicit-flag", {"profile": "v0.34", "flag": True, **multi({"kv_connector": "NixlConnector"})}, {"error": ("ValueError", T.E_KV_ROLE, "config")}),
    ("v033-child-without-role-explicit-flag-passes", {"profile": "v0.33", "flag": True, **multi({"kv_connector": "NixlConnector"})}, {"resolved": True}),
    ("v034-bad-grandchild-after-non-hma-child", {"profile": "v0.34", **multi("ExampleConnector", {"kv_connector": "MultiConnector", "kv_role": "kv_both", "children": ["FooConnector"]})}, {"error": ("ValueError", "Unsupported connector type: FooConnector", "config")}),
    ("v033-bad-grandchild-after-non-hma-child-unseen", {"profile": "v0.33", **multi("ExampleConnector", {"kv_connector": "MultiConnector", "kv_role": "kv_both", "children": ["FooConnector"]})}, {"resolved": True, "warnings": ["W-C1"]}),
    ("v034-tree-lookup-before-offloading-shortcut", {"profile": "v0.34", "kv_connector": "FooConnector", "kv_offloading_size": 4}, {"error": ("ValueError", "Unsupported connector type: FooConnector", "config")}),
    ("v034-children-in-extra-config", {"profile": "v0.34", "kv_connector": "MultiConnector", "kv_connector_extra_config": {"connectors": ["NixlConnector", "OffloadingConnector"]}}, {"resolved": False}),
    ("v034-hisparse-platform-reworded", {"profile": "v0.34", "hisparse": True, "platform": "rocm"}, {"error": ("ValueError", T.E_HISPARSE_PLATFORM, "config")}),
    ("v034-hisparse-tpu-backend-outside-vllm", {"profile": "v0.34", "hisparse": True, "platform": "tpu"}, {"unknown": True}),
    ("v034-hisparse-without-connector", {"profile": "v0.34", "hisparse": True}, {"error": ("ValueError", T.E_HISPARSE_NEEDS_CONNECTOR, "config")}),
    ("v034-hisparse-connector-needs-pool", {"profile": "v0.34", "kv_connector": "HiSparseConnector"}, {"error": ("ValueError", T.E_HISPARSE_NO_POOL, "config")}),
    ("v034-hisparse-pool-ok", {"profile": "v0.34", "kv_connector": "HiSparseConnector", "kv_connector_extra_config": {"host_pool_gib": 2}}, {"resolved": False}),
    ("v034-hisparse-pool-as-text", {"profile": "v0.34", "kv_connector": "HiSparseConnector", "kv_connector_extra_config": {"host_pool_gib": "0.5"}}, {"resolved": False}),
    ("v034-hisparse-pool-zero", {"profile": "v0.34", "kv_connector": "HiSparseConnector", "kv_connector_extra_config": {"host_pool_gib": 0}}, {"error": ("ValueError", T.E_HISPARSE_POOL_POSITIVE, "config")}),
    ("v034-hisparse-pool-not-a-number", {"profile": "v0.34", "kv_connector": "HiSparseConnector", "kv_connector_extra_config": {"host_pool_gib": "abc"}}, {"error": ("ValueError", "could not convert string to float: 'abc'", "config")}),
    ("v034-hisparse-pool-a-list", {"profile": "v0.34", "kv_connector": "HiSparseConnector", "kv_connector_extra_config": {"host_pool_gib": [1]}}, {"error": ("TypeError", "float() argument must be", "config")}),
    ("v034-hisparse-two-children", {"profile": "v0.34", **multi(*[{"kv_connector": "HiSparseConnector", "kv_role": "kv_both", "kv_connector_extra_config": {"host_pool_gib": 1}}] * 2)}, {"error": ("ValueError", T.E_HISPARSE_TWO, "config")}),
    ("v034-hisparse-child-pool", {"profile": "v0.34", **multi({"kv_connector": "HiSparseConnector", "kv_role": "kv_both", "kv_connector_extra_config": {"host_pool_gib": 1}}, "NixlConnector")}, {"resolved": False}),
    ("v034-hisparse-offloading-replaces-connector", {"profile": "v0.34", "kv_connector": "HiSparseConnector", "kv_connector_extra_config": {"host_pool_gib": 1}, "kv_offloading_size": 4}, {"error": ("ValueError", T.E_HISPARSE_NEEDS_CONNECTOR, "config")}),
    ("v034-hisparse-renamed-multi-does-not-enable", {"profile": "v0.34", "platform": "cpu", "kv_connector": "RenamedMultiConnector", "kv_connector_module_path": EXT, "multi_connector_children": ["HiSparseConnector"]}, {"resolved": False}),
    ("v033-hisparse-renamed-multi-does-not-enable", {"profile": "v0.33", "platform": "cpu", "kv_connector": "RenamedMultiConnector", "kv_connector_module_path": EXT, "multi_connector_children": ["HiSparseConnector"]}, {"resolved": False}),
    ("v033-unknown-method-pydantic-literal", {"profile": "v0.33", "speculative_method": "my_drafter"}, {"error": ("ValidationError", "1 validation error for SpeculativeConfig: method: Input should be 'ngram', 'draft_model'", "config")}),
    ("v033-hisparse-with-speculator-depends-on-model", {"profile": "v0.33", "hisparse": True, "speculative_method": "ngram"}, {"unknown": True}),
    ("v034-custom-method-uses-hidden-states", {"profile": "v0.34", "speculative_method": {"name": "my_drafter", "uses_target_hidden_states": True}, **CHUNK, **ENV_ON}, {"resolved": True, "warnings": []}),
    ("v034-custom-method-plain", {"profile": "v0.34", "speculative_method": {"name": "my_drafter"}, **CHUNK, **ENV_OFF}, {"resolved": True, "warnings": ["W-C"]}),
    ("v034-custom-method-plain-env-on", {"profile": "v0.34", "speculative_method": {"name": "my_drafter"}, **CHUNK, **ENV_ON}, {"resolved": False}),
    ("v033-custom-method-unknown", {"profile": "v0.33", "speculative_method": {"name": "my_drafter"}, **CHUNK}, {"unknown": True}),
    ("v034-dspark-uses-hidden-states", {"profile": "v0.34", "speculative_method": "dspark", **CHUNK, **ENV_ON}, {"resolved": True}),
    ("v034-unknown-method-refused", {"profile": "v0.34", "speculative_method": "my_drafter"}, {"error": ("ValueError", T.E_UNKNOWN_METHOD + "'my_drafter'", "config")}),
    ("v034-eagle-looks-up-shortcut-connector", {"profile": "v0.34", "flag": True, "speculative_method": "eagle", "kv_connector": "ExternalHMAConnector", "kv_connector_module_path": EXT, "kv_offloading_size": 4}, {"error": ("AttributeError", "Class OffloadingConnector not found in", "config")}),
    ("v034-ngram-does-not", {"profile": "v0.34", "flag": True, "speculative_method": "ngram", "kv_connector": "ExternalHMAConnector", "kv_connector_module_path": EXT, "kv_offloading_size": 4}, {"resolved": True}),
    # MultiConnector.__init__ constructs its children in order: a MultiConnector child without a "connectors"
    # list asserts, after every child's kv_role and class (measured on vLLM 0.13.0, 0.20.0-0.22.0, 0.33.0, 0.34.0).
    ("seed-nested-multi-without-connectors-asserts", {"profile": "seed", "flag": True, "stage": "create_connector", **multi({"kv_connector": "MultiConnector", "kv_role": "kv_both"})}, {"error": ("AssertionError", "", "create_connector")}),
    ("v034-nested-multi-without-connectors-after-nixl", {"profile": "v0.34", "flag": True, "stage": "create_connector", **multi("NixlConnector", {"kv_connector": "MultiConnector", "kv_role": "kv_both"})}, {"error": ("AssertionError", "", "create_connector")}),
    ("v022-nested-multi-empty-list-constructs", {"vllm_version": "0.22.0", "flag": True, "stage": "create_connector", **multi({"kv_connector": "MultiConnector", "kv_role": "kv_both", "children": []})}, {"resolved": True, "warnings": []}),
    ("v033-nested-multi-child-without-role", {"profile": "v0.33", "flag": True, "stage": "create_connector", **multi({"kv_connector": "MultiConnector", "kv_role": "kv_both", "children": [{"kv_connector": "ExampleConnector"}]})}, {"error": ("ValueError", T.E_KV_ROLE, "create_connector")}),
    # With the flag None, 0.22.0's class check (config/vllm.py:1458-1468) and 0.23+'s all_children_support_hma build
    # each child's KVTransferConfig, kv_role checked, one child at a time until the first without HMA support
    # (measured on vLLM 0.22.0, 0.23.0, 0.33.0 and 0.34.0; random cases of v0.22, seed 401, found the first three).
    ("v022-child-without-role-fails-at-config", {"vllm_version": "0.22.0", **multi({"kv_connector": "ExampleConnector"})}, {"error": ("ValueError", T.E_KV_ROLE, "config")}),
    ("v022-hma-child-then-child-without-role", {"vllm_version": "0.22.0", **multi("NixlConnector", {"kv_connector": "ExampleConnector"})}, {"error": ("ValueError", T.E_KV_ROLE, "config")}),
    ("v022-non-hma-child-ends-the-check-before-a-child-without-role", {"vllm_version": "0.22.0", **multi("ExampleConnector", {"kv_connector": "NixlConnector"})}, {"resolved": True, "warning_has": "connector MultiConnector does not subclass"}),
    ("v022-child-without-role-explicit-flag-waits-for-creation", {"vllm_version": "0.22.0", "flag": True, "stage": "create_connector", **multi({"kv_connector": "ExampleConnector"})}, {"error": ("ValueError", T.E_KV_ROLE, "create_connector")}),
    ("v023-non-hma-child-ends-the-check-before-a-child-without-role", {"vllm_version": "0.23.0", **multi("ExampleConnector", {"kv_connector": "NixlConnector"})}, {"resolved": True, "warnings": ["W-C1"]}),
    ("v023-hma-child-then-child-without-role", {"vllm_version": "0.23.0", **multi("NixlConnector", {"kv_connector": "ExampleConnector"})}, {"error": ("ValueError", T.E_KV_ROLE, "config")}),
    # A child's kv_role, then its class, before the next child (MultiConnector.__init__ in every era, 0.34's
    # config-time walk depth first): measured on vLLM 0.13.0, 0.21.0-0.23.0, 0.33.0 and 0.34.0.
    ("seed-unknown-child-before-a-child-without-role", {"profile": "seed", "flag": True, "stage": "create_connector", **multi({"kv_connector": "FooConnector", "kv_role": "kv_both"}, {"kv_connector": "ExampleConnector"})}, {"error": ("ValueError", "Unsupported connector type: FooConnector", "create_connector")}),
    ("v034-nested-unknown-before-a-child-without-role", {"profile": "v0.34", "flag": True, **multi({"kv_connector": "MultiConnector", "kv_role": "kv_both", "children": ["FooConnector"]}, {"kv_connector": "ExampleConnector"})}, {"error": ("ValueError", "Unsupported connector type: FooConnector", "config")}),
    ("v033-eagle-does-not", {"profile": "v0.33", "flag": True, "speculative_method": "eagle", "kv_connector": "ExternalHMAConnector", "kv_connector_module_path": EXT, "kv_offloading_size": 4}, {"resolved": True}),
]

if importlib.util.find_spec("mooncake") is None:
    # observed on vLLM 0.13.0: the module re-raises the missing package; 0.20.0 only warns
    ROWS.append(("seed-mooncake-import-error-in-factory", {"profile": "seed", "flag": True, "kv_connector": "MooncakeConnector", "stage": "create_connector"}, {"error": ("ImportError", "Please install mooncake", "create_connector")}))
    ROWS.append(("seed-mooncake-no-lookup-at-config", {"profile": "seed", "flag": True, "kv_connector": "MooncakeConnector"}, {"resolved": True}))
    ROWS.append(("v0.20-mooncake-only-warns", {"vllm_version": "0.20.0", "flag": True, "kv_connector": "MooncakeConnector", "stage": "create_connector"}, {"resolved": True}))

if importlib.util.find_spec("lmcache") is None:
    ROWS.append(("seed-lmcache-mp-import-error-in-factory", {"profile": "seed", "flag": True, "kv_connector": "LMCacheMPConnector", "stage": "create_connector"}, {"error": ("ModuleNotFoundError", "No module named 'lmcache'", "create_connector")}))
    ROWS.append(("v033-lmcache-mp-import-error", {"profile": "v0.33", "kv_connector": "LMCacheMPConnector"}, {"error": ("ModuleNotFoundError", "No module named 'lmcache'", "config")}))
    ROWS.append(("v033-lmcache-offloading-import-error", {"profile": "v0.33", "kv_offloading_backend": "lmcache", "kv_offloading_size": 4}, {"error": ("ModuleNotFoundError", "lmcache", "config")}))
    ROWS.append(("v034-lmcache-child-explicit-flag", {"profile": "v0.34", "flag": False, **multi("LMCacheMPConnector")}, {"error": ("ModuleNotFoundError", "No module named 'lmcache'", "config")}))


@pytest.mark.parametrize("row_id, case, expected", ROWS, ids=[row[0] for row in ROWS])
def test_rule(row_id, case, expected):
    result = resolve_case({"id": row_id, **case})
    where = f"case {row_id} {case}: got {result}"
    assert result["id"] == row_id
    if "error" in expected:
        want = expected["error"]
        if want is None:
            assert result["error"] is None, where
        else:
            assert result["error"] is not None, f"expected {want[0]} at {want[2]} containing {want[1]!r}; {where}"
            assert (result["error"]["type"], result["error"]["stage"]) == (want[0], want[2]), where
            assert want[1] in result["error"]["text"], where
            assert result["resolved_disable_hma"] is None, where
    else:
        assert result["error"] is None, where
    if expected.get("unknown"):
        assert result["unknown"], where
        assert result["resolved_disable_hma"] is None, where
    else:
        assert result["unknown"] is None, where
    if "resolved" in expected and expected.get("error") is None:
        assert result["resolved_disable_hma"] is expected["resolved"], where
    if "warnings" in expected:
        got = [warning["text"] for warning in result["warnings"]]
        assert len(got) == len(expected["warnings"]), f"expected warnings {expected['warnings']}; {where}"
        for want_id, text in zip(expected["warnings"], got):
            assert T.WARNINGS[want_id] in text, f"expected {want_id} in this position; {where}"
    if "warning_has" in expected:
        assert any(expected["warning_has"] in w["text"] for w in result["warnings"]), where
    if "warning_absent" in expected:
        assert not any(expected["warning_absent"] in w["text"] for w in result["warnings"]), where


# --- kv_cache_groups stage (config-rules.md 2.5 item 2, 3.5 item 4; hybrid-allocator.md 3.6) -------------
GROUP_ROWS = [
    # era, flag, layers, expected: ("groups", [kinds]) or ("error", text, W-U logged before?)
    ("seed", True, ["full", "full"], ("groups", ["full"], False)),
    ("seed", True, ["full", "sliding_window"], ("groups", ["full"], True)),
    ("seed", True, ["full", "mamba"], ("error", "failed to convert the KV cache specs to one unified type", True)),
    ("seed", True, ["sliding_window", "chunked_local"], ("error", "failed to convert the KV cache specs to one unified type", True)),
    ("v0.33", True, ["full", "sliding_window"], ("groups", ["full"], True)),
    ("v0.33", True, ["full", "chunked_local"], ("groups", ["full"], True)),
    ("v0.33", True, ["full", "mamba"], ("error", "Failed to promote local KV cache specs to one unified type.", False)),
    ("v0.33", None, ["full", "sliding_window"], ("groups", ["full", "sliding_window"], False)),
    ("v0.33", True, ["full"], ("groups", ["full"], False)),
]


@pytest.mark.parametrize("era, flag, layers, expected", GROUP_ROWS, ids=[f"{e}-{f}-{'+'.join(l)}" for e, f, l, _ in GROUP_ROWS])
def test_kv_cache_groups_stage(era, flag, layers, expected):
    result = resolve_case({"profile": era, "flag": flag, "layers": layers, "stage": "kv_cache_groups"})
    wu_logged = any("Hybrid KV cache manager is disabled for this hybrid model" in w["text"] for w in result["warnings"])
    if expected[0] == "groups":
        assert result["error"] is None, result
        assert sorted({g["kind"] for g in result["kv_cache_groups"]}) == sorted(expected[1]), result
        assert wu_logged is expected[2], result
    else:
        assert result["error"] == {"id": None, "type": "ValueError", "stage": "kv_cache_groups", "text": expected[1]} or (
            expected[1] in result["error"]["text"] and result["error"]["stage"] == "kv_cache_groups"
        ), result
        assert wu_logged is expected[2], f"W-U before the error: {expected[2]}; {result}"
