"""Readable names for what the report's tables show: any cell dimension's value (`label`, which every section
reads here), the config matrix's fixture ids and flag values, and the legend that explains them.

The matrix names its configurations with short ids (`noconn`, `ExternalTwoArg`, `chunked_env0`, ...) that
stay in `results.json.gz` and in test ids; the report shows their labels instead and lists every id it uses
in a legend. A built-in connector's id is its vLLM name and is shown as it is. The labels, descriptions and flag
spellings are declared in `reference_impl.vocabulary`; which releases spell a flag how, the era tables say
(`harness.eras`).
"""

from __future__ import annotations

import json
from typing import Any

from harness.eras import ENABLE_FLAG_ERAS, ERA_FIRST_VERSIONS, ERA_IDS, TRI_STATE_ERAS
from reference_impl.vocabulary import CONNECTOR_FIXTURES, ENABLE_FLAG_LABEL, FEATURES, FLAG_LABELS


def label(value: Any) -> str:
    """A short text for a cell dimension (strings as they are, None as 'none', others as compact JSON)."""
    if value is None:
        return "none"
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def connector_label(connector: str) -> str:
    """The table label of a connector id (a built-in connector's vLLM name stays as it is)."""
    term = CONNECTOR_FIXTURES.get(connector)
    return term.label if term is not None else connector


def own_connector_label(connector: str) -> str:
    """'kvconform:ExampleConnector' for one of kvconform's own connectors (its reference engine's, which the
    connector suite runs by default), so it never reads as vLLM's class of the same name; any other name (a
    vendor's `module:Class`) as it is. `--kv-connector` takes the label too."""
    from harness.target_spec import BUILTIN_CONNECTORS, KVCONFORM_PREFIX

    return f"{KVCONFORM_PREFIX}{connector}" if connector in BUILTIN_CONNECTORS else connector


def feature_label(features: str) -> str:
    """The table label of a feature id."""
    term = FEATURES.get(features)
    return term.label if term is not None else features


def flag_label(flag: Any, era: str | None = None) -> str:
    """The flag as the user writes it in `era`: 'auto', '--disable-…', '--no-disable-…' or '--enable-…'."""
    if flag is False and era in ENABLE_FLAG_ERAS:
        return ENABLE_FLAG_LABEL
    # by identity: a results file's 1 or 0 is not a flag value
    return next((text for value, text in FLAG_LABELS.items() if flag is value), str(flag))


def _first_release(eras: frozenset[str]) -> str:
    """'0.13.0': the first release of the earliest of `eras`."""
    first = next(era for era in ERA_IDS if era in eras)
    return ".".join(map(str, ERA_FIRST_VERSIONS[first]))


FLAG_LEGEND = (
    f"Flag columns: **{FLAG_LABELS[None]}** = the flag absent (`disable_hybrid_kv_cache_manager` is None: vLLM "
    f"decides; before {_first_release(TRI_STATE_ERAS)} the field had no None and absent meant False); "
    f"**{FLAG_LABELS[True]}** = `--disable-hybrid-kv-cache-manager` (True: HMA off); **{FLAG_LABELS[False]}** = "
    "`--no-disable-hybrid-kv-cache-manager` (False: HMA demanded), spelled "
    f"**{ENABLE_FLAG_LABEL}** = `--enable-hybrid-kv-cache-manager` from {_first_release(ENABLE_FLAG_ERAS)}."
)


def legend_rows(connectors: set[str], features: set[str]) -> list[list[str]]:
    """Rows 'label | id | what it is' for the ids the report uses that have a readable label."""
    rows = []
    for kind, table, used in (("feature", FEATURES, features), ("connector", CONNECTOR_FIXTURES, connectors)):
        rows += [[term.label, f"`{ident}`", kind, term.description] for ident, term in table.items() if ident in used]
    return rows
