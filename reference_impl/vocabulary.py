"""The words kvconform's three floors share, each written once: case keys and their defaults, stages and their
order, platforms, flag values, the config matrix's fixture ids with their labels and descriptions, and message ids.

The resolver (`reference_impl.config`), the targets and the report (`harness`) and the suites (`suites`) all
import these words from here, so a new matrix option or message is declared in one place, and
`tests/test_vocabulary.py` fails when a decision table, a golden file or the report uses a word that is not
declared here. This module is a leaf: it imports nothing of the project (the reference engine imports neither
`harness` nor `suites`, so the shared words live on its floor).

Words, never rules: what an era does with a flag, a platform or a connector stays with the resolver
(`reference_impl.config.eras`) and, independently, with the oracle's reviewed tables (`suites/config/tables/`).
The two share these words and nothing else, so a disagreement between them still points at a bug in one of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping

# -- The case schema of `kvconform resolve` (README, "The resolve schema") ---------------------------------------

#: Every key a case may have, with its default.
CASE_DEFAULTS: Mapping[str, Any] = MappingProxyType({
    "id": None,
    "vllm_version": None,
    "profile": None,
    "stage": None,  # config, or kv_cache_groups when layers are given
    "flag": None,
    "cli_args": None,
    "platform": "cuda",
    "kv_connector": None,
    "kv_connector_module_path": None,
    "kv_role": "kv_both",
    "multi_connector_children": None,
    "kv_connector_extra_config": None,
    "kv_events": False,
    "attention_chunk_size": None,
    "speculative_method": None,  # a built-in method name, or {"name", "uses_target_hidden_states"} (custom, 0.34+)
    "env": None,
    "hisparse": False,
    "kv_offloading_backend": None,
    "kv_offloading_size": None,
    "layers": None,
})

#: The environment variables a case's `env` may set that the resolver reads (each an integer vLLM reads as
#: `bool(int(value))`).
ENV_VARS: tuple[str, ...] = ("VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE", "VLLM_USE_V1", "VLLM_USE_SIMPLE_KV_OFFLOAD")

#: The values of a case's `layers` list (and of the allocator suite's layer kinds).
LAYER_KINDS: tuple[str, ...] = ("full", "sliding_window", "chunked_local", "mamba")
#: The values of a case's `kv_offloading_backend` (vLLM's `--kv-offloading-backend` choices).
OFFLOADING_BACKENDS: tuple[str, ...] = ("native", "lmcache")

# -- Stages ------------------------------------------------------------------------------------------------------

#: The stages a case can run to, in engine order: the KV cache is grouped before the connector is created with
#: its KVCacheConfig, so a later stage's outcome includes the earlier stages' warnings and errors.
STAGES: tuple[str, ...] = ("cli_parse", "config", "kv_cache_groups", "create_connector")
#: Stages an outcome's error may name that are not the engine's: a case that does not follow the schema, and a
#: failure of the resolver itself.
OUTCOME_ONLY_STAGES: tuple[str, ...] = ("input", "internal")

# -- Platforms ---------------------------------------------------------------------------------------------------

#: The platforms a case can name, in the report's column order.
PLATFORMS: tuple[str, ...] = ("cuda", "rocm", "xpu", "cpu", "tpu", "unspecified")
#: The `platform` value that asks for the platform of the machine the case runs on.
AUTO_PLATFORM = "auto"
PLATFORM_CHOICES: tuple[str, ...] = (*PLATFORMS, AUTO_PLATFORM)

# -- Flag values (`disable_hybrid_kv_cache_manager`) -------------------------------------------------------------

#: The matrix's short id of each flag value (in test ids), in the report's column order.
FLAGS: Mapping[str, bool | None] = MappingProxyType({"N": None, "T": True, "F": False})
#: How the report writes each flag value; `ENABLE_FLAG_LABEL` replaces the False spelling in the eras whose
#: command line has `--enable-hybrid-kv-cache-manager` (which eras those are, the era tables say).
FLAG_LABELS: Mapping[bool | None, str] = MappingProxyType({None: "auto", True: "--disable-…", False: "--no-disable-…"})
ENABLE_FLAG_LABEL = "--enable-…"

# -- The config matrix's fixture ids: labels and descriptions ----------------------------------------------------


@dataclass(frozen=True)
class Term:
    """A matrix id's label (shown in the report's tables) and what the configuration is (its legend)."""

    label: str
    description: str


#: The matrix's connector id of the configuration without a connector (no `--kv-transfer-config`).
NO_CONNECTOR = "noconn"
#: The matrix's feature id of the configuration without features.
NO_FEATURES = "none"

#: Feature id -> its label and description (the case fields each sets are the suite's: `suites.config.matrix`).
FEATURES: Mapping[str, Term] = MappingProxyType({
    NO_FEATURES: Term("no feature", "none of the features below"),
    "kv_events": Term("KV events", "a `--kv-events-config` is present"),
    "chunked": Term("chunked local attention", "the model uses chunked local attention; "
                    "`VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE` at the release's default"),
    "chunked_env1": Term("chunked local, env 1", "chunked local attention with "
                         "`VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1`"),
    "chunked_env0": Term("chunked local, env 0", "chunked local attention with "
                         "`VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=0`"),
    "chunked_eagle": Term("chunked local + EAGLE", "chunked local attention with an EAGLE speculator"),
    "hisparse": Term("HiSparse", "HiSparse is configured"),
    "offload_native": Term("offloading, native", "`--kv-offloading-backend native --kv-offloading-size 4`"),
    "offload_lmcache": Term("offloading, lmcache", "`--kv-offloading-backend lmcache --kv-offloading-size 4`"),
    "chunked_custom_ths": Term("chunked local + custom drafter (hidden states)", "chunked local attention with a "
                               "custom speculative method whose `uses_target_hidden_states` is true (0.34+)"),
    "chunked_custom": Term("chunked local + custom drafter", "chunked local attention with a custom speculative "
                           "method whose `uses_target_hidden_states` is false (0.34+)"),
    "offload_size": Term("offloading size alone", "`--kv-offloading-size 4` without a backend (vLLM's default "
                         "backend: none before 0.14, native from 0.14)"),
    "offload_backend": Term("offloading backend alone", "`--kv-offloading-backend native` without a size"),
    "offload_size_simple": Term("offloading size, simple env", "`--kv-offloading-size 4` with "
                                "`VLLM_USE_SIMPLE_KV_OFFLOAD=1`"),
    "eagle": Term("EAGLE alone", "an EAGLE speculator, no chunked local attention"),
    "v1_off": Term("VLLM_USE_V1=0", "`VLLM_USE_V1=0` (the releases whose HMA block is gated on it, before 0.11.1)"),
    "eagle_offload_lmcache": Term("EAGLE + offloading, lmcache", "an EAGLE speculator with `--kv-offloading-backend "
                                  "lmcache --kv-offloading-size 4`"),
})

#: Connector id -> its label and description, for the matrix's own configurations (how each is built from an
#: era's registry is the suite's: `suites.config.matrix`). A connector vLLM registers is its own id and label,
#: and so is the made-up `UNREGISTERED_CONNECTOR`; `MultiConnector` alone is both.
CONNECTOR_FIXTURES: Mapping[str, Term] = MappingProxyType({
    NO_CONNECTOR: Term("no connector", "no `--kv-transfer-config`"),
    "ExternalHMA": Term("external, SupportsHMA", "an out-of-tree connector loaded by `kv_connector_module_path` "
                        "that subclasses `SupportsHMA`"),
    "ExternalPlain": Term("external, not HMA", "an out-of-tree connector loaded by `kv_connector_module_path`, "
                          "not `SupportsHMA`"),
    "ExternalTwoArg": Term("external, 2-arg constructor", "an out-of-tree connector with the old two-argument "
                           "constructor (no `kv_cache_config`), not `SupportsHMA`"),
    "LMCacheConnectorV1ByPath": Term("LMCacheConnectorV1 by module path", "`LMCacheConnectorV1` named together "
                                     "with an external `kv_connector_module_path` (which lookup wins)"),
    "MultiConnector": Term("MultiConnector, no \"connectors\" key", "`MultiConnector` whose "
                           "`kv_connector_extra_config` has no `\"connectors\"` key"),
    "MultiPlain": Term("MultiConnector of non-HMA children", "`MultiConnector` with `ExampleConnector` and "
                       "`LMCacheConnectorV1` (neither is `SupportsHMA`)"),
    "MultiEmpty": Term("MultiConnector, empty list", "`MultiConnector` with `\"connectors\": []`"),
    "MultiAllHMA": Term("MultiConnector of HMA children", "`MultiConnector` whose two children are `SupportsHMA`"),
    "MultiMixed": Term("MultiConnector, HMA + non-HMA child", "`MultiConnector` with one `SupportsHMA` child and "
                       "`ExampleConnector`"),
    "MultiNested": Term("MultiConnector in a MultiConnector", "a `MultiConnector` child that is itself a "
                        "`MultiConnector` (children of the era's kind), plus one more child"),
    "MultiNestedMixed": Term("nested MultiConnector, non-HMA grandchild", "a nested `MultiConnector` whose only "
                             "child is `ExampleConnector`, plus one `SupportsHMA` child"),
    "MultiNoRole": Term("MultiConnector, children without kv_role", "`MultiConnector` whose children set "
                        "`kv_connector` but no `kv_role`"),
    "MultiHiSparse": Term("MultiConnector with HiSparse", "`MultiConnector` with a `HiSparseConnector` child "
                          "(switches HiSparse on)"),
    "MultiNestedHiSparse": Term("HiSparse as a grandchild", "`HiSparseConnector` inside a nested "
                                "`MultiConnector` (too deep to switch HiSparse on)"),
    "NixlPush": Term("Nixl, push mode", "`NixlConnector` with `transfer_mode` \"push\" (0.34: `NixlPushConnector`)"),
    "NixlBadMode": Term("Nixl, unknown mode", "`NixlConnector` with `transfer_mode` \"sideways\" (refused from 0.34)"),
    "MultiNixlBadMode": Term("MultiConnector, Nixl child in unknown mode", "`MultiConnector` whose `NixlConnector` "
                             "child has `transfer_mode` \"sideways\""),
    "MultiBadGrandchild": Term("unknown grandchild", "`MultiConnector` with an HMA child and a nested "
                               "`MultiConnector` whose child is `FooConnector`"),
    "HiSparsePool": Term("HiSparse with a host pool", "`HiSparseConnector` with `host_pool_gib` 4"),
    "HiSparseZeroPool": Term("HiSparse, zero host pool", "`HiSparseConnector` with `host_pool_gib` 0"),
    "MultiHiSparsePool": Term("MultiConnector with HiSparse and a pool", "`MultiConnector` with a "
                              "`HiSparseConnector` child (`host_pool_gib` 4) and an HMA child"),
    "MultiTwoHiSparse": Term("two HiSparse children", "`MultiConnector` with two `HiSparseConnector` children"),
    "NoRole": Term("connector without kv_role", "`ExampleConnector` in a `--kv-transfer-config` without `kv_role` "
                   "(vLLM's default role: none)"),
    "RenamedMulti": Term("renamed MultiConnector subclass", "a `MultiConnector` subclass registered under "
                         "another name, with an `ExampleConnector` child"),
})
#: A connector name no release registers (the matrix asks every era about it).
UNREGISTERED_CONNECTOR = "FooConnector"

#: The matrix's short id of each stage it runs to (in test ids) -> the stage.
MATRIX_STAGES: Mapping[str, str] = MappingProxyType({"config": "config", "create": "create_connector"})

# -- Message ids -------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Message:
    """A declared message: its kind and the fragment of its text that names it wherever a target meets it."""

    kind: str  # "warning" or "error"
    #: A regular expression (dot matches newline) found in the text of every release that says the message, so a
    #: release that rewords the rest keeps the id; None for the one message without text (see its entry).
    fragment: str | None


#: Message id -> its record: the ids the oracle's tables (`suites/config/tables/messages.toml`), the golden files,
#: the report and the resolver's texts (`reference_impl.config.messages`, one constant per id, named like it)
#: cite; `docs/rules.md` has a row for each. The targets give a text the id of the first record whose fragment it
#: holds (`reference_impl.config.message_ids`), in this order: W-B1's text holds W-A1's fragment, so W-B1 comes
#: first. The fragments were reviewed against the texts of every release (config-rules.md §1.3, §2.4, §3.4, the
#: errors of §3.3/§10; tests/config/test_message_ids.py matches every text of both evaluators against its id).
MESSAGES: Mapping[str, Message] = MappingProxyType({
    "W-B1": Message("warning", r"because `--kv-transfer-config` is set\..*--no-disable-hybrid-kv-cache-manager to start"),
    "W-A1": Message("warning", r"because `--kv-transfer-config` is set\."),
    "W-22": Message("warning", r"because connector \S+ does not subclass `SupportsHMA`"),
    "W-C1": Message("warning", r"because `--kv-transfer-config` selects a KV connector that does not support it"),
    "W-C": Message("warning", r"latency regression when using chunked local attention"),
    "W-U": Message("warning", r"Hybrid KV cache manager is disabled for this hybrid model"),
    "E-B": Message("error", r"explicitly enabled but is not supported.*--no-disable-hybrid-kv-cache-manager"),
    "E-C": Message("error", r"explicitly enabled but is not supported.*--enable-hybrid-kv-cache-manager"),
    "E-F": Message("error", r"does not support HMA but HMA is enabled"),
    "E-H": Message("error", r"HiSparse requires the hybrid KV cache manager"),
    "E-HISPARSE-CUDA": Message("error", r"HiSparse currently requires NVIDIA CUDA"),
    "E-HISPARSE-PLATFORM": Message("error", r"The current platform does not support HiSparse"),
    "E-HISPARSE-NEEDS-CONNECTOR": Message("error",
                                          r"HiSparse requires a KV transfer config with HiSparseConnector and host_pool_gib"),
    "E-HISPARSE-TWO": Message("error", r"Only one HiSparseConnector may be configured"),
    "E-HISPARSE-NO-HOST-POOL": Message("error", r"HiSparseConnector requires host_pool_gib"),
    "E-HISPARSE-HOST-POOL-NOT-POSITIVE": Message("error", r"HiSparseConnector host_pool_gib must be positive"),
    "E-NIXL-TRANSFER-MODE": Message("error", r"Invalid NixlConnector transfer_mode: "),
    "E-UNKNOWN-SPECULATIVE-METHOD": Message("error", r"Unknown speculative method .*registered custom methods"),
    "E-MULTI-ASSERT": Message("error", r"HMA should not be enabled unless all sub-connectors support it"),
    "E-MULTI-NO-CONNECTORS": Message("error", None),  # MultiConnector's bare assert: an empty AssertionError
    "E-KV-ROLE": Message("error", r"Please specify kv_role when kv_connector is set"),
    "E-KV-DISAGG-ROLE": Message("error", r"Please specify kv_disagg_role when kv_connector is set"),
    "E-V1-CONNECTOR-UNDER-V0": Message("error",
                                       r"Attempting to initialize a V1 Connector, but found envs\.VLLM_USE_V1=False"),
    "E-TWO-ARG": Message("error", r"uses deprecated 2-argument constructor signature"),
    "E-HIDDEN-STATES-CHUNKED-PREFILL": Message("error",
                                               r"ExampleHiddenStatesConnector does not support chunked prefill"),
    "E-OFFLOAD-NO-SIZE": Message("error", r"You must set kv_offloading_size when kv_offloading_backend is set"),
    "E-NO-LMCACHE": Message("error", r"No module named 'lmcache'"),
    "E-NO-MOONCAKE": Message("error", r"Please install mooncake"),
    "E-UNSUPPORTED-CONNECTOR": Message("error", r"Unsupported connector type: "),
    "E-CLASS-NOT-FOUND": Message("error", r"Class \S+ not found in \S+"),
})

