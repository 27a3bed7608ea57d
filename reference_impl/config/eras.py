"""vLLM rule eras: what each release range does with the HMA flag, as data.

An era is the set of behaviours shared by a range of releases. Each era is written as the changes it
brings over the previous one (`config-rules.md` section 6, the timeline), so a reader can check every
entry against the spec line by line. Where the spec sampled only some releases, an era covers the range
from its first sampled release up to the next change.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache
from types import MappingProxyType
from typing import Mapping

from reference_impl import releases as _releases
from reference_impl.config import messages
from reference_impl.releases import parse_version  # noqa: F401  (the eras' users read it here)

# Values of `connector_rule`: how a kv_transfer_config takes part in the config-time decision.
CONNECTOR_SILENT = "always_silent"  # any K disables HMA, no log (0.10-0.11.0)
CONNECTOR_ALWAYS_WARN = "always_warn"  # any K disables HMA with W-A1 (pre-seed)
CONNECTOR_FLAG_NONE = "flag_none"  # only for flag None, capability not inspected, W-B1 (seed-0.21)
CONNECTOR_CLASS_CHECK = "class_check"  # flag None, class + MultiConnector children by __name__ (0.22)
CONNECTOR_HMA_CONFIG = "supports_hma_config"  # flag None, supports_hma_config, W-C1 (0.23+)

# Values of `factory_check`: the capability test in KVConnectorFactory.create_connector.
FACTORY_NONE = "none"  # no check (before 0.11.1)
FACTORY_CLASS = "class"  # supports_hma(cls), MultiConnector not special (0.11.1-0.22)
FACTORY_HMA_CONFIG = "supports_hma_config"  # shared with the config decision (0.23+)

# Values of `offloading_shortcut`: when --kv-offloading-* becomes a connector.
OFFLOAD_ABSENT = "absent"
OFFLOAD_AFTER = "after_hma_block"  # 0.11.1-0.21: HMA is resolved without the connector
OFFLOAD_BEFORE = "before_hma_block"  # 0.22+: the connector takes part in the decision



@dataclass(frozen=True)
class PackageImport:
    """A package a built-in connector's module imports when vLLM looks the class up."""

    package: str
    first: tuple[int, ...]
    until: tuple[int, int] | None
    vllm_type: str
    message: str
    #: the id of `message` (`reference_impl.vocabulary.MESSAGES`), the one an outcome with that error carries
    message_id: str
    #: from this release an installed package supplies its own class, whose capability vLLM cannot know
    installed_is_unknown_from: tuple[int, int] | None = None
    #: reviewed: (version, whether the class that version of the package supplies subclasses SupportsHMA); a
    #: version not listed stays unknown
    hma_by_version: tuple[tuple[str, bool], ...] = ()

    def hma_of(self, version: str | None) -> bool | None:
        """SupportsHMA of the class `version` of the package supplies; None when kvconform has no fact on it."""
        return dict(self.hma_by_version).get(version) if version else None

    def newest_known_version(self) -> str | None:
        """The newest version of the package kvconform has a fact on."""
        versions = [v for v, _ in self.hma_by_version]
        return max(versions, key=_releases.version_order_key) if versions else None

    def applies(self, version: tuple[int, ...]) -> bool:
        return version >= self.first and (self.until is None or version < self.until)


_LMCACHE_IMPORT = PackageImport(  # lmcache_mp_connector.py imports lmcache at top level (0.11.1 ... 0.33.0)
    "lmcache", (0, 11, 1), None, "ModuleNotFoundError", messages.E_NO_LMCACHE, "E-NO-LMCACHE",
    installed_is_unknown_from=(0, 33),
    # Measured 2026-12-06 on vLLM 0.33.0 with lmcache 0.5.6 installed: `--enable-hybrid-kv-cache-manager` with
    # LMCacheMPConnector resolves HMA on and KVConnectorFactory.create_connector accepts the class (its
    # constructor then needs a model): lmcache 0.5.6's class subclasses SupportsHMA.
    hma_by_version=(("0.5.6", True),),
)
# lmcache_connector.py (LMCacheConnectorV1) imports lmcache at top level in 0.10.0 - 0.12.0 (line 6); 0.13.0 moves
# the import into the constructor (line 97), after the factory's checks.
_LMCACHE_V1_IMPORT = PackageImport("lmcache", (0, 10), (0, 13), "ModuleNotFoundError", messages.E_NO_LMCACHE,
                                   "E-NO-LMCACHE")
