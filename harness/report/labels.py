"""Readable names for the config matrix's fixture ids and flag values, and the legend that explains them.

The matrix names its configurations with short ids (`noconn`, `ExternalTwoArg`, `chunked_env0`, ...) that
stay in `results.json` and in test ids; the report shows these labels instead and lists every id it uses
in a legend. A built-in connector's id is its vLLM name and is shown as it is.
"""

from __future__ import annotations

from typing import Any

from harness.eras import ERA_IDS

# id -> (label shown in tables, what the configuration is)
CONNECTORS: dict[str, tuple[str, str]] = {
    "noconn": ("no connector", "no `--kv-transfer-config`"),
    "none": ("no connector", "no `--kv-transfer-config`"),
    "ExternalHMA": ("external, SupportsHMA", "an out-of-tree connector loaded by `kv_connector_module_path` "
                                             "that subclasses `SupportsHMA`"),
    "ExternalPlain": ("external, not HMA", "an out-of-tree connector loaded by `kv_connector_module_path`, "
                                           "not `SupportsHMA`"),
    "ExternalTwoArg": ("external, 2-arg constructor", "an out-of-tree connector with the old two-argument "
                                                      "constructor (no `kv_cache_config`), not `SupportsHMA`"),
    "LMCacheConnectorV1ByPath": ("LMCacheConnectorV1 by module path", "`LMCacheConnectorV1` named together "
                                 "with an external `kv_connector_module_path` (which lookup wins)"),
    "MultiConnector": ("MultiConnector, no \"connectors\" key", "`MultiConnector` whose "
                       "`kv_connector_extra_config` has no `\"connectors\"` key"),
    "MultiPlain": ("MultiConnector of non-HMA children", "`MultiConnector` with `ExampleConnector` and "
                   "`LMCacheConnectorV1` (neither is `SupportsHMA`)"),
    "MultiEmpty": ("MultiConnector, empty list", "`MultiConnector` with `\"connectors\": []`"),
    "MultiAllHMA": ("MultiConnector of HMA children", "`MultiConnector` whose two children are `SupportsHMA`"),
    "MultiMixed": ("MultiConnector, HMA + non-HMA child", "`MultiConnector` with one `SupportsHMA` child and "
                   "`ExampleConnector`"),
    "MultiNested": ("MultiConnector in a MultiConnector", "a `MultiConnector` child that is itself a "
                    "`MultiConnector` (children of the era's kind), plus one more child"),
    "MultiNestedMixed": ("nested MultiConnector, non-HMA grandchild", "a nested `MultiConnector` whose only "
                         "child is `ExampleConnector`, plus one `SupportsHMA` child"),
    "MultiNoRole": ("MultiConnector, children without kv_role", "`MultiConnector` whose children set "
                    "`kv_connector` but no `kv_role`"),
    "MultiHiSparse": ("MultiConnector with HiSparse", "`MultiConnector` with a `HiSparseConnector` child "
                      "(switches HiSparse on)"),
    "MultiNestedHiSparse": ("HiSparse as a grandchild", "`HiSparseConnector` inside a nested "
                            "`MultiConnector` (too deep to switch HiSparse on)"),
    "NixlPush": ("Nixl, push mode", "`NixlConnector` with `transfer_mode` \"push\" (0.34: `NixlPushConnector`)"),
    "NixlBadMode": ("Nixl, unknown mode", "`NixlConnector` with `transfer_mode` \"sideways\" (refused from 0.34)"),
    "MultiNixlBadMode": ("MultiConnector, Nixl child in unknown mode", "`MultiConnector` whose `NixlConnector` child "
                         "has `transfer_mode` \"sideways\""),
    "MultiBadGrandchild": ("unknown grandchild", "`MultiConnector` with an HMA child and a nested `MultiConnector` "
                           "whose child is `FooConnector`"),
    "HiSparsePool": ("HiSparse with a host pool", "`HiSparseConnector` with `host_pool_gib` 4"),
    "HiSparseZeroPool": ("HiSparse, zero host pool", "`HiSparseConnector` with `host_pool_gib` 0"),
    "MultiHiSparsePool": ("MultiConnector with HiSparse and a pool", "`MultiConnector` with a `HiSparseConnector` "
                          "child (`host_pool_gib` 4) and an HMA child"),
    "MultiTwoHiSparse": ("two HiSparse children", "`MultiConnector` with two `HiSparseConnector` children"),
    "RenamedMulti": ("renamed MultiConnector subclass", "a `MultiConnector` subclass registered under "
                     "another name, with an `ExampleConnector` child"),
}

