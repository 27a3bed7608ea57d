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

# -- The case schema of `kvconform resolve` (docs/reference.md, "The resolve schema") ---------------------------------

@dataclass(frozen=True)
class CaseKey:
    """One key of the case schema: its default, what it accepts, and the schema table's row (docs/reference.md).

    A key of a simple `kind` is validated by `reference_impl.config.case.parse_case` from this record alone
    ("bool": true or false; "choice": null or one of `choices`; "positive_int": null or an integer above 0;
    "number": null or a number, `unit` naming it), and the config draws give it without an edit: the random cases
    (`suites/config/random_cases.py`) set it at random (`given()`, a choice at random), and the matrix
    (`suites/config/matrix.py`) sets it alone under the feature id `alone_feature` (a feature of `FEATURES`
    declared by hand), or, when that is None, under a feature named like the key and labelled `label`, in the
    eras from `since` on (an era id: the first whose release has the option; None: every era). A key of kind
    "structured" has its own parse in `case.py` and its own draws; `shape` is its table type.
    """

    default: Any
    kind: str
    meaning: str
    choices: tuple[str, ...] = ()
    sample: Any = None
    unit: str = ""
    shape: str = ""
    alone_feature: str | None = None
    label: str = ""
    since: str | None = None

    @property
    def simple(self) -> bool:
        """True when the record alone validates the key (and the draws can set it)."""
        return self.kind in SIMPLE_KINDS

    def accepted(self) -> str:
        """What a value must be, in the words a bad-input error uses."""
        if self.kind == "bool":
            return "true or false"
        if self.kind == "choice":
            return f"null, {', '.join(self.choices[:-1])} or {self.choices[-1]}"
        if self.kind == "positive_int":
            return "null or a positive integer"
        if self.kind == "number":
            return f"null or a number{f' ({self.unit})' if self.unit else ''}"
        raise ValueError(f"{self.kind}: the key has its own parse in reference_impl.config.case")

    def given(self) -> Any:
        """A value other than the default, the one the matrix sets the key to alone."""
        if self.kind == "bool":
            return not self.default
        return self.choices[0] if self.kind == "choice" and self.sample is None else self.sample

    def table_type(self) -> str:
        """The schema table's type column."""
        return self.shape or {
            "bool": "bool", "positive_int": "int \\| null", "number": "null \\| number",
            "choice": " \\| ".join(["null", *(f'`"{c}"`' for c in self.choices)]),
        }[self.kind]


#: The kinds of key `CaseKey` validates by itself.
SIMPLE_KINDS: tuple[str, ...] = ("bool", "choice", "positive_int", "number")

#: The values of a case's `kv_offloading_backend` (vLLM's `--kv-offloading-backend` choices).
OFFLOADING_BACKENDS: tuple[str, ...] = ("native", "lmcache")