_MOONCAKE_IMPORT = PackageImport(  # 0.13.0-0.18.x re-raise a missing mooncake as ImportError; 0.19.0 only warns
    "mooncake", (0, 13), (0, 19), "ImportError", messages.E_NO_MOONCAKE, "E-NO-MOONCAKE",
)


@dataclass(frozen=True)
class ConnectorInfo:
    """A connector name registered in vLLM's KVConnectorFactory, and from when it is HMA-capable."""

    name: str
    registered_from: tuple[int, ...]
    hma_from: tuple[int, int] | None
    note: str = ""
    #: a package the connector's module imports when the class is looked up
    imports: PackageImport | None = None
    removed_from: tuple[int, int] | None = None


# Built-in registry (spec 2.7, 3.7 and the timeline). `registered_from` is the first release whose
# factory.py registers the name (read in the wheels of 0.10.0 to 0.13.0 for the older names; 0.10.0's four V0
# connectors, which its V1 factory refuses, are left out). `hma_from` is the release it gained SupportsHMA
# (None: never by 0.34); `removed_from` the first release whose registry (3.7) no longer has it.
VLLM_REGISTERED_CONNECTORS: tuple[ConnectorInfo, ...] = (
    # 0.13.0 renamed SharedStorageConnector (0.10.0 - 0.12.0) to ExampleConnector.
    ConnectorInfo("SharedStorageConnector", (0, 10), None, removed_from=(0, 13)),
    ConnectorInfo("ExampleConnector", (0, 13), None),
    ConnectorInfo("P2pNcclConnector", (0, 10), None, removed_from=(0, 24)),  # 0.24.0 factory.py lacks it
    ConnectorInfo("LMCacheConnectorV1", (0, 10), None, "in-tree class never subclassed SupportsHMA",
                  imports=_LMCACHE_V1_IMPORT),
    ConnectorInfo("LMCacheMPConnector", (0, 11, 1), None, imports=_LMCACHE_IMPORT),
    ConnectorInfo("NixlConnector", (0, 10), (0, 18)),
    ConnectorInfo("MultiConnector", (0, 10), (0, 21), "effective capability: all children"),
    ConnectorInfo("OffloadingConnector", (0, 11), (0, 21)),
    ConnectorInfo("DecodeBenchConnector", (0, 11, 1), (0, 21)),
    ConnectorInfo("MooncakeConnector", (0, 13), (0, 20), imports=_MOONCAKE_IMPORT),
    ConnectorInfo("SimpleCPUOffloadConnector", (0, 19), (0, 19)),
    # Each registration date read from the releases' factory.py (0.13.0 - 0.24.0): the first release that
    # registers the name.
    ConnectorInfo("ExampleHiddenStatesConnector", (0, 17), (0, 22)),  # 0.17.0 factory.py (0.16.0 lacks it)
    ConnectorInfo("MooncakeStoreConnector", (0, 21), (0, 22)),  # registered in 0.21.0's factory.py:199-203
    ConnectorInfo("MoRIIOConnector", (0, 14), (0, 30)),  # 0.14.0 factory.py (0.13.0 lacks it)
    ConnectorInfo("HiSparseConnector", (0, 30), (0, 30)),
    ConnectorInfo("NixlPullConnector", (0, 24), (0, 24)),  # 0.24.0 factory.py; NixlConnector an alias of Pull
    ConnectorInfo("NixlPushConnector", (0, 24), (0, 24)),
    ConnectorInfo("FlexKVConnectorV1", (0, 18), None),  # 0.18.0 factory.py (0.17.0 lacks it)
    ConnectorInfo("HF3FSKVConnector", (0, 20), None),  # 0.20.0 factory.py (0.19.0 lacks it)
    ConnectorInfo("UMBPStoreConnector", (0, 34), (0, 34)),
)