FEATURES: dict[str, tuple[str, str]] = {
    "none": ("no feature", "none of the features below"),
    "kv_events": ("KV events", "a `--kv-events-config` is present"),
    "chunked": ("chunked local attention", "the model uses chunked local attention; "
                "`VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE` at the release's default"),
    "chunked_env1": ("chunked local, env 1", "chunked local attention with "
                     "`VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1`"),
    "chunked_env0": ("chunked local, env 0", "chunked local attention with "
                     "`VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=0`"),
    "chunked_eagle": ("chunked local + EAGLE", "chunked local attention with an EAGLE speculator"),
    "hisparse": ("HiSparse", "HiSparse is configured"),
    "offload_native": ("offloading, native", "`--kv-offloading-backend native --kv-offloading-size 4`"),
    "offload_lmcache": ("offloading, lmcache", "`--kv-offloading-backend lmcache --kv-offloading-size 4`"),
    "chunked_custom_ths": ("chunked local + custom drafter (hidden states)", "chunked local attention with a custom "
                           "speculative method whose `uses_target_hidden_states` is true (0.34+)"),
    "chunked_custom": ("chunked local + custom drafter", "chunked local attention with a custom speculative method "
                       "whose `uses_target_hidden_states` is false (0.34+)"),
    "eagle_offload_lmcache": ("EAGLE + offloading, lmcache", "an EAGLE speculator with `--kv-offloading-backend lmcache "
                              "--kv-offloading-size 4`"),
}

_FIRST_TRI_STATE_ERA = "seed"  # 0.13.0: the flag became tri-state (absent = auto)
_FIRST_ENABLE_ERA = "v0.33"  # 0.33.0: --enable-hybrid-kv-cache-manager


def connector_label(connector: str) -> str:
    """The table label of a connector id (a built-in connector's vLLM name stays as it is)."""
    return CONNECTORS.get(connector, (connector, ""))[0]


def feature_label(features: str) -> str:
    """The table label of a feature id."""
    return FEATURES.get(features, (features, ""))[0]


def _era_at_least(era: str, first: str) -> bool:
    return era in ERA_IDS and ERA_IDS.index(era) >= ERA_IDS.index(first)


def flag_label(flag: Any, era: str | None = None) -> str:
    """The flag as the user writes it in `era`: 'auto', '--disable-…', '--no-disable-…' or '--enable-…'."""
    if flag is None:
        return "auto"
    if flag is True:
        return "--disable-…"
    if flag is False:
        return "--enable-…" if era is not None and _era_at_least(era, _FIRST_ENABLE_ERA) else "--no-disable-…"
    return str(flag)


FLAG_LEGEND = (
    "Flag columns: **auto** = the flag absent (`disable_hybrid_kv_cache_manager` is None: vLLM decides; before "
    "0.13.0 the field had no None and absent meant False); **--disable-…** = `--disable-hybrid-kv-cache-manager` "
    "(True: HMA off); **--no-disable-…** = `--no-disable-hybrid-kv-cache-manager` (False: HMA demanded), "
    "spelled **--enable-…** = `--enable-hybrid-kv-cache-manager` from 0.33.0."
)


def legend_rows(connectors: set[str], features: set[str]) -> list[list[str]]:
    """Rows 'label | id | what it is' for the ids the report uses that have a readable label."""
    rows = []
    for kind, table, used in (("feature", FEATURES, features), ("connector", CONNECTORS, connectors)):
        for ident, (shown, meaning) in table.items():
            if ident in used and not (kind == "connector" and ident == "none" and "noconn" in used):
                rows.append([shown, f"`{ident}`", kind, meaning])
    return rows
