"""The config matrix's cells: era x flag x platform x features x connector x stage, with readable ids.

Per era the matrix is the union of three deterministic blocks (duplicates removed):
  * every flag x platform x feature x stage without a connector (the platform and feature rules);
  * every flag x platform x connector x stage without features (the connector rules);
  * an all-pairs cover of flag x platform x feature x connector x stage (their interactions), where every
    row with a connector also runs to create_connector. The features and the connector that give one option on
    its own (`ALONE_FEATURES`, `ALONE_CONNECTORS`: vLLM's default for the others runs) are in the first two
    blocks only.
The first two are full products, so the report's "no connector" and "no features" rows are complete.
A fourth block names connectors the era does not register: those an earlier era or the next era registers (a
connector added at the next boundary, or removed at any earlier one) and a made-up `FooConnector`, over every flag x platform
x stage, so "what changed between releases" shows a connector that appears or disappears and the report's
"no features" rows stay complete. The
full product over all six dimensions (~100,000 cells) would not fit the time budget; all-pairs keeps every
pair of values together in at least one cell, in particular every connector with every feature.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import itertools
from typing import Any

from harness.eras import ERA_IDS
from reference_impl.vocabulary import (CASE_DEFAULTS, DECLARED_ALONE_FEATURES, FLAGS, MATRIX_STAGES, NO_CONNECTOR,
                                       NO_FEATURES, PLATFORMS, UNREGISTERED_CONNECTOR)
from suites.config.external_connectors import MODULE_PATH
from suites.config.options import declared_alone
from suites.config.oracle import CHUNKED_ENV, SIMPLE_OFFLOAD_ENV, USE_V1_ENV
from suites.config.tables import era_table

CHUNK = 8192
OFFLOAD_GIB = 4.0

# Feature id (its label: reference_impl.vocabulary.FEATURES) -> the case fields it sets.
FEATURES: dict[str, dict[str, Any]] = {
    NO_FEATURES: {},
    "kv_events": {"kv_events": True},
    "chunked": {"attention_chunk_size": CHUNK},  # env var left at the era's default (§2.8)
    "chunked_env1": {"attention_chunk_size": CHUNK, "env": {CHUNKED_ENV: "1"}},
    "chunked_env0": {"attention_chunk_size": CHUNK, "env": {CHUNKED_ENV: "0"}},
    "chunked_eagle": {"attention_chunk_size": CHUNK, "speculative_method": "eagle"},
    "hisparse": {"hisparse": True},
    "offload_native": {"kv_offloading_backend": "native", "kv_offloading_size": OFFLOAD_GIB},
    "offload_lmcache": {"kv_offloading_backend": "lmcache", "kv_offloading_size": OFFLOAD_GIB},
}
#: A custom speculative method's name (registered as a plugin would, 0.34+).
CUSTOM_METHOD = "kvconform_drafter"
# Features of the eras whose tables have custom speculative methods or the hash-lookahead lookup (0.34+).
CUSTOM_SPECULATIVE_FEATURES: dict[str, dict[str, Any]] = {
    "chunked_custom_ths": {"attention_chunk_size": CHUNK,
                           "speculative_method": {"name": CUSTOM_METHOD, "uses_target_hidden_states": True}},
    "chunked_custom": {"attention_chunk_size": CHUNK,
                       "speculative_method": {"name": CUSTOM_METHOD, "uses_target_hidden_states": False}},
}
# Options on their own (`suites/config/options.py`): each the only option given (with what it is read together
# with), so the release's default for every other option is what runs. They join the full products (the report's
# rows stay complete) but not the all-pairs cover: their interactions are the random cases' to draw.
ALONE_FEATURES: dict[str, dict[str, Any]] = {"eagle": {"speculative_method": "eagle"}}
# Only where the release has the kv-offloading shortcut (0.11.1+).
ALONE_OFFLOADING_FEATURES: dict[str, dict[str, Any]] = {
    "offload_size": {"kv_offloading_size": OFFLOAD_GIB},
    "offload_backend": {"kv_offloading_backend": "native"},
}
# Only where the native backend reads VLLM_USE_SIMPLE_KV_OFFLOAD (0.19+).
SIMPLE_OFFLOAD_FEATURES: dict[str, dict[str, Any]] = {
    "offload_size_simple": {"kv_offloading_size": OFFLOAD_GIB, "env": {SIMPLE_OFFLOAD_ENV: "1"}},
}
# VLLM_USE_V1=0: the HMA block is gated on it before 0.11.1; later releases do not read it (0.13.0 envs.py has
# no such variable), and it stays in their matrix, as a connector a release unregisters does, so the report
# never carries an older release's answer into a release whose matrix did not ask.
USE_V1_FEATURES: dict[str, dict[str, Any]] = {"v1_off": {"env": {USE_V1_ENV: "0"}}}
#: The feature ids that give one option alone (kept out of the all-pairs cover), those a case key's record
#: declares (`options.declared_alone`) included.
ALONE_FEATURE_IDS = frozenset({*ALONE_FEATURES, *ALONE_OFFLOADING_FEATURES, *SIMPLE_OFFLOAD_FEATURES, *USE_V1_FEATURES,
                               *DECLARED_ALONE_FEATURES})
#: A connector without kv_role (vLLM's default role is none), on its own like the features above.
#: (The era's name for vLLM's example connector: `example_connector`.)
ALONE_CONNECTORS: dict[str, dict[str, Any]] = {"NoRole": {"kv_connector": "ExampleConnector", "kv_role": None}}
LOOKAHEAD_FEATURES: dict[str, dict[str, Any]] = {
    # the shortcut's LMCacheMPConnector is looked up again after the block for an EAGLE drafter
    "eagle_offload_lmcache": {"speculative_method": "eagle", "kv_offloading_backend": "lmcache",
                              "kv_offloading_size": OFFLOAD_GIB},
}


def features_for(era: str) -> dict[str, dict[str, Any]]:
    """Feature label -> case fields, for every feature dimension value of `era`."""
    table = era_table(era)
    features = dict(FEATURES)
    if table["block"]["custom_speculative_methods"]:
        features.update(CUSTOM_SPECULATIVE_FEATURES)
    if table["factory"]["lookahead_lookup_methods"]:
        features.update(LOOKAHEAD_FEATURES)
    features.update(ALONE_FEATURES)
    if table["offloading"]["shortcut"] != "absent":
        features.update(ALONE_OFFLOADING_FEATURES)
    if table["offloading"]["native_simple"]:
        features.update(SIMPLE_OFFLOAD_FEATURES)
    features.update(USE_V1_FEATURES)
    features.update(declared_alone(era))
    return features

# The order of the connector dimension's registered names. The all-pairs cover (and with it which cells exist)
# depends on the order of each dimension's values, and an era table's registry lists its names in the order they
# were declared along the chain of eras it extends, which moves whenever a registration date is corrected. So the
# matrix orders them by name: this list is the order the registries had before the dates were read from each
# release's factory.py (v0.34's, with P2pNcclConnector where the eras that register it had it), which keeps the
# cells of every era whose registry did not change; a name not listed comes after these, alphabetically.
CONNECTOR_ORDER: tuple[str, ...] = (
    "SharedStorageConnector", "ExampleConnector", "P2pNcclConnector", "LMCacheConnectorV1", "LMCacheMPConnector", "NixlConnector",
    "MultiConnector", "OffloadingConnector", "DecodeBenchConnector", "MooncakeConnector", "SimpleCPUOffloadConnector",
    "ExampleHiddenStatesConnector", "MooncakeStoreConnector", "MoRIIOConnector", "FlexKVConnectorV1",
    "HF3FSKVConnector", "NixlPullConnector", "NixlPushConnector", "HiSparseConnector", "UMBPStoreConnector",
)


def in_connector_order(names) -> list[str]:
    """Registered connector names in the matrix's fixed order (`CONNECTOR_ORDER`, then alphabetical)."""
    rank = {name: index for index, name in enumerate(CONNECTOR_ORDER)}
    return sorted(names, key=lambda name: (rank.get(name, len(rank)), name))