#: Every key a case may have, in the schema's order: its default, what it accepts, its row of the schema table.
CASE_KEYS: Mapping[str, CaseKey] = MappingProxyType({
    "id": CaseKey(None, "structured", "echoed in the outcome", shape="any"),
    "vllm_version": CaseKey(None, "structured", "release `X.Y.Z`, era id or profile; default `seed`", shape="string"),
    "profile": CaseKey(None, "structured", "the same as `vllm_version` (an era id or profile), read when "
                       "`vllm_version` is absent", shape="string"),
    "stage": CaseKey(None, "structured", "where to stop (default `config`, or `kv_cache_groups` when `layers` are "
                     "given); `cli_parse` needs `cli_args`, `kv_cache_groups` needs `layers`; `layers` at stage "
                     "`config` add the rule `kv_cache_groups_not_evaluated`",
                     shape='`"cli_parse"` \\| `"config"` \\| `"kv_cache_groups"` \\| `"create_connector"`'),
    "flag": CaseKey(None, "structured", "`disable_hybrid_kv_cache_manager` as passed; `null` = absent",
                    shape="`null` \\| `true` \\| `false`"),
    "cli_args": CaseKey(None, "structured", "vLLM flags; parsed with the era's argparse and replace the fields they "
                        "set", shape="list of strings"),
    "platform": CaseKey("cuda", "structured", "`cuda` (default), `rocm`, `xpu`, `cpu`, `tpu`, `unspecified`, `auto`",
                        shape="string"),
    "kv_connector": CaseKey(None, "structured", "connector name; set means a `kv_transfer_config` is present; a name "
                            "the release does not register gets vLLM's `Unsupported connector type` where the release "
                            "looks it up", shape="string \\| null"),
    "kv_connector_module_path": CaseKey(None, "structured", "module to load `kv_connector` from; one that does not "
                                        "import gets vLLM's import error where the release imports it",
                                        shape="string \\| null"),
    "kv_role": CaseKey("kv_both", "structured", "`kv_producer`, `kv_consumer`, `kv_both` (default); another string "
                       "gets pydantic's `ValidationError` at `config`", shape="string \\| null"),
    "multi_connector_children": CaseKey(None, "structured", "MultiConnector children: a name, or `{\"kv_connector\", "
                                        "\"kv_role\", \"kv_connector_module_path\", \"kv_connector_extra_config\", "
                                        "\"children\"}` (a child object without `kv_role` has none)",
                                        shape="null \\| list"),
    "kv_connector_extra_config": CaseKey(None, "structured", "the connector's extra config, e.g. `{\"transfer_mode\": "
                                         "\"push\"}` (Nixl, 0.34) or `{\"host_pool_gib\": 4}` (HiSparse, 0.34); a "
                                         "`\"connectors\"` list in it is the same as `multi_connector_children`",
                                         shape="null \\| object"),
    "kv_events": CaseKey(False, "bool", "a `kv_events_config` is present", alone_feature="kv_events"),
    "attention_chunk_size": CaseKey(None, "positive_int", "the model uses chunked local attention", sample=8192,
                                    alone_feature="chunked"),
    # a built-in method name, or {"name", "uses_target_hidden_states"} (custom, 0.34+)
    "speculative_method": CaseKey(None, "structured", "e.g. `eagle`, `eagle3`, `mtp`, `ngram`; a custom method a "
                                  "plugin registers (0.34+): `{\"name\": \"my_drafter\", "
                                  "\"uses_target_hidden_states\": true}`", shape="string \\| object \\| null"),
    "env": CaseKey(None, "structured", "environment variables, e.g. "
                   "`VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE`", shape="object"),
    "hisparse": CaseKey(False, "bool", "HiSparse is configured (0.30+)", alone_feature="hisparse"),
    "kv_offloading_backend": CaseKey(None, "choice", "`--kv-offloading-backend`", choices=OFFLOADING_BACKENDS,
                                     alone_feature="offload_backend"),
    "kv_offloading_size": CaseKey(None, "number", "`--kv-offloading-size` (GiB); vLLM checks no range, so neither "
                                  "does the resolver", sample=4.0, unit="GiB", alone_feature="offload_size"),
    "layers": CaseKey(None, "structured", "the model's layer spec kinds (`full`, `sliding_window`, `chunked_local`, "
                      "`mamba`): adds the `kv_cache_groups` stage (engine order: after `config`, before "
                      "`create_connector`)", shape="null \\| list"),
})

#: Every key a case may have, with its default.
CASE_DEFAULTS: Mapping[str, Any] = MappingProxyType({key: spec.default for key, spec in CASE_KEYS.items()})


def schema_table() -> str:
    """The schema table of docs/reference.md ("The resolve schema"), one row per key of `CASE_KEYS`."""
    rows = ["| key | type | meaning |", "|---|---|---|"]
    rows += [f"| `{key}` | {spec.table_type()} | {spec.meaning} |" for key, spec in CASE_KEYS.items()]
    return "\n".join(rows) + "\n"


#: The environment variables a case's `env` may set that the resolver reads (each an integer vLLM reads as
#: `bool(int(value))`).
ENV_VARS: tuple[str, ...] = ("VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE", "VLLM_USE_V1", "VLLM_USE_SIMPLE_KV_OFFLOAD")

#: The values of a case's `layers` list (and of the allocator suite's layer kinds).
LAYER_KINDS: tuple[str, ...] = ("full", "sliding_window", "chunked_local", "mamba")
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

#: The matrix's features that give a simple case key alone without a feature declared above for it (see
#: `CaseKey`): the key's name is the id.
DECLARED_ALONE_FEATURES: Mapping[str, Term] = MappingProxyType({
    key: Term(spec.label or key, f"`{key}` set alone: {spec.meaning}")
    for key, spec in CASE_KEYS.items() if spec.simple and spec.alone_feature is None
})