_BASE_EAGLE = frozenset({"eagle", "eagle3", "mtp"})
# vLLM 0.34.0 config/speculative.py:53-97 (`SpeculativeMethod`): the method names SpeculativeConfig accepts
# without a plugin. The model-specific MTP names are deprecated spellings that become "mtp".
MTP_ALIASES: frozenset[str] = frozenset({
    "deepseek_mtp", "dots3_note_mtp", "mimo_mtp", "mimo_v2_mtp", "glm4_moe_mtp", "glm4_moe_lite_mtp", "glm_ocr_mtp",
    "ernie_mtp", "nemotron_h_mtp", "nemotron3_5_transcribe_mtp", "exaone_moe_mtp", "exaone4_5_mtp",
    "qwen3_next_mtp", "qwen4_exp_mtp", "qwen3_5_mtp", "longcat_flash_mtp", "bailing_hybrid_v3_mtp",
    "minimax_m3_mtp", "bailing_hybrid_mtp", "kimi_k3_mtp", "pangu_ultra_moe_mtp", "step3p5_mtp", "step5_mtp",
    "hy_v3_mtp", "hy_v4_mtp", "gemma4_mtp", "inkling_mtp", "glm5_next_mtp",
})
# vLLM 0.33.0 config/speculative.py (`SpeculativeMethod`, a pydantic Literal): its names in declaration order,
# which pydantic's refusal of any other name lists.
SPECULATIVE_LITERAL_0_33: tuple[str, ...] = (
    "ngram", "draft_model", "suffix", "custom_class", "eagle", "eagle3", "extract_hidden_states", "deepseek_mtp",
    "dots3_note_mtp", "mimo_mtp", "mimo_v2_mtp", "glm4_moe_mtp", "glm4_moe_lite_mtp", "glm_ocr_mtp", "ernie_mtp",
    "nemotron_h_mtp", "exaone_moe_mtp", "exaone4_5_mtp", "qwen3_next_mtp", "qwen4_exp_mtp", "qwen3_5_mtp",
    "longcat_flash_mtp", "bailing_hybrid_v3_mtp", "minimax_m3_mtp", "bailing_hybrid_mtp", "mtp", "kimi_k3_mtp",
    "pangu_ultra_moe_mtp", "step3p5_mtp", "step5_mtp", "hy_v3_mtp", "hy_v4_mtp", "gemma4_mtp", "inkling_mtp",
    "glm5_next_mtp", "dflash", "ngram_gpu", "dspark",
)
# vLLM 0.10.x config.py (`SpeculativeMethod`, 0.10.0: 2594-2595): no plain "mtp" yet (0.11.0 added it).
SPECULATIVE_LITERAL_0_10: tuple[str, ...] = (
    "ngram", "eagle", "eagle3", "medusa", "mlp_speculator", "draft_model", "deepseek_mtp",
)
BUILTIN_SPECULATIVE_METHODS: frozenset[str] = frozenset({
    "ngram", "draft_model", "suffix", "eagle", "eagle3", "extract_hidden_states", "mtp", "dflash", "ngram_gpu",
    "dspark",
}) | MTP_ALIASES
_SUPPORTED_EVERYWHERE = {"cuda": True, "rocm": True, "xpu": True, "cpu": True, "tpu": False, "unspecified": False}


@dataclass(frozen=True)
class RuleChange:
    """One rule an era changes, as a row of its section of docs/rules.md: what changed, what it does to the
    resolved flag, a warning or an error, and where in vLLM's source (the representative release's lines)."""

    change: str
    effect: str
    source: str


@dataclass(frozen=True)
class RulesSection:
    """An era's section of docs/rules.md ("vLLM X.Y.Z (era vX.Y)", written by `python -m
    harness.release.doc_tables`): where its rules were read and how they were checked, then one row per change."""

    intro: str
    changes: tuple[RuleChange, ...]


