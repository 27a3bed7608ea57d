"""The config matrix part of the report: per era a main table and an interaction list, and the changes between releases.

The main table of an era has rows connector x features and columns platform x flag, and shows the rows the
matrix fills completely: every feature without a connector, and every connector without features. The
cells where a connector meets a feature are a pairwise sample (not every platform and flag), so they are
listed one per line under the table instead of leaving the rest of a row unrun. A cell shows the target's
outcome (the deepest stage the matrix ran for that configuration): ✅ HMA on (resolved disable flag False),
⚪ HMA off (the warnings as footnotes), ❌ an error (type, stage and message as a footnote), ❔ unknown or not
run (why, as a footnote). A ❗ after the symbol marks a configuration whose outcome differs from the oracle
at some stage.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any, Iterable

from harness.eras import ERA_IDS, ERA_RELEASES
from harness.report.model import Cell, Heading, Paragraph, Section, Table

SUITE = "config"
PLATFORM_ORDER = ("cuda", "rocm", "xpu", "cpu", "tpu", "unspecified")
FLAG_ORDER = (None, True, False)
STAGE_ORDER = ("cli_parse", "config", "create_connector", "kv_cache_groups")
NOT_RUN = "not run: no result for this configuration (it was not selected or is not in the matrix)"
# How the rows without a connector or without features are spelled: the matrix says "noconn", a JSON null
# becomes "none".
NO_CONNECTOR = frozenset({"none", "noconn"})
NO_FEATURES = "none"
LEGEND = (
    "✅ HMA on (resolved `disable_hybrid_kv_cache_manager` is False) · ⚪ HMA off (footnote: the warning) · "
    "❌ error (footnote: type, stage and message) · ❔ unknown or not run (footnote: why) · "
    "❗ the outcome differs from the oracle"
)

ConfigKey = tuple[str, str, str, Any]  # connector, features, platform, flag
_ERA_RANK = {era: rank for rank, era in enumerate(ERA_IDS)}


def era_sort_key(era: str) -> tuple[int, str]:
    """Known eras in release order; anything else after them, by name."""
    return (_ERA_RANK.get(era, len(_ERA_RANK)), era)


def era_title(era: str) -> str:
    """'seed (vLLM 0.13.0)' for a known era, the id itself otherwise."""
    release = ERA_RELEASES.get(era)
    return f"{era} (vLLM {release})" if release else era


def label(value: Any) -> str:
    """A short text for a cell dimension (strings as they are, None as 'none', others as compact JSON)."""
    if value is None:
        return "none"
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def flag_label(flag: Any) -> str:
    """The flag as a column label: absent, True or False."""
    return "absent" if flag is None else str(flag)


def _first_sort(value: str) -> tuple[int, str]:
    """'none' (or 'noconn') first, then case-insensitive alphabetical."""
    return (0 if value in NO_CONNECTOR else 1, value.lower())


def is_main_row(connector: str, features: str) -> bool:
    """True for the rows an era's main table shows: no connector, or a connector without features."""
    return connector in NO_CONNECTOR or features == NO_FEATURES


def _platform_sort(platform: str) -> tuple[int, str]:
    return (PLATFORM_ORDER.index(platform) if platform in PLATFORM_ORDER else len(PLATFORM_ORDER), platform)


def _flag_sort(flag: Any) -> int:
    return FLAG_ORDER.index(flag) if flag in FLAG_ORDER else len(FLAG_ORDER)


_STAGE_RANK = {stage: rank for rank, stage in enumerate(STAGE_ORDER)}


def _stage_rank(stage: Any) -> int:
    return _STAGE_RANK.get(stage, -1)


def outcome_cell(outcome: dict[str, Any]) -> Cell:
    """The symbol and footnotes for one outcome in the `kvconform resolve` schema."""
    warnings = tuple(str(w) for w in outcome.get("warnings") or ())
    if outcome.get("unknown"):
        return Cell("❔", "unknown", (f"unknown: {outcome['unknown']}",) + warnings)
    error = outcome.get("error")
    if error:
        note = f"{error.get('type', 'error')} at stage {error.get('stage', '?')}: {error.get('message', '')}"
        return Cell("❌", "error", warnings + (note,))
    resolved = outcome.get("resolved_disable_hma")
    if resolved is False:
        return Cell("✅", "on", warnings)
    if resolved is True:
        return Cell("⚪", "off", warnings)
    return Cell("❔", "unknown", ("no outcome: neither a resolved value, an error nor an unknown reason",))


