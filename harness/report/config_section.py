"""The config matrix part of the report: per era a main table and an interaction list, and the changes between releases.

The main table of an era has rows connector x features and columns platform x flag, and shows the rows the
matrix fills completely: every feature without a connector, and every connector without features. The
cells where a connector meets a feature are a pairwise sample (not every platform and flag), so they are
listed one per line under the table instead of leaving the rest of a row unrun. A cell shows the target's
outcome (the deepest stage the matrix ran for that configuration) as a symbol *and* a word: "✅ on" (HMA on),
"⚪ off" (the warnings as notes), "❌ E-F" (an error: its message id or type; stage and message as a note),
"❔ unknown" (why, as a note). "❗ differs" marks a configuration whose outcome differs from the oracle.
Fixture ids and flag values are shown with the readable labels of `harness.report.labels`.

Before the era tables (the support table of deployable connectors is `harness.report.support_section`'s):
"at a glance" per platform (per connector and per feature, how HMA resolves with the flag auto and with an
explicit enable, release by release); after them, "what changed between releases" groups the changes of
outcome by what changed (an unknown that stays unknown is no change). Every table says the stage its cells
reached (the connector cells run to create_connector). Each era's tables and the changes go to their own
Markdown page (`Section.page`); the HTML page holds them all.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterable

from harness.eras import ERA_IDS, ERA_RELEASES
from harness.invariants.defects import defect_marker
from harness.report.labels import FLAG_LEGEND, connector_label, feature_label, flag_label, label, legend_rows
from harness.report.model import Cell, Heading, Paragraph, Section, Table
from reference_impl.config.outcome import Outcome, OutcomeError, OutcomeShapeError, OutcomeWarning
from reference_impl.vocabulary import FLAGS, NO_CONNECTOR, NO_FEATURES, PLATFORMS, STAGES

SUITE = "config"
FLAG_ORDER = tuple(FLAGS.values())
NOT_RUN = "not run: no result for this configuration (it was not selected or is not in the matrix)"
LEGEND = (
    "Cells: ✅ on = HMA on (resolved `disable_hybrid_kv_cache_manager` is False) · ⚪ off = HMA off (note: the "
    "warning vLLM logs) · ❌ followed by a message id (E-F, E-B, ...) or an exception type = an error (note: "
    "type, stage and message; the ids are explained in docs/rules.md) · ❔ unknown = cannot be known or not run "
    "(note: why) · ❗ differs = the outcome differs from the oracle · 🐞 = the outcome is that of a known vLLM defect "
    "(note: which, and the release that fixes it; docs/invariants.md). Numbers in brackets refer to the notes under "
    "each table."
)
ON, OFF, ERROR, UNKNOWN = "✅ on", "⚪ off", "❌", "❔ unknown"
DEFECT = "🐞"  # beside an outcome a reviewed vLLM defect produced

ConfigKey = tuple[str, str, str, Any]  # connector, features, platform, flag
_ERA_RANK = {era: rank for rank, era in enumerate(ERA_IDS)}


def era_sort_key(era: str) -> tuple[int, str]:
    """Known eras in release order; anything else after them, by name."""
    return (_ERA_RANK.get(era, len(_ERA_RANK)), era)


def era_title(era: str) -> str:
    """'seed (vLLM 0.13.0)' for a known era, the id itself otherwise."""
    release = ERA_RELEASES.get(era)
    return f"{era} (vLLM {release})" if release else era


def _first_sort(value: str) -> tuple[int, str]:
    """No connector and no features first, then case-insensitive alphabetical."""
    return (0 if value in (NO_CONNECTOR, NO_FEATURES) else 1, value.lower())


def is_main_row(connector: str, features: str) -> bool:
    """True for the rows an era's main table shows: no connector, or a connector without features."""
    return connector == NO_CONNECTOR or features == NO_FEATURES


def _platform_sort(platform: str) -> tuple[int, str]:
    return (PLATFORMS.index(platform) if platform in PLATFORMS else len(PLATFORMS), platform)


def _flag_sort(flag: Any) -> int:
    return FLAG_ORDER.index(flag) if flag in FLAG_ORDER else len(FLAG_ORDER)


_STAGE_RANK = {stage: rank for rank, stage in enumerate(STAGES)}
_UNSET = object()  # a value `Configuration` has not computed yet (None is a stage, and an outcome's absence)


def _stage_rank(stage: Any) -> int:
    return _STAGE_RANK.get(stage, -1)


def _warning_note(warning: OutcomeWarning) -> str:
    return f"{warning.id} (warning): {warning.text}" if warning.id else f"warning: {warning.text}"