@dataclass(frozen=True)
class Era:
    """Everything that differs between vLLM releases in HMA resolution, as plain data."""

    id: str
    first_version: tuple[int, ...]
    representative: str
    summary: str
    tri_state_flag: bool = False
    gated_on_vllm_use_v1: bool = False
    #: Its section of docs/rules.md, where the era says its changes in prose (None: the spec's sections, or the
    #: tables of docs/rules.md written by hand before, say them); never inherited by the next era.
    rules_section: RulesSection | None = None
    platform_support: Mapping[str, bool | None] = field(default_factory=dict)
    kv_events_disables: bool = True
    connector_rule: str = CONNECTOR_SILENT
    chunked_env_var: bool = False
    chunked_env_default: str = "0"
    chunked_local_without_eagle: bool = True
    eagle_methods: frozenset[str] = _BASE_EAGLE
    factory_check: str = FACTORY_NONE
    offloading_shortcut: str = OFFLOAD_ABSENT
    # what triggers the kv-offloading shortcut: False, the backend (0.11.1 - 0.13.x: `kv_offloading_backend` has no
    # default, and a backend without a size is E-OFFLOAD-NO-SIZE); True, the size (0.14.0+: the backend defaults to
    # "native", so the size alone installs OffloadingConnector and a backend without a size does nothing)
    offloading_needs_size: bool = False
    offloading_connectors: Mapping[str, str] = field(default_factory=dict)
    simple_offload_env: bool = False
    # 0.22.0 - 0.23.x: the configured ExampleHiddenStatesConnector refuses chunked prefill (on by default) at the
    # start of the offloading shortcut's function (0.22.0 config/vllm.py:737-746, 0.23.0 764-772)
    hidden_states_refuses_chunked_prefill: bool = False
    # KVTransferConfig's refusal of a connector without kv_role (its text named kv_disagg_role before 0.11.1)
    missing_kv_role_error: str = messages.E_KV_ROLE
    module_path_first: bool = False
    deprecated_constructor_error: bool = False
    multi_init_asserts: bool = False
    # before 0.11.1 MultiConnector builds its children one at a time (config, lookup, construction), so a later
    # child's missing kv_role is never reached when an earlier child's lookup fails
    multi_children_one_at_a_time: bool = False
    hisparse: bool = False
    cli_enable_form: bool = False
    # the release whose config classes the command line's JSON flags are validated against: "0.33" (its
    # fields, unknown keys refused) or "0.13" (`reference_impl.config.json_configs`)
    cli_json_release: str = "0.13"
    # 0.33: the JSON flags accept human-readable numbers ("1k", "2GiB") before validation
    cli_human_numbers: bool = False
    explicit_enable_error: str | None = None
    unify_warns_before_error: bool = True
    # 0.34: `_resolve_extensible_kv_cache` asks every connector of the user's kv_transfer_config (MultiConnector
    # children at any depth) for its `kv_cache_access`, looking each class up, before the HMA block
    config_tree_lookup: bool = False
    # 0.34: the registry's NixlConnector resolves to NixlPull/NixlPushConnector by its extra config's
    # `transfer_mode` (default "pull"); any other value is refused where the class is looked up
    nixl_transfer_mode: bool = False
    # how HiSparse's platform check asks (0.30+): "is_cuda" (0.30-0.33, E_HISPARSE_CUDA) or "backend"
    # (0.34: the platform's get_hisparse_backend_cls(), E_HISPARSE_PLATFORM; unknown for a platform whose class
    # lives outside vLLM)
    hisparse_platform_check: str = "is_cuda"
    # 0.34: after the offloading shortcut, HiSparse needs a HiSparseConnector with a positive host_pool_gib
    hisparse_host_pool: bool = False
    # how SpeculativeConfig refuses a method name it does not know: "none" (not modelled), "literal" (0.10.x and
    # 0.33: the pydantic Literal `speculative_literal`) or "registry" (0.34: built-in names or a plugin's)
    speculative_method_check: str = "none"
    speculative_literal: tuple[str, ...] = SPECULATIVE_LITERAL_0_33
    # 0.34: custom speculative methods registered by plugins; the chunked-local rule then asks the
    # method's `uses_target_hidden_states` (built-in methods answer as `eagle_methods`)
    custom_speculative_methods: bool = False
    # 0.34: after the HMA block, an EAGLE/EAGLE3/MTP speculator's hash lookahead looks the (post-shortcut)
    # connector class up again to ask `supports_lookahead_block_hashes`
    lookahead_lookup: bool = False

    def installed_package_is_unknown(self, needed: PackageImport) -> bool:
        """Whether, in this era, the installed package `needed` supplies its own class in the registry's place,
        whose capability vLLM cannot know."""
        return needed.installed_is_unknown_from is not None and self.first_version >= needed.installed_is_unknown_from

    def package_imported_by(self, name: str) -> PackageImport | None:
        """The package a built-in connector's module imports when its class is looked up, in this era."""
        for info in VLLM_REGISTERED_CONNECTORS:
            if info.name == name and info.imports and info.imports.applies(self.first_version):
                return info.imports
        return None

    def connectors(self) -> dict[str, bool]:
        """Registered built-in connector names of this era -> class-level SupportsHMA."""
        return {
            info.name: info.hma_from is not None and self.first_version >= info.hma_from
            for info in VLLM_REGISTERED_CONNECTORS
            if self.first_version >= info.registered_from
            and (info.removed_from is None or self.first_version < info.removed_from)
        }