# Children that are never in the way of a child list: MultiConnector itself, HiSparse (switches
# HiSparse on, §10.1), and connectors whose class lookup fails for a reason of its own (§3.3).
_NOT_PLAIN_CHILDREN = {"MultiConnector", "HiSparseConnector"}
#: vLLM's example connector, which never supports HMA, under its two names: SharedStorageConnector in 0.10.0 -
#: 0.12.0, ExampleConnector from 0.13.0 (the same class renamed).
EXAMPLE_CONNECTOR_NAMES = ("ExampleConnector", "SharedStorageConnector")


def example_connector(era: str) -> str:
    """The name `era`'s registry gives vLLM's example connector (the matrix's plain, never-HMA child)."""
    registry = era_table(era)["connectors"]
    return next(name for name in EXAMPLE_CONNECTOR_NAMES if name in registry)


def connector_child(name: str, children: list | None = None, role: str | None = "kv_both", extra: dict | None = None) -> dict:
    """One entry of a MultiConnector's "connectors" list (role None: the entry gives no kv_role)."""
    child: dict[str, Any] = {"kv_connector": name}
    if role is not None:
        child["kv_role"] = role
    if children is not None:
        child["children"] = children
    if extra is not None:
        child["kv_connector_extra_config"] = extra
    return child


