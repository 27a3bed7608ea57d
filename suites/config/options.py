"""The options of a case that the config draws must give on their own: each present, each absent, each alone.

A vLLM default changes behaviour only where an option is left out (from 0.14.0 `--kv-offloading-size 4` alone
installs the default "native" backend's connector; a connector without `kv_role` is refused; NixlConnector
without `transfer_mode` is a pull connector), so a generator that always gives an option together with another
never exercises the default. The options are every key of the case schema (`reference_impl.vocabulary.
CASE_DEFAULTS`) that describes the configuration, and each environment variable the resolver reads (`ENV_VARS`);
`NOT_OPTIONS` says why each other key is none. `tests/config/test_option_draws.py` fails when a key is in neither,
and when the matrix, the random cases or the connector trees never leave an option out or never set it alone.
"""

from __future__ import annotations

from typing import Any, Iterable

from harness.eras import ERA_IDS
from reference_impl.vocabulary import CASE_DEFAULTS, CASE_KEYS, ENV_VARS
from suites.config.tables import era_table

#: Case keys that are not options of the configuration, and why.
NOT_OPTIONS: dict[str, str] = {
    "id": "names the case",
    "vllm_version": "selects the release, not a configuration of it",
    "profile": "selects the release, not a configuration of it",
    "stage": "how far the case runs (every draw runs both matrix stages)",
    "platform": "the machine vLLM runs on, drawn over every platform, never absent",
    "cli_args": "another spelling of the same options (the command-line parser has its own tests)",
    "layers": "the model's layer kinds, read only at stage kv_cache_groups (the allocator suites and "
              "tests/config/test_resolve_properties.py draw them)",
    "env": "a holder: each variable in ENV_VARS is an option of its own",
}

#: Option -> the options it is read together with (present in its "alone" case): a connector's role, module path,
#: children and extra config belong to a connector with a role; an environment variable to what it modifies.
PREREQUISITES: dict[str, tuple[str, ...]] = {
    "kv_role": ("kv_connector",),
    "kv_connector_module_path": ("kv_connector", "kv_role"),
    "multi_connector_children": ("kv_connector", "kv_role"),
    "kv_connector_extra_config": ("kv_connector", "kv_role"),
    "env.VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE": ("attention_chunk_size",),
    "env.VLLM_USE_SIMPLE_KV_OFFLOAD": ("kv_offloading_size",),
}


def all_options() -> tuple[str, ...]:
    """Every option: the schema's configuration keys, then `env.<NAME>` for each variable the resolver reads."""
    keys = tuple(key for key in CASE_DEFAULTS if key not in NOT_OPTIONS)
    return keys + tuple(f"env.{name}" for name in ENV_VARS)


def options_of(era: str) -> tuple[str, ...]:
    """The options `era`'s release reads: VLLM_USE_V1 only where the block is gated on it (before 0.11.1), the
    kv-offloading options only where the shortcut exists (0.11.1+), VLLM_USE_SIMPLE_KV_OFFLOAD only where the
    native backend reads it (0.19+), HiSparse where it exists (0.30+), a connector's extra config only where the release reads keys of it (0.34:
    transfer_mode, host_pool_gib); a key whose record names the era it exists `since` only from that era on."""
    table = era_table(era)
    skipped = {key for key, spec in CASE_KEYS.items()
               if spec.since is not None and ERA_IDS.index(era) < ERA_IDS.index(spec.since)}
    if not table["block"]["vllm_use_v1_gate"]:
        skipped.add("env.VLLM_USE_V1")
    if table["offloading"]["shortcut"] == "absent":
        skipped |= {"kv_offloading_backend", "kv_offloading_size", "env.VLLM_USE_SIMPLE_KV_OFFLOAD"}
    if not table["offloading"]["native_simple"]:
        skipped.add("env.VLLM_USE_SIMPLE_KV_OFFLOAD")
    if not table["hisparse"]["exists"]:
        skipped.add("hisparse")
    if not (table["factory"]["nixl_transfer_mode"] or table["hisparse"]["host_pool_required"]):
        skipped.add("kv_connector_extra_config")
    return tuple(option for option in all_options() if option not in skipped)


def declared_alone(era: str) -> dict[str, dict[str, Any]]:
    """The matrix's features of `era` that set a simple case key alone from its record (`CaseKey.alone_feature`
    None): feature id (the key) -> the case fields."""
    options = options_of(era)
    return {key: {key: spec.given()} for key, spec in CASE_KEYS.items()
            if spec.simple and spec.alone_feature is None and key in options}


def present(case: dict[str, Any]) -> set[str]:
    """The options `case` gives (a key left out means the schema's default: kv_role's is kv_both). A connector's
    role, module path, children and extra config are given only with a connector (vLLM reads them from its
    kv_transfer_config; the schema refuses the last three without one)."""
    full = {**CASE_DEFAULTS, **case}
    # a switch whose default is False (kv_events, hisparse) is absent when False; the flag's False is an explicit enable
    given = {key for key in all_options() if not key.startswith("env.")
             and full.get(key) is not None and not (full[key] is False and CASE_DEFAULTS[key] is False)}
    if "kv_connector" not in given:
        given -= {option for option, needs in PREREQUISITES.items() if "kv_connector" in needs}
    given |= {f"env.{name}" for name in (full.get("env") or {}) if name in ENV_VARS}
    return given


def alone(option: str, given: set[str]) -> bool:
    """True when `given` is `option` with only the options it is read together with."""
    return option in given and given <= {option, *PREREQUISITES.get(option, ())}


def uncovered(era: str, cases: Iterable[dict[str, Any]]) -> dict[str, list[str]]:
    """{"never absent": [...], "never alone": [...]}: the options of `era` that `cases` never leave out or never
    set alone (empty lists when every option is drawn on its own)."""
    options = options_of(era)
    absent_seen, alone_seen = set(), set()
    for case in cases:
        given = present(case)
        absent_seen |= set(options) - given
        alone_seen |= {option for option in options if alone(option, given)}
    return {"never absent": [o for o in options if o not in absent_seen],
            "never alone": [o for o in options if o not in alone_seen]}