def _evolve(previous: Era, id: str, first_version: tuple[int, ...], representative: str, summary: str, **changes) -> Era:
    changes.setdefault("rules_section", None)  # the previous era's prose is its own
    return replace(previous, id=id, first_version=first_version, representative=representative, summary=summary, **changes)


def _build_eras() -> tuple[Era, ...]:
    v010 = Era(
        id="v0.10",
        first_version=(0, 10),
        representative="0.10.0",
        summary="two-state flag; gated on VLLM_USE_V1; only CUDA and ROCm support HMA; no env var",
        gated_on_vllm_use_v1=True,
        platform_support=MappingProxyType({**_SUPPORTED_EVERYWHERE, "xpu": False, "cpu": False}),
        chunked_local_without_eagle=False,
        missing_kv_role_error=messages.E_KV_DISAGG_ROLE,
        speculative_method_check="literal",
        speculative_literal=SPECULATIVE_LITERAL_0_10,
        multi_children_one_at_a_time=True,
    )
    v011 = _evolve(
        v010, "v0.11", (0, 11), "0.11.0",
        "VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE (default 0); support_hybrid_kv_cache() per platform",
        platform_support=MappingProxyType(dict(_SUPPORTED_EVERYWHERE)),
        chunked_env_var=True,
        chunked_local_without_eagle=True,
        speculative_method_check="none",
        speculative_literal=SPECULATIVE_LITERAL_0_33,
    )
    pre_seed = _evolve(
        v011, "pre-seed", (0, 11, 1), "0.12.0",
        "SupportsHMA, the factory check E-F and W-A1 (#25712); no VLLM_USE_V1 gate; kv-offloading shortcut after the HMA block",
        gated_on_vllm_use_v1=False,
        connector_rule=CONNECTOR_ALWAYS_WARN,
        factory_check=FACTORY_CLASS,
        offloading_shortcut=OFFLOAD_AFTER,
        offloading_connectors=MappingProxyType({"native": "OffloadingConnector", "lmcache": "LMCacheConnectorV1"}),
        missing_kv_role_error=messages.E_KV_ROLE,
        multi_children_one_at_a_time=False,
    )
    seed = _evolve(
        pre_seed, "seed", (0, 13), "0.13.0",
        "PR #29805: tri-state flag, E-B on an impossible explicit enable, W-B1, connector rule only for flag None",
        tri_state_flag=True,
        connector_rule=CONNECTOR_FLAG_NONE,
        explicit_enable_error=messages.E_B,
    )
    v014 = _evolve(
        seed, "v0.14", (0, 14), "0.14.0",
        "chunked-local env var default flips to 1 (#29627); TPU outside vLLM (platforms/tpu.py re-exports "
        "tpu_inference's TpuPlatform); MoRIIOConnector registered",
        chunked_env_default="1",
        platform_support=MappingProxyType({**_SUPPORTED_EVERYWHERE, "tpu": None}),
        # 0.14.0 config/cache.py:152-161 (kv_offloading_backend = "native", "KV offloading is only activated when
        # kv_offloading_size is set") and config/vllm.py:501-503 (return when the size is None); 0.13.0 returns
        # when the backend is None (config/vllm.py:477-487) and demands the size
        offloading_needs_size=True,
    )
    # the rules of v0.14; only the registry grows (VLLM_REGISTERED_CONNECTORS)
    v017 = _evolve(v014, "v0.17", (0, 17), "0.17.0", "ExampleHiddenStatesConnector registered (not SupportsHMA)")
    v018 = _evolve(v017, "v0.18", (0, 18), "0.18.0",
                   "NixlConnector is the first in-tree SupportsHMA connector (#35758); FlexKVConnectorV1 registered")
    v019 = _evolve(v018, "v0.19", (0, 19), "0.19.0",
                   "SimpleCPUOffloadConnector gains SupportsHMA; native kv offloading installs it under "
                   "VLLM_USE_SIMPLE_KV_OFFLOAD=1",
                   simple_offload_env=True)  # 0.19.0 config/vllm.py:659-664 (0.18.0's shortcut has no such branch)
    v020 = _evolve(
        v019, "v0.20", (0, 20), "0.20.0",
        "kv_events_config no longer disables HMA; MooncakeConnector gains SupportsHMA; module path before registry; "
        "HF3FSKVConnector registered",
        kv_events_disables=False,
        module_path_first=True,  # 0.20.0 factory.py:113-130 (0.19.0 looks the registry up first, line 110)
    )
    v021 = _evolve(
        v020, "v0.21", (0, 21), "0.21.0",
        "MultiConnector, OffloadingConnector and DecodeBenchConnector gain SupportsHMA; the 2-argument constructor "
        "is an error; MooncakeStoreConnector registered",
        multi_init_asserts=True,  # 0.21.0 multi_connector.py:171-175 (0.20.0 has no such assertion)
        deprecated_constructor_error=True,  # 0.21.0 factory.py:115-122 (0.20.0 only warned and used the shim)
    )
    v022 = _evolve(
        v021, "v0.22", (0, 22), "0.22.0",
        "kv-offloading shortcut before the HMA block; connector-aware auto-disable by class (+MultiConnector children by "
        "__name__); ExampleHiddenStatesConnector refuses chunked prefill at config",
        connector_rule=CONNECTOR_CLASS_CHECK,
        offloading_shortcut=OFFLOAD_BEFORE,
        hidden_states_refuses_chunked_prefill=True,  # 0.22.0 config/vllm.py:737-746 (0.21.0 has no such check)
    )
    # Read from vLLM 0.23.0's source (config/vllm.py, kv_connector/factory.py, platforms/__init__.py,
    # config/speculative.py): besides supports_hma_config, the factory looks a module path up before the
    # registry and refuses a 2-argument constructor, the lmcache offloading backend installs
    # LMCacheMPConnector (native: SimpleCPUOffloadConnector under VLLM_USE_SIMPLE_KV_OFFLOAD=1), TPU support
    # lives in tpu_inference, and dflash is an EAGLE-style method. (0.20.0 already has some of these; the
    # eras before 0.23 date them.)
    v023 = _evolve(
        v022, "v0.23", (0, 23), "0.23.0",
        "KVConnectorFactory.supports_hma_config (#41847) shared by config and factory; W-C1; module path before "
        "registry; 2-argument constructors refused; lmcache offloading -> LMCacheMPConnector; TPU outside vLLM",
        connector_rule=CONNECTOR_HMA_CONFIG,
        factory_check=FACTORY_HMA_CONFIG,
        platform_support=MappingProxyType({**_SUPPORTED_EVERYWHERE, "tpu": None}),
        eagle_methods=_BASE_EAGLE | {"dflash"},
        offloading_connectors=MappingProxyType({"native": "OffloadingConnector", "lmcache": "LMCacheMPConnector"}),
        module_path_first=True,
        deprecated_constructor_error=True,
    )
    v024 = _evolve(v023, "v0.24", (0, 24), "0.24.0",
                   "P2pNcclConnector unregistered; NixlPullConnector / NixlPushConnector registered (SupportsHMA); "
                   "ExampleHiddenStatesConnector no longer refuses chunked prefill at config",
                   hidden_states_refuses_chunked_prefill=False)
    v025 = _evolve(v024, "v0.25", (0, 25), "0.25.0", "dspark joins the EAGLE-style methods (use_eagle)",
                   eagle_methods=_BASE_EAGLE | {"dflash", "dspark"})
    v030 = _evolve(v025, "v0.30", (0, 30), "0.30.0", "HiSparse requires HMA (E-H); MoRIIO and HiSparse connectors gain SupportsHMA", hisparse=True)
    v033 = _evolve(
        v030, "v0.33", (0, 33), "0.33.0",
        "--enable-hybrid-kv-cache-manager (EnableDisableAction) and E-C",
        eagle_methods=_BASE_EAGLE | {"dflash", "dspark"},
        offloading_connectors=MappingProxyType({"native": "OffloadingConnector", "lmcache": "LMCacheMPConnector"}),
        simple_offload_env=True,
        cli_enable_form=True,
        cli_json_release="0.33",
        cli_human_numbers=True,
        speculative_method_check="literal",
        explicit_enable_error=messages.E_C,
        unify_warns_before_error=False,
    )
    v034 = _evolve(
        v033, "v0.34", (0, 34), "0.34.0",
        "connector classes of the whole tree looked up before the HMA block (kv_cache_access); HiSparse needs "
        "host_pool_gib; NixlConnector transfer_mode; UMBPStoreConnector; custom speculative methods",
        config_tree_lookup=True,
        nixl_transfer_mode=True,
        hisparse_platform_check="backend",
        eagle_methods=v033.eagle_methods | MTP_ALIASES,
        hisparse_host_pool=True,
        custom_speculative_methods=True,
        speculative_method_check="registry",
        lookahead_lookup=True,
        rules_section=RulesSection(
            "config-rules.md stops at 0.33; the v0.34 era is read from vLLM 0.34.0's own source (line numbers below "
            "are 0.34.0's) and checked against the release: the v0.34 matrix agrees with vLLM 0.34.0 on every cell, "
            "and random differentials of the resolver against it find no difference (figures in `docs/vllm-0.34.md`).",
            (
                RuleChange("connector classes looked up before the HMA block",
                       "`_resolve_extensible_kv_cache` asks `kv_transfer_config.kv_cache_access()`, which looks up "
                       "the class of the configured connector and, for a `MultiConnector` class (a renamed subclass "
                       "too), builds every child's `KVTransferConfig` (its `kv_role` check) and looks its class up, "
                       "grandchildren included, every child whatever the others answer. This runs whatever the flag, "
                       'before the kv-offloading shortcut: "Unsupported connector type", a child without `kv_role`, '
                       "`No module named 'lmcache'`, a module path that does not import, a 2-argument constructor "
                       "and a bad Nixl `transfer_mode` are config-time errors even with `--disable-…`/`--enable-…`",
                       "`config/vllm.py:2006`, `3180-3199`; `config/kv_transfer.py:190-200`; "
                       "`kv_connector/factory.py:137-151`; `kv_connector/v1/multi_connector.py:238-247`"),
                RuleChange("HiSparse platform check reworded",
                       "E-HISPARSE-PLATFORM instead of E-HISPARSE-CUDA; unknown on TPU",
                       "`config/vllm.py:1812-1814`"),
                RuleChange("HiSparse needs a host pool",
                       "after the kv-offloading shortcut: E-HISPARSE-NEEDS-CONNECTOR, E-HISPARSE-TWO, "
                       "E-HISPARSE-NO-HOST-POOL, E-HISPARSE-HOST-POOL-NOT-POSITIVE, before the HMA block",
                       "`config/vllm.py:2133-2141`, `config/kv_transfer.py:16-47`"),
                RuleChange("UMBPStoreConnector",
                       "registered, subclasses `SupportsHMA`",
                       "`kv_connector/factory.py:258-262`, `kv_connector/v1/umbp/connector.py:100`"),
                RuleChange("chunked local attention + speculator",
                       "asks `speculative_config.uses_target_hidden_states` (the speculator config class's flag) "
                       "instead of `use_eagle()`: the same answer for the built-in methods (eagle, eagle3, mtp and "
                       "its model-specific names, dflash, dspark); a custom method registered by a plugin answers "
                       "for itself",
                       "`config/vllm.py:2156-2166`, `config/speculative.py:1419-1429`, "
                       "`v1/worker/gpu/spec_decode/speculator_config.py:25-44, 317-334`"),
                RuleChange("NixlConnector `transfer_mode`",
                       'E-NIXL-TRANSFER-MODE; "pull"/"push" resolve to `NixlPullConnector`/`NixlPushConnector` (both '
                       "HMA-capable)",
                       "`kv_connector/factory.py:126-130`"),
                RuleChange("`kv_cache_access` (`KVCacheAccess` flags)",
                       "each connector class says how it reaches the KV cache (`REGISTERS`, `EXPORTS_FD`, "
                       "`EXPORTS_FABRIC`, `LEGACY_IPC`); only `EXPORTS_FD` with an unsupported extensible KV cache "
                       "raises, and no in-tree connector declares it, so the flags change no outcome here; the "
                       "lookup they need is the first row",
                       "`config/kv_transfer.py:50-75`, `config/vllm.py:3200-3262`"),
                RuleChange("EAGLE block drop looks the connector up again",
                       "for eagle, eagle3 and mtp, `_resolve_num_hash_lookahead_tokens` (after the HMA block) looks "
                       "up the connector after the shortcut: an offloading shortcut that renamed a module-path "
                       'connector ("Class OffloadingConnector not found in …") or installed `LMCacheMPConnector` '
                       "without lmcache fails at config even with an explicit flag",
                       "`config/vllm.py:633-655, 2261`; `config/speculative.py:1767-1778`"),
                RuleChange("unknown speculative method",
                       "E-UNKNOWN-SPECULATIVE-METHOD while `SpeculativeConfig` is built",
                       "`config/speculative.py:1624-1634`"),
            ),
        ),
    )
    return (v010, v011, pre_seed, seed, v014, v017, v018, v019, v020, v021, v022, v023, v024, v025, v030, v033, v034)