def unregistered_for(era: str) -> dict[str, dict[str, Any]]:
    """Connector id -> case fields for names `era` does not register: those an earlier era or the next
    era registers, and a made-up name. A removed connector stays in every later era's matrix, so the report
    never carries an older release's answer for it into a release whose matrix did not ask."""
    registry = era_table(era)["connectors"]
    index = ERA_IDS.index(era)
    neighbours = ERA_IDS[:index] + ERA_IDS[index + 1:index + 2]
    others = sorted({name for other in neighbours for name in era_table(other)["connectors"]} - set(registry))
    return {name: {"kv_connector": name} for name in [*others, UNREGISTERED_CONNECTOR]}


def connectors_for(era: str) -> dict[str, dict[str, Any]]:
    """Connector id -> case fields, for every connector dimension value of `era` (the labels of the matrix's own
    ids: reference_impl.vocabulary.CONNECTOR_FIXTURES)."""
    table = era_table(era)
    registry = table["connectors"]
    blocked = _NOT_PLAIN_CHILDREN | set(table["factory"]["import_requires"])
    hma_children = sorted(name for name, hma in registry.items() if hma and name not in blocked)[:2]
    options: dict[str, dict[str, Any]] = {NO_CONNECTOR: {}}
    for name in in_connector_order(registry):
        options[name] = {"kv_connector": name}
    external = {
        "ExternalHMA": "ExternalHMAConnector",
        "ExternalPlain": "ExternalPlainConnector",
        "ExternalTwoArg": "LegacyTwoArgConnector",
        "LMCacheConnectorV1ByPath": "LMCacheConnectorV1",
    }
    for label, class_name in external.items():
        options[label] = {"kv_connector": class_name, "kv_connector_module_path": MODULE_PATH}

    def multi(children: list) -> dict[str, Any]:
        return {"kv_connector": "MultiConnector", "multi_connector_children": children}

    example = example_connector(era)
    plain = [connector_child(name) for name in (example, "LMCacheConnectorV1")]
    options["MultiPlain"] = multi(plain)
    options["MultiEmpty"] = multi([])
    if hma_children:
        hma = [connector_child(name) for name in hma_children]
        options["MultiAllHMA"] = multi(hma)
        options["MultiMixed"] = multi([hma[0], connector_child(example)])
        options["MultiNested"] = multi([connector_child("MultiConnector", hma), hma[0]])
        options["MultiNestedMixed"] = multi([connector_child("MultiConnector", [connector_child(example)]), hma[0]])
    else:
        options["MultiNested"] = multi([connector_child("MultiConnector", plain), plain[0]])
    if table["factory"]["child_kv_role_required"]:
        # Every child lacks kv_role, so the error does not depend on the order children are checked.
        options["MultiNoRole"] = multi([connector_child(name, role=None) for name in (hma_children or [example])])
    if "HiSparseConnector" in registry:
        hisparse = connector_child("HiSparseConnector")
        options["MultiHiSparse"] = multi([hisparse] + [connector_child(name) for name in hma_children[:1]])
        options["MultiNestedHiSparse"] = multi([connector_child("MultiConnector", [hisparse])] + [connector_child(n) for n in hma_children[:1]])
    if table["factory"]["nixl_transfer_mode"]:
        options["NixlPush"] = {"kv_connector": "NixlConnector", "kv_connector_extra_config": {"transfer_mode": "push"}}
        options["NixlBadMode"] = {"kv_connector": "NixlConnector", "kv_connector_extra_config": {"transfer_mode": "sideways"}}
        options["MultiNixlBadMode"] = multi([connector_child("NixlConnector", extra={"transfer_mode": "sideways"})])
    if table["factory"]["tree_lookup_before_block"]:
        # a grandchild whose class cannot be found, behind an HMA-capable first child
        options["MultiBadGrandchild"] = multi([*(connector_child(n) for n in hma_children[:1]),
                                               connector_child("MultiConnector", [connector_child(UNREGISTERED_CONNECTOR)])])
    if table["hisparse"]["host_pool_required"]:
        pool = {"host_pool_gib": 4}
        options["HiSparsePool"] = {"kv_connector": "HiSparseConnector", "kv_connector_extra_config": pool}
        options["HiSparseZeroPool"] = {"kv_connector": "HiSparseConnector", "kv_connector_extra_config": {"host_pool_gib": 0}}
        options["MultiHiSparsePool"] = multi([connector_child("HiSparseConnector", extra=pool), *(connector_child(n) for n in hma_children[:1])])
        options["MultiTwoHiSparse"] = multi([connector_child("HiSparseConnector", extra=pool), connector_child("HiSparseConnector", extra=pool)])
    options.update({label: {**fields, "kv_connector": example} for label, fields in ALONE_CONNECTORS.items()})
    options["RenamedMulti"] = {
        "kv_connector": "RenamedMultiConnector",
        "kv_connector_module_path": MODULE_PATH,
        "multi_connector_children": [connector_child(example)],
    }
    return options