def error_note(error: OutcomeError) -> str:
    """'E-F: ValueError at stage create_connector: Connector X does not support HMA ...' (the id the target gave
    the error)."""
    kind, stage = error.type or "error", error.stage or "?"
    text = (f"{kind} at stage {stage}: {error.text}" if error.text.strip()
            else f"{kind} at stage {stage}, with no message")
    return f"{error.id}: {text}" if error.id else text


def _typed(outcome: dict[str, Any]) -> Outcome:
    """The typed outcome of a recorded one; an empty one (no resolved value, error or unknown reason) for a value
    a broken target returned that is none."""
    try:
        return Outcome.from_dict(outcome)
    except OutcomeShapeError:
        return Outcome()


def outcome_cell(outcome: dict[str, Any]) -> Cell:
    """The symbol, word and notes for one outcome (the typed outcome's JSON form,
    `reference_impl.config.outcome`), its messages named by the ids the target gave them."""
    return _typed_cell(_typed(outcome))


def _typed_cell(typed: Outcome) -> Cell:
    warnings = tuple(_warning_note(warning) for warning in typed.warnings)
    if typed.unknown:
        return Cell(UNKNOWN, "unknown", (f"unknown: {typed.unknown}",) + warnings)
    error = typed.error
    if error:
        return Cell(f"{ERROR} {error.id or error.type or 'error'}", "error", warnings + (error_note(error),))
    if typed.resolved_disable_hma is False:
        return Cell(ON, "on", warnings)
    if typed.resolved_disable_hma is True:
        return Cell(OFF, "off", warnings)
    return Cell(UNKNOWN, "unknown", ("no outcome: neither a resolved value, an error nor an unknown reason",))


def outcome_signature(outcome: dict[str, Any]) -> tuple:
    """What makes two outcomes the same for the 'what changed' table (rule ids are an explanation, not an outcome)."""
    return _typed_signature(_typed(outcome))


def _typed_signature(typed: Outcome) -> tuple:
    error = typed.error
    return (
        typed.resolved_disable_hma,
        typed.warnings,
        (error.type, error.stage, error.id, error.text) if error else None,
        typed.unknown,
    )


class Configuration:
    """Every stage's entry for one configuration in one era (its deepest stage, typed outcome, cell and signature
    computed once, when first asked: `group_by_era` adds the entries before anything asks)."""

    __slots__ = ("by_stage", "_stage", "_typed_outcome", "_cell", "_signature")

    def __init__(self) -> None:
        self.by_stage: dict[Any, dict[str, Any]] = {}
        self._stage: Any = _UNSET
        self._typed_outcome: Outcome | None | object = _UNSET
        self._cell: Cell | None = None
        self._signature: tuple | None = None

    def stage(self) -> Any:
        """The deepest stage the matrix ran for this configuration."""
        if self._stage is _UNSET:
            self._stage = (next(iter(self.by_stage)) if len(self.by_stage) == 1
                           else max(self.by_stage, key=_stage_rank))
        return self._stage

    def shown(self) -> dict[str, Any]:
        """The entry of the deepest stage (it includes the earlier stages' warnings and errors)."""
        return self.by_stage[self.stage()]

    def _outcome(self) -> dict[str, Any] | None:
        entry = self.shown()
        actual = entry.get("actual")
        return actual if isinstance(actual, dict) and entry["status"] != "skipped" else None

    def outcome(self) -> Outcome | None:
        """The typed outcome of the deepest stage's entry; None when it recorded none (it was skipped)."""
        if self._typed_outcome is _UNSET:
            outcome = self._outcome()
            self._typed_outcome = None if outcome is None else _typed(outcome)
        return self._typed_outcome

    def cell(self) -> Cell:
        if self._cell is None:
            self._cell = self._make_cell()
        return self._cell

    def _make_cell(self) -> Cell:
        outcome = self.outcome()
        if outcome is not None:
            base = _typed_cell(outcome)
        else:
            reason = self.shown().get("message") or "no outcome was recorded"
            base = Cell(UNKNOWN, "unknown", (f"not run: {reason}",))
        defects = (self.shown().get("extra") or {}).get("defects") or ()
        if defects:
            base = Cell(f"{base.text} {DEFECT}", base.kind, base.notes + tuple(defect_marker(d) for d in defects))
        mismatches = [
            f"differs from the oracle at stage {label(stage)}: {e.get('message') or e['status']}"
            for stage, e in sorted(self.by_stage.items(), key=lambda item: _stage_rank(item[0]))
            if e["status"] in ("failed", "error")
        ]
        if mismatches:
            return Cell(base.text + " ❗ differs", "mismatch", base.notes + tuple(mismatches))
        return base

    def signature(self) -> tuple | None:
        """The outcome's signature, or None when nothing ran."""
        if self._signature is None:
            outcome = self.outcome()
            self._signature = _typed_signature(outcome) if outcome is not None else ()
        return self._signature or None