def outcome_signature(outcome: dict[str, Any]) -> tuple:
    """What makes two outcomes the same for the 'what changed' table (rule ids are an explanation, not an outcome)."""
    error = outcome.get("error") or {}
    return (
        outcome.get("resolved_disable_hma"),
        tuple(outcome.get("warnings") or ()),
        (error.get("type"), error.get("stage"), error.get("message")) if error else None,
        outcome.get("unknown"),
    )


class _Configuration:
    """Every stage's entry for one configuration in one era (cell and signature computed once)."""

    __slots__ = ("by_stage", "_cell", "_signature")

    def __init__(self) -> None:
        self.by_stage: dict[Any, dict[str, Any]] = {}
        self._cell: Cell | None = None
        self._signature: tuple | None = None

    def shown(self) -> dict[str, Any]:
        """The entry of the deepest stage (it includes the earlier stages' warnings and errors)."""
        if len(self.by_stage) == 1:
            return next(iter(self.by_stage.values()))
        return self.by_stage[max(self.by_stage, key=_stage_rank)]

    def _outcome(self) -> dict[str, Any] | None:
        entry = self.shown()
        actual = entry.get("actual")
        return actual if isinstance(actual, dict) and entry["status"] != "skipped" else None

    def cell(self) -> Cell:
        if self._cell is None:
            self._cell = self._make_cell()
        return self._cell

    def _make_cell(self) -> Cell:
        outcome = self._outcome()
        if outcome is not None:
            base = outcome_cell(outcome)
        else:
            reason = self.shown().get("message") or "no outcome was recorded"
            base = Cell("❔", "unknown", (f"not run: {reason}",))
        mismatches = [
            f"differs from the oracle at stage {label(stage)}: {e.get('message') or e['status']}"
            for stage, e in sorted(self.by_stage.items(), key=lambda item: _stage_rank(item[0]))
            if e["status"] in ("failed", "error")
        ]
        if mismatches:
            return Cell(base.text + "❗", "mismatch", base.notes + tuple(mismatches))
        return base

    def signature(self) -> tuple | None:
        """The outcome's signature, or None when nothing ran."""
        if self._signature is None:
            outcome = self._outcome()
            self._signature = outcome_signature(outcome) if outcome is not None else ()
        return self._signature or None


def _group(entries: Iterable[dict[str, Any]]) -> dict[str, dict[ConfigKey, _Configuration]]:
    eras: dict[str, dict[ConfigKey, _Configuration]] = defaultdict(dict)
    for entry in entries:
        cell = entry.get("cell") or {}
        key = (label(cell.get("connector")), label(cell.get("features")), label(cell.get("platform")),
               cell.get("flag"))
        configurations = eras[label(cell.get("era"))]
        configuration = configurations.get(key)
        if configuration is None:
            configuration = configurations[key] = _Configuration()
        configuration.by_stage[cell.get("stage")] = entry
    return eras


def _row_sort(key: tuple[str, str]) -> tuple:
    return (_first_sort(key[0]), _first_sort(key[1]))


def _column_sort(key: tuple[str, Any]) -> tuple:
    return (_platform_sort(key[0]), _flag_sort(key[1]))


def _key_sort(key: ConfigKey) -> tuple:
    return (_row_sort((key[0], key[1])), _column_sort((key[2], key[3])))


def _era_table(configurations: dict[ConfigKey, _Configuration]) -> Table:
    """The main table: the rows without a connector or without features, by the platform x flag they ran on."""
    shown = [key for key in configurations if is_main_row(key[0], key[1])]
    rows_keys = sorted({(c, f) for c, f, _, _ in shown}, key=_row_sort)
    column_keys = sorted({(p, fl) for _, _, p, fl in shown}, key=_column_sort)
    missing = Cell("❔", "unknown", (NOT_RUN,))
    rows = []
    for connector, features in rows_keys:
        row: list[Cell | str] = [connector, features]
        for platform, flag in column_keys:
            configuration = configurations.get((connector, features, platform, flag))
            row.append(configuration.cell() if configuration is not None else missing)
        rows.append(row)
    return Table(
        headers=["connector", "features"] + [f"{p} · {flag_label(fl)}" for p, fl in column_keys],
        rows=rows,
        row_filters=[{"connector": c} for c, _ in rows_keys],
        column_filters=[{}, {}] + [{"platform": p} for p, _ in column_keys],
        search=True,
    )