ERAS: tuple[Era, ...] = _build_eras()
ERAS_BY_ID: Mapping[str, Era] = MappingProxyType({era.id: era for era in ERAS})
# Profiles: the registry's rows marked `profile`, each named by its era (reference_impl/releases.toml).
PROFILES: Mapping[str, str] = MappingProxyType(_releases.profiles())
DEFAULT_PROFILE = "seed"
# The known range: from the release registry's oldest row up to the minor after its newest (a release without a
# rule change joins the newest era with its row alone; reference_impl/releases.toml).
OLDEST = _releases.oldest()
NEWEST_EXCLUSIVE = _releases.newest_exclusive()


def known_range() -> str:
    """Human-readable range of releases the resolver knows."""
    major, minor, _ = NEWEST_EXCLUSIVE
    return f"{'.'.join(map(str, OLDEST))} to {major}.{minor - 1}.x"


def rules_sections() -> str:
    """The eras' sections of docs/rules.md, oldest first, one per era with a `rules_section`: a heading
    ("vLLM X.Y.Z (era vX.Y)"), the section's anchor (`s-` and the era's id without dots) before its paragraph, and
    its table of changes (`python -m harness.release.doc_tables` writes them there; a test compares)."""
    parts = []
    for era in ERAS:
        section = era.rules_section
        if section is None:
            continue
        rows = "".join(f"| {c.change} | {c.effect} | {c.source} |\n" for c in section.changes)
        parts.append(f"## vLLM {era.representative} (era {era.id})\n\n"
                     f'<a id="s-{era.id.replace(".", "")}"></a>{section.intro}\n\n'
                     "| change | what it does to the resolved flag, a warning or an error | vLLM source |\n"
                     f"|---|---|---|\n{rows}")
    return "\n".join(parts)