def matrix_cases(entries: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The config matrix's cases among `entries`: a test of the config suite that records no cell (the config
    invariants' strict xfails, suites/config/test_invariants.py) is no case of the matrix, and would show as an era
    and a platform "none"."""
    return [e for e in entries if e["suite"] == SUITE and e.get("cell")]


def group_by_era(entries: Iterable[dict[str, Any]]) -> dict[str, dict[ConfigKey, Configuration]]:
    """Matrix cases by era, then by configuration (connector, features, platform, flag), each configuration's
    entries by stage."""
    eras: dict[str, dict[ConfigKey, Configuration]] = defaultdict(dict)
    for entry in entries:
        cell = entry.get("cell") or {}
        key = (label(cell.get("connector")), label(cell.get("features")), label(cell.get("platform")),
               cell.get("flag"))
        configurations = eras[label(cell.get("era"))]
        configuration = configurations.get(key)
        if configuration is None:
            configuration = configurations[key] = Configuration()
        configuration.by_stage[cell.get("stage")] = entry
    return eras


def _row_sort(key: tuple[str, str]) -> tuple:
    return (_first_sort(key[0]), _first_sort(key[1]))


def _column_sort(key: tuple[str, Any]) -> tuple:
    return (_platform_sort(key[0]), _flag_sort(key[1]))


def _key_sort(key: ConfigKey) -> tuple:
    return (_row_sort((key[0], key[1])), _column_sort((key[2], key[3])))


def era_anchor(era: str) -> str:
    """The link target of an era's section ('era-v0.33'), in the Markdown pages and the HTML page alike."""
    return f"era-{era}"


def era_page(era: str) -> str:
    """The Markdown file an era's tables go to (the main page stays short)."""
    return f"compatibility-{era}.md"


CHANGES_PAGE = "compatibility-changes.md"


def stage_note(configurations: Iterable[Configuration]) -> tuple[Any, str]:
    """(the deepest stage among `configurations`, a sentence saying which stage the cells reached)."""
    stages = {configuration.stage() for configuration in configurations}
    deepest = max(stages, key=_stage_rank) if stages else None
    if len(stages) <= 1:
        return deepest, f"Every cell below ran through stage `{label(deepest)}`."
    return deepest, (f"Cells ran through stage `{label(deepest)}` unless they say otherwise "
                     "(\"config only\": stopped before the connector was created).")


def _staged_cell(configuration: Configuration, deepest: Any) -> Cell:
    """The cell, saying so when it stopped before the table's deepest stage."""
    cell = configuration.cell()
    if configuration.stage() == deepest:
        return cell
    return Cell(f"{cell.text} ({label(configuration.stage())} only)", cell.kind, cell.notes)


def _era_table(era: str, configurations: dict[ConfigKey, Configuration]) -> tuple[Table, str]:
    """The main table (the rows without a connector or without features, by the platform x flag they ran
    on) and the sentence saying which stage its cells reached."""
    shown = [key for key in configurations if is_main_row(key[0], key[1])]
    deepest, note = stage_note(configurations[key] for key in shown)
    rows_keys = sorted({(c, f) for c, f, _, _ in shown}, key=_row_sort)
    column_keys = sorted({(p, fl) for _, _, p, fl in shown}, key=_column_sort)
    missing = Cell(UNKNOWN, "unknown", (NOT_RUN,))
    rows = []
    for connector, features in rows_keys:
        row: list[Cell | str] = [connector_label(connector), feature_label(features)]
        for platform, flag in column_keys:
            configuration = configurations.get((connector, features, platform, flag))
            row.append(_staged_cell(configuration, deepest) if configuration is not None else missing)
        rows.append(row)
    return Table(
        headers=["connector", "feature"] + [f"{p} · {flag_label(fl, era)}" for p, fl in column_keys],
        rows=rows,
        row_filters=[{"connector": c} for c, _ in rows_keys],
        column_filters=[{}, {}] + [{"platform": p} for p, _ in column_keys],
        search=True,
    ), note


def _interaction_table(era: str, configurations: dict[ConfigKey, Configuration]) -> Table:
    """The configurations with a connector and a feature, one line each (only those that ran are listed),
    with the stage each reached."""
    keys = sorted((key for key in configurations if not is_main_row(key[0], key[1])), key=_key_sort)
    return Table(
        headers=["connector", "feature", "platform", "flag", "outcome", "stage reached"],
        rows=[[connector_label(c), feature_label(f), p, flag_label(fl, era), configurations[(c, f, p, fl)].cell(),
               label(configurations[(c, f, p, fl)].stage())]
              for c, f, p, fl in keys],
        row_filters=[{"connector": c, "platform": p} for c, _, p, _ in keys],
        search=True,
    )


def _era_blocks(era: str, configurations: dict[ConfigKey, Configuration]) -> list:
    blocks: list = [Heading(3, f"Era {era_title(era)}", anchor=era_anchor(era))]
    main, note = _era_table(era, configurations)
    if main.rows:
        blocks += [Paragraph(note), main]
    interactions = _interaction_table(era, configurations)
    if interactions.rows:
        count = len(interactions.rows)
        release = ERA_RELEASES.get(era, era)
        blocks += [Paragraph(f"A connector together with a feature in {era}: {count} configuration"
                             f"{'' if count == 1 else 's'} (the matrix samples their platforms and flags pairwise; "
                             f"any other combination: `kvconform explain --vllm-version {release} --platform P "
                             "[flag] --kv-transfer-config ... [feature options]`)."),
                   interactions]
    return blocks


def config_kind(configuration: Configuration | None, deepest: Any = None) -> str | None:
    """'✅ on', '⚪ off', '❌ E-F', '❔ unknown' for the glance table (no notes), None when it did not run;
    '(config only)' added when it stopped before `deepest`."""
    if configuration is None or configuration.signature() is None:
        return None
    text = configuration.cell().text.replace(" ❗ differs", "")
    if deepest is not None and configuration.stage() != deepest:
        text += f" ({label(configuration.stage())} only)"
    return text


def _timeline(series: list[tuple[str, str | None]], link: bool = False) -> str:
    """'⚪ off; ✅ on from 0.23.0' from (era, kind) pairs in release order (eras that did not run skipped);
    with `link`, each release links to its era's tables."""
    parts: list[str] = []
    previous = None
    for index, (era, kind) in enumerate(series):
        if kind is None or kind == previous:
            continue
        release = ERA_RELEASES.get(era, era)
        where = f"[{release}](#{era_anchor(era)})" if link else release
        # the first outcome needs no release when the configuration ran from the first era on
        parts.append(kind if previous is None and index == 0 else f"{kind} from {where}")
        previous = kind
    return "; ".join(parts) if parts else "not run"


def platforms_of(eras: dict[str, dict[ConfigKey, Configuration]]) -> list[str]:
    return sorted({p for configurations in eras.values() for _, _, p, _ in configurations}, key=_platform_sort)


def _glance_table(eras: dict[str, dict[ConfigKey, Configuration]], order: list[str], platform: str) -> Table:
    """Per connector (no feature) and per feature (no connector), on one platform: flag auto and explicit
    enable, release by release."""
    rows_keys = sorted({(c, f) for era in order for c, f, p, _ in eras[era]
                        if p == platform and is_main_row(c, f)}, key=_row_sort)
    deepest, _ = stage_note(eras[era][key] for era in order for key in eras[era]
                             if key[2] == platform and is_main_row(key[0], key[1]) and key[3] in (None, False))
    rows = []
    for connector, features in rows_keys:
        auto = [(era, config_kind(eras[era].get((connector, features, platform, None)), deepest)) for era in order]
        enable = [(era, config_kind(eras[era].get((connector, features, platform, False)), deepest)) for era in order]
        rows.append([connector_label(connector), feature_label(features), _timeline(auto), _timeline(enable)])
    return Table(headers=["connector", "feature", "flag auto (absent)", "explicit enable (--no-disable-… / --enable-…)"],
                 rows=rows, row_filters=[{"connector": c, "platform": platform} for c, _ in rows_keys], search=True)


def _changes_table(eras: dict[str, dict[ConfigKey, Configuration]], order: list[str]) -> Table:
    """The changes of outcome between consecutive eras, one row per change, listing the configurations it hit.

    An unknown that stays unknown is no change, however its reason is worded (the reason names the release).
    """
    changes: dict[tuple, dict[tuple, list[str]]] = {}  # (between, before, after, era) -> configuration -> platforms
    keys = sorted({key for era in order for key in eras[era]}, key=_key_sort)
    for key in keys:
        previous_era, previous = None, None
        for era in order:
            configuration = eras[era].get(key)
            if configuration is None or configuration.signature() is None:
                continue
            if previous is not None and previous.signature() != configuration.signature():
                before, after = previous.cell(), configuration.cell()
                if not (before.kind == after.kind == "unknown"):
                    connector, features, platform, flag = key
                    change = (f"{ERA_RELEASES.get(previous_era, previous_era)} → {ERA_RELEASES.get(era, era)}",
                              before, after, era)
                    changes.setdefault(change, {}).setdefault((connector, features, flag_label(flag, era)),
                                                              []).append(platform)
            previous_era, previous = era, configuration
    rows, row_filters = [], []
    in_release_order = sorted(changes.items(), key=lambda item: (era_sort_key(item[0][3]), item[0][1].text,
                                                                  item[0][2].text))
    for (between, before, after, era), configurations in in_release_order:
        listed = [f"{connector_label(c)} + {feature_label(f)} · {fl} · {', '.join(platforms)}"
                  for (c, f, fl), platforms in configurations.items()]
        rows.append([between, before, after, str(len(listed)), "; ".join(listed)])
        row_filters.append({"era": era, "connector": " ".join(sorted({c for c, _, _ in configurations})),
                            "platform": " ".join(p for p in PLATFORMS
                                                 if any(p in ps for ps in configurations.values()))})
    return Table(headers=["releases", "before", "after", "configurations", "which (connector + feature · flag · platforms)"],
                 rows=rows, row_filters=row_filters, search=True)


def oracle_summary(entries: list[dict[str, Any]]) -> str:
    """One sentence: how many matrix cells agree with the oracle."""
    counts = defaultdict(int)
    for entry in entries:
        counts[entry["status"]] += 1
    total = len(entries)
    text = (f"{counts['passed']} of {total} matrix cases agree with the oracle, {counts['failed']} differ, "
            f"{counts['error']} could not be evaluated (error) and {counts['skipped']} were skipped.")
    return text


def config_sections(entries: list[dict[str, Any]],
                    eras: dict[str, dict[ConfigKey, Configuration]] | None = None) -> list[Section]:
    """The config section (summary, at a glance per platform, legends), one section per era
    (each on its own Markdown page), and what changed between releases (on its own page); `eras`: the
    `group_by_era` of `entries`' `matrix_cases` where the caller has it (the support section uses it too)."""
    config_entries = matrix_cases(entries)
    if not config_entries:
        return []
    eras = group_by_era(config_entries) if eras is None else eras
    order = sorted(eras, key=era_sort_key)
    used_connectors = {c for era in order for c, _, _, _ in eras[era]}
    used_features = {f for era in order for _, f, _, _ in eras[era]}
    blocks: list = [
        Heading(2, "Config resolution matrix", anchor="config"),
        Paragraph(oracle_summary(config_entries)),
        Paragraph(LEGEND),
        Paragraph(FLAG_LEGEND),
    ]
    for platform in platforms_of(eras):
        glance = _glance_table(eras, order, platform)
        if glance.rows:
            _, note = stage_note(eras[era][key] for era in order for key in eras[era]
                                  if key[2] == platform and is_main_row(key[0], key[1]) and key[3] in (None, False))
            blocks += [Heading(3, f"At a glance: {platform}", anchor=f"glance-{platform}"),
                       Paragraph(f"How HMA resolves on {platform} for each connector (without features) and each "
                                 "feature (without a connector), release by release: the first outcome holds from "
                                 f"the earliest release that ran, each later one from the release named. {note}"),
                       glance]
    legend = legend_rows(used_connectors, used_features)
    if legend:
        blocks += [Heading(3, "What the configurations are", anchor="configurations"),
                   Table(headers=["label", "id in test names and results.json.gz", "kind", "configuration"],
                         rows=legend)]
    blocks.append(Paragraph(
        "Per release (one page each in Markdown): a table with every feature without a connector and every "
        "connector without features, on every platform and flag, then the configurations where a connector "
        "meets a feature, which the matrix samples pairwise (every connector with every feature at least "
        "once), each with the stage it reached: "
        + ", ".join(f"[{era_title(era)}](#{era_anchor(era)})" for era in order)
        + "; [what changed between releases](#changes)."))
    sections = [Section("config", blocks)]
    for era in order:
        sections.append(Section("config", _era_blocks(era, eras[era]), filters={"era": era}, page=era_page(era)))
    changes = _changes_table(eras, order)
    blocks = [Heading(2, "What changed between releases", anchor="changes"),
              Paragraph("Each row is one change of outcome between two consecutive eras, with every configuration "
                        "it applies to (an unknown that stays unknown is not a change; the era filter of the HTML "
                        "page selects the changes that arrive in that era).")]
    blocks.append(changes if changes.rows else Paragraph("No configuration changed its outcome between eras."))
    sections.append(Section("config", blocks, page=CHANGES_PAGE))
    return sections