def _interaction_table(configurations: dict[ConfigKey, _Configuration]) -> Table:
    """The configurations with a connector and a feature, one line each (only those that ran are listed)."""
    keys = sorted((key for key in configurations if not is_main_row(key[0], key[1])), key=_key_sort)
    return Table(
        headers=["connector", "features", "platform", "flag", "outcome"],
        rows=[[c, f, p, flag_label(fl), configurations[(c, f, p, fl)].cell()] for c, f, p, fl in keys],
        row_filters=[{"connector": c, "platform": p} for c, _, p, _ in keys],
        column_filters=[{}, {}, {}, {}, {}],
        search=True,
    )


def _era_blocks(era: str, configurations: dict[ConfigKey, _Configuration]) -> list:
    blocks: list = [Heading(3, f"Era {era_title(era)}")]
    main = _era_table(configurations)
    if main.rows:
        blocks.append(main)
    interactions = _interaction_table(configurations)
    if interactions.rows:
        count = len(interactions.rows)
        blocks += [Paragraph(f"A connector together with a feature in {era}: {count} configuration"
                             f"{'' if count == 1 else 's'} (the matrix samples their platforms and flags pairwise)."),
                   interactions]
    return blocks


def _changes_table(eras: dict[str, dict[ConfigKey, _Configuration]], order: list[str]) -> Table:
    """Every change of outcome between consecutive eras; platforms that change alike share one row."""
    changes: dict[tuple, list[str]] = {}  # (connector, features, flag, between, before, after, era) -> platforms
    keys = sorted({key for era in order for key in eras[era]}, key=_key_sort)
    for key in keys:
        previous_era, previous = None, None
        for era in order:
            configuration = eras[era].get(key)
            if configuration is None or configuration.signature() is None:
                continue
            if previous is not None and previous.signature() != configuration.signature():
                connector, features, platform, flag = key
                change = (connector, features, flag_label(flag), f"{previous_era} → {era}",
                          previous.cell(), configuration.cell(), era)
                changes.setdefault(change, []).append(platform)
            previous_era, previous = era, configuration
    rows, row_filters = [], []
    for (connector, features, flag, between, before, after, era), platforms in changes.items():
        rows.append([connector, features, ", ".join(platforms), flag, between, before, after])
        row_filters.append({"connector": connector, "era": era, "platform": " ".join(platforms)})
    return Table(
        headers=["connector", "features", "platforms", "flag", "between", "before", "after"],
        rows=rows,
        row_filters=row_filters,
        column_filters=[{}, {}, {}, {}, {}, {}, {}],
        search=True,
    )


def oracle_summary(entries: list[dict[str, Any]]) -> str:
    """One sentence: how many matrix cells agree with the oracle."""
    counts = defaultdict(int)
    for entry in entries:
        counts[entry["status"]] += 1
    total = len(entries)
    text = (f"{counts['passed']} of {total} matrix cases agree with the oracle, {counts['failed']} differ, "
            f"{counts['error']} could not be evaluated (error) and {counts['skipped']} were skipped.")
    return text


def config_sections(entries: list[dict[str, Any]]) -> list[Section]:
    """The config section (summary, legend, era tables, what changed) and one filterable wrapper per era."""
    config_entries = [e for e in entries if e["suite"] == SUITE]
    if not config_entries:
        return []
    eras = _group(config_entries)
    order = sorted(eras, key=era_sort_key)
    sections = [Section("config", [
        Heading(2, "Config resolution matrix"),
        Paragraph(oracle_summary(config_entries)),
        Paragraph(LEGEND),
        Paragraph("Each cell shows the deepest stage the matrix ran for that configuration "
                  "(create_connector where present, else config). Per era, the table has every feature without "
                  "a connector and every connector without features, on every platform and flag; the list "
                  "under it has the configurations where a connector meets a feature, which the matrix "
                  "samples pairwise (every connector with every feature at least once)."),
    ])]
    for era in order:
        sections.append(Section("config", _era_blocks(era, eras[era]), filters={"era": era}))
    changes = _changes_table(eras, order)
    blocks = [Heading(2, "What changed between releases"),
              Paragraph("Every configuration whose outcome differs from the previous era that ran it "
                        "(the era filter of the HTML page selects the changes that arrive in that era).")]
    blocks.append(changes if changes.rows else Paragraph("No configuration changed its outcome between eras."))
    sections.append(Section("config", blocks))
    return sections