def markdown_table() -> str:
    """The eras as the Markdown table of docs/reader.md ("Rule eras"), oldest first: each era's id, its releases
    (from its first row in the release registry to the next era's first row, the newest era to the end of the
    known range) and its `summary` (`python -m harness.release.doc_tables` writes it there; a test compares)."""
    firsts = {}
    for row in _releases.RELEASES:
        firsts.setdefault(row.era, row.version)
    major, minor, _ = NEWEST_EXCLUSIVE
    lines = ["| era id | releases | what changes (config-rules.md §6) |", "|---|---|---|"]
    for era, following in zip(ERAS, [*ERAS[1:], None]):
        end = f"{major}.{minor - 1}.x" if following is None else f"{firsts[following.id]} (excl.)"
        lines.append(f"| `{era.id}` | {firsts[era.id]} – {end} | {era.summary} |")
    return "\n".join(lines) + "\n"


def era_for_version(version: str) -> Era:
    """The era whose rules a vLLM release follows; a version outside the known range is an error."""
    parsed = parse_version(version)
    if not OLDEST <= parsed < NEWEST_EXCLUSIVE:
        raise ValueError(
            f"vllm_version: {version!r} is outside the releases kvconform knows ({known_range()}); "
            f"profiles: {', '.join(PROFILES)}"
        )
    chosen = ERAS[0]
    for era in ERAS:
        first = era.first_version + (0,) * (3 - len(era.first_version))
        if parsed >= first:
            chosen = era
    return chosen


@lru_cache(maxsize=1024)
def resolve_era(version_or_profile: str | None) -> tuple[Era, str]:
    """Resolve a version, profile or era id to (era, version string); None means the default profile."""
    name = DEFAULT_PROFILE if version_or_profile is None else version_or_profile
    if not isinstance(name, str):
        raise ValueError(f"vllm_version: {name!r} is not a string; expected X.Y.Z or one of {', '.join(PROFILES)}")
    if name in PROFILES:
        version = PROFILES[name]
        return era_for_version(version), version
    if name in ERAS_BY_ID:
        era = ERAS_BY_ID[name]
        return era, era.representative
    if not _releases.VERSION_RE.match(name.strip()):
        accepted = ", ".join(dict.fromkeys([*PROFILES, *ERAS_BY_ID]))  # profiles and era ids share names
        raise ValueError(f"vllm_version: {name!r} is neither a version X.Y.Z nor a profile ({accepted})")
    return era_for_version(name), name