@dataclasses.dataclass(frozen=True)
class Cell:
    """One matrix cell: its dimension values, readable id and the case dict sent to the target."""

    era: str
    flag: str
    platform: str
    features: str
    connector: str
    stage: str

    @property
    def id(self) -> str:
        base = f"{self.era}-{self.flag}-{self.platform}-{self.features}-{self.connector}"
        return base if self.stage == "config" else f"{base}-{self.stage}"

    @property
    def dimensions(self) -> dict[str, Any]:
        """The cell as the results payload names it (guide: config matrix shape)."""
        return {
            "era": self.era,
            "flag": FLAGS[self.flag],
            "platform": self.platform,
            "features": self.features,
            "connector": self.connector,
            "stage": MATRIX_STAGES[self.stage],
        }

    def case(self) -> dict[str, Any]:
        """The issue-2 case dict for this cell (a fresh one each time: a target may change what it is given)."""
        case: dict[str, Any] = {**CASE_DEFAULTS, "id": self.id, "profile": self.era, "stage": MATRIX_STAGES[self.stage],
                                "flag": FLAGS[self.flag], "platform": self.platform}
        features, options, unregistered = _dimension_fields(self.era)
        case.update(_fresh(features[self.features]))
        case.update(_fresh(options[self.connector] if self.connector in options else unregistered[self.connector]))
        return case


@functools.cache
def _dimension_fields(era: str) -> tuple[dict[str, dict[str, Any]], ...]:
    """`era`'s feature, connector and unregistered-connector fields, built once per era and process (each cell's case
    built them all again: twice per cell in a run that writes a results file, the cell and the invariants)."""
    return features_for(era), connectors_for(era), unregistered_for(era)