#: Feature id -> its label and description (the case fields each sets are the suite's: `suites.config.matrix`; the
#: last, `DECLARED_ALONE_FEATURES`, it sets from the keys' records).
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
    **DECLARED_ALONE_FEATURES,
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
    """A declared message: its kind, the fragment of its text that names it wherever a target meets it, and its
    row of `docs/rules.md` (written there from this record by `python -m harness.release.doc_tables`)."""

    kind: str  # "warning" or "error"
    #: A regular expression (dot matches newline) found in the text of every release that says the message, so a
    #: release that rewords the rest keeps the id; None for the one message without text (see its entry).
    fragment: str | None
    #: The row: how vLLM says it ("warning", or the exception's type; for an error vLLM raises unchanged, with its
    #: text), when it appears and where in vLLM's source (line numbers of the release named).
    said: str
    when: str
    source: str
    #: The releases that say it, for the messages of the HMA block (the page's first table); None for an error
    #: vLLM raises unchanged, whose releases `when` says (the second table).
    releases: str | None = None


#: Message id -> its record: the ids the oracle's tables (`suites/config/tables/messages.toml`), the golden files,
#: the report and the resolver's texts (`reference_impl.config.messages`, one constant per id, named like it)
#: cite; `docs/rules.md`'s row for each is written from its record. The targets give a text the id of the first record whose fragment it
#: holds (`reference_impl.config.message_ids`), in this order: W-B1's text holds W-A1's fragment, so W-B1 comes
#: first. The fragments were reviewed against the texts of every release (config-rules.md §1.3, §2.4, §3.4, the
#: errors of §3.3/§10; tests/config/test_message_ids.py matches every text of both evaluators against its id).
MESSAGES: Mapping[str, Message] = MappingProxyType({
    "W-B1": Message(
        "warning", r"because `--kv-transfer-config` is set\..*--no-disable-hybrid-kv-cache-manager to start",
        said="warning",
        when="flag absent (`None`) and a `--kv-transfer-config` is present: HMA is turned off without looking at "
             "the connector; the text asks for `--no-disable-hybrid-kv-cache-manager`",
        releases="0.13.0 – 0.21.x",
        source="`vllm/config/vllm.py` (0.13.0: 890-958)",
    ),
    "W-A1": Message(
        "warning", r"because `--kv-transfer-config` is set\.",
        said="warning",
        when="a `--kv-transfer-config` is present and the old two-state flag is not `True`: HMA is turned off for "
             "any connector",
        releases="0.11.1 – 0.12.x",
        source="`vllm/config/vllm.py` (0.12.0: 885-929)",
    ),
    "W-22": Message(
        "warning", r"because connector \S+ does not subclass `SupportsHMA`",
        said="warning",
        when="flag absent and the connector class (or a MultiConnector child, by name) does not subclass "
             '`SupportsHMA`: "Turning off hybrid kv cache manager because connector X does not subclass '
             '`SupportsHMA`"',
        releases="0.22.x",
        source="`vllm/config/vllm.py` (0.22.0, HMA block)",
    ),
    "W-C1": Message(
        "warning", r"because `--kv-transfer-config` selects a KV connector that does not support it",
        said="warning",
        when="flag absent and `KVConnectorFactory.supports_hma_config` says the connector (for a MultiConnector: "
             "one of its children) is not HMA-capable",
        releases="0.23.0 – 0.34.x",
        source="`vllm/config/vllm.py` (0.33.0: 2216-2304; 0.34.0: 2178-2198), `kv_connector/factory.py` (0.33.0: "
               "131-146)",
    ),
    "W-C": Message(
        "warning", r"latency regression when using chunked local attention",
        said="warning",
        when="the model uses chunked local attention, there is no EAGLE-style speculator, and "
             "`VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE` is off; logged for every flag value",
        releases="0.11.0 – 0.34.x (env default 0 until 0.13, 1 from 0.14)",
        source="`vllm/config/vllm.py` HMA block; `vllm/envs.py` (0.13.0: 1432-1434)",
    ),
    "W-U": Message(
        "warning", r"Hybrid KV cache manager is disabled for this hybrid model",
        said="warning",
        when="HMA is off and the model's KV cache specs had to be unified (sliding window / chunked local promoted "
             "to full attention)",
        releases="every era",
        source="`vllm/v1/core/kv_cache_utils.py` (0.13.0: 1134-1208); 0.33.0 `v1/core/kv_cache_planning.py` "
               "(853-876)",
    ),
    "E-B": Message(
        "error", r"explicitly enabled but is not supported.*--no-disable-hybrid-kv-cache-manager",
        said="error (`ValueError`, surfaced by pydantic as `ValidationError`)",
        when="explicit enable (`--no-disable-hybrid-kv-cache-manager`) while something in the configuration needs "
             "HMA off; names `--no-disable-…`",
        releases="0.13.0 – 0.32.x",
        source="`vllm/config/vllm.py` (0.13.0: 890-958)",
    ),
    "E-C": Message(
        "error", r"explicitly enabled but is not supported.*--enable-hybrid-kv-cache-manager",
        said="error (`ValueError`)",
        when="the same as E-B with the 0.33 spelling: the text names `--enable-hybrid-kv-cache-manager`",
        releases="0.33.0 –",
        source="`vllm/config/vllm.py` (0.33.0: 2216-2304)",
    ),
    "E-F": Message(
        "error", r"does not support HMA but HMA is enabled",
        said="error (`ValueError`)",
        when='the connector factory finds HMA on and the connector not HMA-capable: "Connector X does not support '
             'HMA but HMA is enabled"',
        releases="0.11.1 –",
        source="`kv_connector/factory.py` (0.13.0: 56-62; 0.33.0: 43-75)",
    ),
    "E-H": Message(
        "error", r"HiSparse requires the hybrid KV cache manager",
        said="error (`ValueError`)",
        when="HiSparse is configured and HMA resolved off",
        releases="0.30.0 –",
        source="`vllm/config/vllm.py` (0.33.0: 2296-2304)",
    ),
    "E-HISPARSE-CUDA": Message(
        "error", r"HiSparse currently requires NVIDIA CUDA",
        said='`ValueError` "HiSparse currently requires NVIDIA CUDA."',
        when="HiSparse on a platform other than CUDA, checked before the HMA block (0.30 – 0.33)",
        source="`config/vllm.py` (spec §10 item 2)",
    ),
    "E-HISPARSE-PLATFORM": Message(
        "error", r"The current platform does not support HiSparse",
        said='`ValueError` "The current platform does not support HiSparse."',
        when="0.34: the same check asks the platform's `get_hisparse_backend_cls()`; only `CudaPlatform` has one, "
             "TPU's class lives outside vLLM (unknown)",
        source="0.34.0 `config/vllm.py:1812-1814`, `platforms/cuda.py:274`, `platforms/interface.py:200`",
    ),
    "E-HISPARSE-NEEDS-CONNECTOR": Message(
        "error", r"HiSparse requires a KV transfer config with HiSparseConnector and host_pool_gib",
        said='`ValueError` "HiSparse requires a KV transfer config with HiSparseConnector and host_pool_gib; …"',
        when="0.34: HiSparse is on (explicitly, or by a `HiSparseConnector`) but after the kv-offloading shortcut "
             "no `HiSparseConnector` is at the top level or a direct child of a `MultiConnector`",
        source="0.34.0 `config/vllm.py:2133-2141`, `config/kv_transfer.py:16-47`",
    ),
    "E-HISPARSE-TWO": Message(
        "error", r"Only one HiSparseConnector may be configured",
        said='`ValueError` "Only one HiSparseConnector may be configured"',
        when="0.34: two `HiSparseConnector` children",
        source="0.34.0 `config/kv_transfer.py:37-38`",
    ),
    "E-HISPARSE-NO-HOST-POOL": Message(
        "error", r"HiSparseConnector requires host_pool_gib",
        said='`ValueError` "HiSparseConnector requires host_pool_gib"',
        when="0.34: the `HiSparseConnector` has no `host_pool_gib` in its `kv_connector_extra_config` (a value that "
             "`float()` refuses raises `float()`'s own `ValueError`/`TypeError`)",
        source="0.34.0 `config/kv_transfer.py:39-43`",
    ),
    "E-HISPARSE-HOST-POOL-NOT-POSITIVE": Message(
        "error", r"HiSparseConnector host_pool_gib must be positive",
        said='`ValueError` "HiSparseConnector host_pool_gib must be positive"',
        when="0.34: `host_pool_gib` <= 0",
        source="0.34.0 `config/kv_transfer.py:44-46`",
    ),
    "E-NIXL-TRANSFER-MODE": Message(
        "error", r"Invalid NixlConnector transfer_mode: ",
        said='`ValueError` "Invalid NixlConnector transfer_mode: \'x\'" (the value\'s repr)',
        when='0.34: the registry\'s `NixlConnector` is `NixlPullConnector` (`transfer_mode` "pull", the default) or '
             '`NixlPushConnector` ("push"); any other value, wherever the class is looked up',
        source="0.34.0 `kv_connector/factory.py:126-130`",
    ),
    "E-UNKNOWN-SPECULATIVE-METHOD": Message(
        "error", r"Unknown speculative method .*registered custom methods",
        said='`ValueError` "Unknown speculative method \'x\'. Built-in methods: […]; registered custom methods: '
             '[…]."',
        when="0.34: a method name that is neither built in nor registered by a plugin "
             "(`register_speculative_method`), while `SpeculativeConfig` is built; 0.33 refuses the same names with "
             "pydantic's `Literal` error",
        source="0.34.0 `config/speculative.py:1624-1634`; 0.33.0 `config/speculative.py:419`",
    ),
    "E-MULTI-ASSERT": Message(
        "error", r"HMA should not be enabled unless all sub-connectors support it",
        said='`AssertionError` "HMA should not be enabled unless all sub-connectors support it"',
        when="HMA on with a MultiConnector child that is not HMA-capable, reached through a renamed MultiConnector "
             "subclass",
        source="`multi_connector.py` (0.33.0: 190-197)",
    ),
    "E-MULTI-NO-CONNECTORS": Message(
        "error", None,
        said="`AssertionError` with an empty message, at `create_connector`",
        when='a `MultiConnector` whose `kv_connector_extra_config` has no `"connectors"` key (`assert ktcs is not '
             "None`), at any depth: `MultiConnector.__init__` constructs its children in order, so a "
             "`MultiConnector` child (or grandchild) without the key asserts too, after every child's `kv_role` and "
             "class were checked (an empty list does not assert)",
        source="`kv_connector/v1/multi_connector.py` (0.33.0: 242; the same assertion in 0.13.0)",
    ),
    "E-KV-ROLE": Message(
        "error", r"Please specify kv_role when kv_connector is set",
        said='`ValueError` "Please specify kv_role when kv_connector is set"',
        when="a MultiConnector child without `kv_role`: at config with the flag absent in 0.22 (the class check "
             "builds each child's config) and from 0.23 (`all_children_support_hma`), child by child until the "
             "first child without HMA support, so a child after that one is not checked there; at "
             "`create_connector` in every era (`MultiConnector.__init__` builds every child's config first)",
        source="`config/kv_transfer.py` validation, reached from 0.22.0 `config/vllm.py:1458-1468`, 0.23.0 "
               "`multi_connector.py:161-167`, and `MultiConnector.__init__`",
    ),
    "E-KV-DISAGG-ROLE": Message(
        "error", r"Please specify kv_disagg_role when kv_connector is set",
        said='`ValueError` "Please specify kv_disagg_role when kv_connector is set"',
        when="E-KV-ROLE's check in 0.10.x and 0.11.0, whose text still named the field `kv_disagg_role` (0.11.1 "
             "renamed it in the message)",
        source="0.10.0 `config.py:3862`, 0.11.0 `config/kv_transfer.py:92`",
    ),
    "E-V1-CONNECTOR-UNDER-V0": Message(
        "error", r"Attempting to initialize a V1 Connector, but found envs\.VLLM_USE_V1=False",
        said='`ValueError` "Attempting to initialize a V1 Connector, but found envs.VLLM_USE_V1=False"',
        when="`VLLM_USE_V1=0` with a `kv_transfer_config` in 0.10.x and 0.11.0: the V1 connector factory refuses "
             "before it looks the connector up",
        source="0.10.0 `factory.py:59`, 0.11.0 `factory.py:46`",
    ),
    "E-TWO-ARG": Message(
        "error", r"uses deprecated 2-argument constructor signature",
        said='`ValueError` "uses deprecated 2-argument constructor signature"',
        when="an external connector whose constructor lacks `kv_cache_config` (from 0.21; a warning and a shim "
             "before, 0.20.0 `factory.py:123-128`)",
        source="0.21.0 `factory.py:115-122`; 0.33.0 `factory.py:116-121`",
    ),
    "E-HIDDEN-STATES-CHUNKED-PREFILL": Message(
        "error", r"ExampleHiddenStatesConnector does not support chunked prefill",
        said='`ValueError` "ExampleHiddenStatesConnector does not support chunked prefill. Please disable chunked '
             'prefill (--no-enable-chunked-prefill)."',
        when="0.22.0 – 0.23.x (eras v0.22, v0.23): the configured top-level `kv_connector` is named "
             "ExampleHiddenStatesConnector (a MultiConnector child is not checked) while "
             "`scheduler_config.enable_chunked_prefill` is on (vLLM's default, which every case keeps), at the "
             "start of `_post_init_kv_transfer_config`, before the kv-offloading shortcut and the HMA block; "
             "0.21.0's function has no such check, 0.24.0 drops it",
        source="0.22.0 `config/vllm.py:737-746`; 0.23.0 `config/vllm.py:764-772`",
    ),
    "E-OFFLOAD-NO-SIZE": Message(
        "error", r"You must set kv_offloading_size when kv_offloading_backend is set",
        said='`ValueError` "You must set kv_offloading_size when kv_offloading_backend is set."',
        when="0.11.1 – 0.13.x (eras pre-seed, seed): `--kv-offloading-backend` without `--kv-offloading-size`; the "
             "backend triggers the kv-offloading shortcut there, which runs after the HMA block (stage config, "
             "after the block's warnings). From 0.14.0 the size alone triggers it (the backend defaults to native) "
             "and a backend without a size does nothing",
        source="0.11.1 `config/vllm.py:306-316`; 0.12.0 `465-475`; 0.13.0 `477-487`; 0.14.0 "
               "`config/vllm.py:501-503`, `config/cache.py:152-161`",
    ),
    "E-NO-LMCACHE": Message(
        "error", r"No module named 'lmcache'",
        said='`ModuleNotFoundError` "No module named \'lmcache\'"',
        when="the LMCache connector modules import `lmcache` at the top (from 0.13)",
        source="`kv_connector/v1/lmcache_*` modules",
    ),
    "E-NO-MOONCAKE": Message(
        "error", r"Please install mooncake",
        said='`ImportError` "Please install mooncake …"',
        when="the Mooncake connector module without the `mooncake` package (0.13 – 0.18; from 0.19.0 it only logs a "
             "warning)",
        source="0.13.0 `kv_connector/v1/mooncake_connector.py:40-47`; 0.18.0 "
               "`mooncake/mooncake_connector.py:49-56`; 0.19.0 `mooncake/mooncake_connector.py:52-60` (warning)",
    ),
    "E-UNSUPPORTED-CONNECTOR": Message(
        "error", r"Unsupported connector type: ",
        said='`ValueError` "Unsupported connector type: X"',
        when="a `kv_connector` name the release does not register, without a `kv_connector_module_path`: raised "
             "wherever vLLM looks the class up (at `create_connector` in every era; at config from 0.22, where the "
             "flag-absent decision reads the class)",
        source="`kv_connector/factory.py` `get_connector_class` (0.33.0: 128; 0.34.0: 133)",
    ),
    "E-CLASS-NOT-FOUND": Message(
        "error", r"Class \S+ not found in \S+",
        said='`AttributeError` "Class X not found in M"',
        when="the kv-offloading shortcut overwrites `kv_connector` but keeps an external "
             "`kv_connector_module_path`; the module-path-first lookup (from 0.20) searches it",
        source="0.33.0 `factory.py:108-114`, `config/vllm.py:1157-1190`",
    ),
})


def markdown_table(dated: bool) -> str:
    """The messages as a Markdown table of `docs/rules.md`, in the order of `MESSAGES`: with `dated`, those with
    `releases` (id | kind | when it appears | releases | vLLM source), else the errors vLLM raises unchanged
    (id | kind | when it appears | vLLM source). Each id carries its anchor, the id in lower case."""
    header = ["id", "kind", "when it appears", *(["releases"] if dated else []), "vLLM source"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for id_, message in MESSAGES.items():
        if (message.releases is not None) is dated:
            cells = [f'<a id="{id_.lower()}"></a>{id_}', message.said, message.when,
                     *([message.releases] if dated else []), message.source]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