def _fresh(fields: dict[str, Any]) -> dict[str, Any]:
    """`fields` with its lists and dicts copied, so that no two cases share one."""
    return {key: copy.deepcopy(value) if isinstance(value, (list, dict)) else value for key, value in fields.items()}


def all_pairs(dimensions: list[tuple[str, ...]]) -> list[tuple[str, ...]]:
    """A deterministic greedy all-pairs cover: every pair of values of two dimensions occurs in a row.

    Each row starts from the first uncovered pair and fills the other dimensions, in order, with the
    value covering most still-uncovered pairs (ties: the earliest value).
    """
    # a value's place in its dimension (its first, as list.index gives), looked up rather than searched for
    place = [{value: index for index, value in reversed(list(enumerate(values)))} for values in dimensions]
    uncovered = {
        (i, a, j, b)
        for i, j in itertools.combinations(range(len(dimensions)), 2)
        for a in dimensions[i]
        for b in dimensions[j]
    }
    # Pairs only ever leave `uncovered`, so the first uncovered pair in this order is the one each row starts from.
    order = sorted(uncovered, key=lambda p: (p[0], p[2], place[p[0]][p[1]], place[p[2]][p[3]]))
    start = 0
    rows: list[tuple[str, ...]] = []
    while uncovered:
        while order[start] not in uncovered:
            start += 1
        i, a, j, b = order[start]
        row: dict[int, str] = {i: a, j: b}
        for k, values in enumerate(dimensions):
            if k in row:
                continue
            row[k] = max(
                values,
                key=lambda v: (sum(((m, row[m], k, v) if m < k else (k, v, m, row[m])) in uncovered for m in row), -place[k][v]),
            )
        full = tuple(row[k] for k in range(len(dimensions)))
        uncovered -= {(m, full[m], n, full[n]) for m, n in itertools.combinations(range(len(full)), 2)}
        rows.append(full)
    return rows


def cells_for(era: str) -> list[Cell]:
    """Every cell of one era, in a stable order."""
    return list(_era_cells(era))


@functools.cache
def _era_cells(era: str) -> tuple[Cell, ...]:
    """`cells_for`, computed once per era and process: collection, the invariants' judgement and the era items
    each ask for the same eras, and the all-pairs cover is most of the cost (about 0.05 CPU-s an era)."""
    flags, stages, features = tuple(FLAGS), tuple(MATRIX_STAGES), tuple(features_for(era))
    connectors = tuple(connectors_for(era))
    cells: dict[str, Cell] = {}

    def add(flag, platform, feature, connector, stage):
        cell = Cell(era, flag, platform, feature, connector, stage)
        cells.setdefault(cell.id, cell)

    for flag, platform, feature, stage in itertools.product(flags, PLATFORMS, features, stages):
        add(flag, platform, feature, NO_CONNECTOR, stage)
    for flag, platform, connector, stage in itertools.product(flags, PLATFORMS, connectors, stages):
        add(flag, platform, NO_FEATURES, connector, stage)
    alone = ALONE_FEATURE_IDS | set(ALONE_CONNECTORS)
    paired_features = tuple(f for f in features if f not in alone)
    paired_connectors = tuple(c for c in connectors if c not in alone)
    for flag, platform, feature, connector, stage in all_pairs([flags, PLATFORMS, paired_features, paired_connectors, stages]):
        add(flag, platform, feature, connector, stage)
        if connector != NO_CONNECTOR:
            # a connector's configuration is only answered once the connector is created (the factory's HMA
            # check): every sampled connector + feature cell runs to create_connector too, so no report cell
            # that stops at config can read as "this configuration works"
            add(flag, platform, feature, connector, "create")
    for flag, platform, connector, stage in itertools.product(flags, PLATFORMS, unregistered_for(era), stages):
        add(flag, platform, NO_FEATURES, connector, stage)
    return tuple(cells.values())


def matrix(eras: tuple[str, ...] = ERA_IDS) -> list[Cell]:
    """The cells of the selected eras."""
    return [cell for era in eras for cell in cells_for(era)]
