"""The support table: one row per connector a reader can deploy, one column per platform, and in each cell what
`--enable-hybrid-kv-cache-manager` does with that connector release by release (config) and what the connector did
when the connector suite ran it on a release (run); then, apart, the resolver's cases.

Rows: every connector vLLM registers in some release (`reference_impl.config.eras.VLLM_REGISTERED_CONNECTORS`;
LMCache's two come through vLLM's registry and need the `lmcache` package) that the config matrix ran, and every vendor
connector the connector suite was given with `--kv-connector`. A row is the matrix's configuration of that name
with no feature and an explicit enable, except where the bare name is not how it is deployed (`DEPLOYED_AS`).
Every other connector configuration of the matrix (lookup order, bad modes, unknown names, old constructors,
nested MultiConnectors, ...) tests the resolver, and goes to the resolver's cases below the table.

A config cell reads newest release first, one release range per outcome: `✅ on 0.21.0–0.34.x; ❌ E-F
0.13.0–0.20.x`. An outcome that only says the modelled install lacks an optional package (E-NO-LMCACHE) is no
refusal: where kvconform has a reviewed fact on a version of the package, the range answers for a deployment
that has it, as `kvconform explain --installed PKG` does, and says so ("with lmcache 0.5.6"); otherwise it says
"needs PKG". A note says which. Run results (`harness.report.connector_runs`) follow where the release's config
turns HMA on: `run ✅ 0.33.0 · run ❌ 0.34.0 [cause]`, each release linked to its evidence.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from harness.eras import ERA_FIRST_VERSIONS, ERA_IDS, ERA_RELEASES, NEWEST_EXCLUSIVE
from harness.invariants.defects import defects_of
from harness.report.config_section import (DEFECT, ConfigKey, Configuration, config_kind, era_anchor,
                                           era_sort_key, group_by_era, matrix_cases, outcome_cell, platforms_of,
                                           stage_note)
from harness.report.connector_runs import SYMBOLS, RunVerdict, combined_runs, committed_runs
from harness.report.labels import connector_label
from harness.report.model import BulletList, Cell, Heading, Paragraph, Section, Table
from reference_impl.config.cases import resolve_case
from reference_impl.config.eras import VLLM_REGISTERED_CONNECTORS, resolve_era
from reference_impl.config.factory import packages_assumed_installed
from reference_impl.vocabulary import (CASE_DEFAULTS, CONNECTOR_FIXTURES, NO_CONNECTOR, NO_FEATURES,
                                       UNREGISTERED_CONNECTOR)

# vLLM's factory error for a name the release does not register
UNREGISTERED_ID = "E-UNSUPPORTED-CONNECTOR"
NOT_REGISTERED = "– not registered"
# Reviewed: the matrix configurations that stand for a connector as it is deployed, where the bare name is not it
# (the first that ran in an era is used): MultiConnector's bare configuration has no "connectors" key, which vLLM
# refuses; from 0.34.0 HiSparse needs a host pool.
DEPLOYED_AS: dict[str, tuple[str, ...]] = {
    "MultiConnector": ("MultiAllHMA",),
    "HiSparseConnector": ("HiSparsePool", "HiSparseConnector"),
}
REGISTERED = {info.name: info for info in VLLM_REGISTERED_CONNECTORS}
# The matrix's configuration of a vendor's connector, by whether it declares SupportsHMA.
VENDOR_AS = {True: "ExternalHMA", False: "ExternalPlain"}
SUPPORT_ANCHOR, RESOLVER_ANCHOR = "support", "resolver-cases"
# A run's cause longer than this goes to a note instead of the cell.
_INLINE_CAUSE = 160


@dataclass(frozen=True)
class _Outcome:
    """One era's config answer in a support cell: its words, its kind (the HTML colour) and its notes."""

    word: str
    kind: str
    notes: tuple[str, ...] = ()
    #: the assumption it was answered under ("with lmcache 0.5.6"), where the modelled install lacks a package
    assumption: str = ""
    #: notes a range keeps from every release in it (how the row is configured, a missing package); the other
    #: notes come from the range's newest release only (an unknown's reason names its release)
    sticky: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        """What a release range groups by."""
        return f"{self.word}, {self.assumption}" if self.assumption else self.word


def _release_text(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version))


def _last_release(era: str) -> str:
    """The last release an era covers: '0.20.x' (the next era starts at 0.21.0), '0.11.0' (the next at 0.11.1)."""
    index = ERA_IDS.index(era)
    following = ERA_FIRST_VERSIONS[ERA_IDS[index + 1]] if index + 1 < len(ERA_IDS) else tuple(NEWEST_EXCLUSIVE) + (0,)
    major, minor, patch = (tuple(following) + (0, 0, 0))[:3]
    if patch:
        return f"{major}.{minor}.{patch - 1}"
    return f"{major}.{minor - 1}.x" if minor else f"<{major}.{minor}.{patch}"


def release_range(first_era: str, last_era: str) -> str:
    """'0.13.0–0.20.x' for the releases from `first_era` to `last_era`, '0.33.x' for one era of one minor."""
    start, end = _release_text(ERA_FIRST_VERSIONS[first_era]), _last_release(last_era)
    if end.endswith(".x") and start.endswith(".0") and start.rsplit(".", 1)[0] == end.rsplit(".", 1)[0]:
        return end
    if start == end:
        return start
    return f"{start}–{end}"


def _ranges(series: list[tuple[str, _Outcome | None]]) -> list[tuple[str, str, _Outcome]]:
    """(first era, last era, outcome) for each run of eras with the same words, in release order; an era that did
    not run ends a range (no range spans releases the matrix did not ask)."""
    ranges: list[list] = []
    previous_index = None
    for era, outcome in series:
        index = ERA_IDS.index(era) if era in ERA_IDS else None
        if outcome is None or index is None:
            previous_index = None
            continue
        if ranges and previous_index is not None and index == previous_index + 1 and ranges[-1][2].key == outcome.key:
            ranges[-1][1] = era
        else:
            ranges.append([era, era, outcome])
        previous_index = index
    return [tuple(r) for r in ranges]


def _missing_package(name: str, era: str, configuration: Configuration) -> Any:
    """The PackageImport whose absence is the whole of this configuration's outcome, else None."""
    outcome = configuration.outcome()
    error = outcome.error if outcome is not None else None
    imports = resolve_era(ERA_RELEASES.get(era, era))[0].package_imported_by(name) if era in ERA_RELEASES else None
    if imports is not None and error and (error.type, error.id) == (imports.vllm_type, imports.message_id):
        return imports
    return None


def _with_package(name: str, era: str, platform: str, imports) -> _Outcome:
    """The explicit enable of `name` in `era` on `platform` for a deployment that has the package (where its
    version matters, the newest version kvconform has a fact on), as `kvconform explain --installed` answers."""
    package = imports.package
    ident = imports.message_id
    version = imports.newest_known_version()
    case = {"id": "support", "vllm_version": ERA_RELEASES[era], "platform": platform, "flag": False,
            "kv_connector": name, "kv_role": "kv_both", "stage": "create_connector"}
    with packages_assumed_installed({package: version}):
        result = resolve_case(case)
        defects = defects_of({**CASE_DEFAULTS, **case}, result)  # its related cases under the same assumption
    cell = outcome_cell(result)
    if defects:
        cell = Cell(f"{cell.text} {DEFECT}", cell.kind, cell.notes + tuple(defect.marker() for defect in defects))
    which = f"{package} {version}" if version else package
    note = (f"{ident}: the modelled install lacks the optional package `{package}` (looking {name} up, vLLM raises "
            f"{imports.vllm_type}: {imports.message}); that is no refusal of the connector. \"with {which}\": the "
            f"answer for a deployment that has {which}"
            + (", the newest version kvconform has facts on" if version else "")
            + f" (`kvconform explain --installed {package} ...`).")
    return _Outcome(cell.text, cell.kind, cell.notes, f"with {which}", (note,))


def _config_outcome(name: str | None, era: str, platform: str, configuration: Configuration | None,
                    deepest: Any, note: str = "") -> _Outcome | None:
    """One era's answer for a support or resolver cell; None when the configuration did not run."""
    word = config_kind(configuration, deepest)
    if word is None:
        return None
    cell = configuration.cell()
    outcome = configuration.outcome()
    if cell.kind == "error" and outcome is not None and outcome.error and outcome.error.id == UNREGISTERED_ID:
        return _Outcome(NOT_REGISTERED, "")
    imports = _missing_package(name, era, configuration) if name else None
    if imports is not None:
        return _with_package(name, era, platform, imports)
    return _Outcome(word, cell.kind, cell.notes, sticky=(note,) if note else ())


def _series(eras: dict[str, dict[ConfigKey, Configuration]], order: list[str], fixtures: tuple[str, ...],
            platform: str, deepest: Any, name: str | None) -> list[tuple[str, _Outcome | None]]:
    """Per era, the explicit enable of the first of `fixtures` that ran there."""
    series = []
    for era in order:
        found = None
        for fixture in fixtures:
            configuration = eras[era].get((fixture, NO_FEATURES, platform, False))
            if configuration is not None and configuration.signature() is not None:
                note = "" if fixture == name or name is None else f"configured as: {CONNECTOR_FIXTURES[fixture].description}"
                found = _config_outcome(name, era, platform, configuration, deepest, note)
                break
        series.append((era, found))
    return series


def _config_text(series: list[tuple[str, _Outcome | None]]) -> tuple[str, str, tuple[str, ...], dict[str, str]]:
    """('✅ on [0.21.0–0.34.x](#era-v0.21); ❌ E-F …', kind of the newest range, notes, era -> word): newest first;
    a 'not registered' range before the first release that registers the name is left out; an assumption every
    range shares is said once, first ('config, with lmcache 0.5.6: …')."""
    ranges = _ranges(series)
    while len(ranges) > 1 and ranges[0][2].word == NOT_REGISTERED:
        ranges.pop(0)
    if not ranges:
        return "not run", "unknown", (), {}
    assumptions = {outcome.assumption for _, _, outcome in ranges}
    shared = assumptions.pop() if len(assumptions) == 1 else ""
    parts = [f"{outcome.word if shared else outcome.key} [{release_range(first, last)}](#{era_anchor(first)})"
             for first, last, outcome in reversed(ranges)]
    by_era = dict(series)
    notes: list[str] = []
    for first, last, _ in reversed(ranges):
        within = [by_era[era] for era in ERA_IDS[ERA_IDS.index(first):ERA_IDS.index(last) + 1]
                  if by_era.get(era) is not None]
        for note in [n for outcome in within for n in outcome.sticky] + list(by_era[last].notes):
            if note not in notes:
                notes.append(note)
    words = {era: outcome.word for era, outcome in series if outcome is not None}
    return (f", {shared}: " if shared else " ") .join(["config", "; ".join(parts)]), ranges[-1][2].kind, \
        tuple(notes), words


def _run_text(runs: list[RunVerdict], words: dict[str, str], name: str) -> tuple[list[str], list[str]]:
    """The run parts of a cell ('run ❌ [0.34.0](evidence) [cause]') for the releases whose config turns HMA on
    here, releases with the same verdict and cause together; and their notes."""
    grouped: dict[tuple[str, str], list[RunVerdict]] = defaultdict(list)
    for run in runs:
        era = resolve_era(run.release)[0].id if _knows(run.release) else None
        if era is None or not words.get(era, "").startswith("✅"):
            continue
        grouped[(run.verdict, run.cause)].append(run)
    parts, notes = [], []
    for (verdict, cause), found in grouped.items():
        evidence = {run.evidence for run in found}
        if len(evidence) == 1 and "" not in evidence:
            releases = f"[{', '.join(run.release for run in found)}]({_evidence_link(evidence.pop())})"
        else:
            releases = ", ".join(f"[{run.release}]({_evidence_link(run.evidence)})" if run.evidence else run.release
                                 for run in found)
        text = f"run {SYMBOLS[verdict]} {releases}"
        packages = sorted({run.with_package for run in found if run.with_package})
        if cause and verdict == "pass":
            cause = f"HMA checks pass; its other findings: {cause}"  # single-group findings, not about HMA
        if cause and len(cause) <= _INLINE_CAUSE:
            text += f" [{cause}]"
        elif cause:
            used = f" with {', '.join(packages)}" if packages else ""
            notes.append(f"run of {name} on {', '.join(r.release for r in found)}{used}: {cause}")
        parts.append(text)
    return parts, notes


def _knows(release: str) -> bool:
    try:
        resolve_era(release)
    except ValueError:
        return False
    return True


def _evidence_link(evidence: str) -> str:
    """A link from reports/compatibility.md: a repository path becomes '../path', '#anchor' stays."""
    return evidence if evidence.startswith("#") else f"../{evidence}"


def _cell(series, runs: list[RunVerdict], name: str | None, extra_runs: list[str] = ()) -> Cell:
    text, kind, notes, words = _config_text(series)
    run_parts, run_notes = _run_text(runs, words, name or "") if runs else ([], [])
    run_parts += list(extra_runs)
    if text == "not run" and not run_parts:
        return Cell("not run", "unknown", ("not run: the matrix has no result for this configuration",))
    return Cell(" · ".join([text, *run_parts]), kind, notes + tuple(run_notes))


def _vendor_connectors(entries: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The connector-suite entries of each vendor connector (given with --kv-connector: neither kvconform's own
    nor a vLLM connector)."""
    from harness.report.engine_section import without_other_engines
    from harness.report.vllm_connectors_section import vllm_connector_of
    from harness.target_spec import BUILTIN_CONNECTORS as KVCONFORM_CONNECTORS

    found: dict[str, list] = defaultdict(list)
    for entry in without_other_engines(entries):
        connector = str((entry.get("cell") or {}).get("connector") or "")
        if (entry.get("suite") == "connector" and connector and connector not in KVCONFORM_CONNECTORS
                and vllm_connector_of(entry) is None):
            found[connector].append(entry)
    return dict(found)


def deployable_fixtures(eras: dict[str, dict[ConfigKey, Configuration]]) -> dict[str, tuple[str, ...]]:
    """Support row (a registered name) -> the matrix configurations that stand for it, for the names that ran."""
    ran = {c for configurations in eras.values() for c, f, _, _ in configurations if f == NO_FEATURES}
    rows = {}
    for name in REGISTERED:
        fixtures = DEPLOYED_AS.get(name, (name,))
        if any(f in ran for f in fixtures):
            rows[name] = fixtures
    return rows


def _provider(name: str) -> str:
    from harness.targets.connector.vllm_facts import is_example

    imports = REGISTERED[name].imports
    if imports is not None and imports.package == "lmcache":
        return "LMCache, through vLLM (`lmcache`)"
    if imports is not None:
        return f"vLLM (`{imports.package}`)"
    return "vLLM, example" if is_example(name) else "vLLM"


def support_sections(entries: list[dict[str, Any]], runs: list[RunVerdict] | None = None,
                     eras: dict[str, dict[ConfigKey, Configuration]] | None = None) -> list[Section]:
    """The support table and the resolver's cases (none without config-matrix results); `eras`: the
    `group_by_era` of `entries`' `matrix_cases` where the caller has it (the config section uses it too)."""
    config_entries = matrix_cases(entries)
    if not config_entries:
        return []
    eras = group_by_era(config_entries) if eras is None else eras
    order = sorted(eras, key=era_sort_key)
    platforms = platforms_of(eras)
    enables = [eras[era][key] for era in order for key in eras[era]
               if key[1] == NO_FEATURES and key[0] != NO_CONNECTOR and key[3] is False]
    deepest, note = stage_note(enables)
    by_connector = combined_runs(entries, committed_runs() if runs is None else runs)
    rows_of = deployable_fixtures(eras)

    rows, row_filters, anchors = [], [], []
    newest: dict[str, list] = {}  # connector -> its series per platform, for the newest releases' lists
    for name in sorted(rows_of, key=str.lower):
        fixtures = rows_of[name]
        series = [_series(eras, order, fixtures, platform, deepest, name) for platform in platforms]
        if all(outcome is None or outcome.word == NOT_REGISTERED for one in series for _, outcome in one):
            continue  # a name the matrix asks about only where no release registers it
        newest[name] = series
        cells = [_cell(one, by_connector.get(name, []), name) for one in series]
        rows.append([name, _provider(name), *cells])
        row_filters.append({"connector": " ".join(dict.fromkeys((name, *fixtures)))})
        anchors.append(f"connector-{name}")
    for vendor, found in sorted(_vendor_connectors(entries).items(), key=lambda item: item[0].lower()):
        rows.append(_vendor_row(vendor, found, eras, order, platforms, deepest))
        row_filters.append({"connector": vendor})
        anchors.append(f"connector-{vendor}")

    blocks: list = [
        Heading(2, "Which connector runs with HMA: the support table", anchor=SUPPORT_ANCHOR),
        Paragraph(
            "One row per connector you can deploy (every connector vLLM registers, LMCache's two through vLLM's "
            "registry, and any vendor connector this run was given with `--kv-connector`), one column per platform. "
            "Each cell reads newest release first. **config**: what `--enable-hybrid-kv-cache-manager` (before 0.33.0 "
            "`--no-disable-hybrid-kv-cache-manager`) does with that connector alone, per range of releases (each "
            "range links to its release's tables): ✅ on = HMA on; ❌ and a message id (E-F, ...) = vLLM refuses; "
            "⚪ off; ❔ unknown = vLLM's sources do not decide it (TPU lives in tpu_inference); – not registered. "
            "**run**: what the connector did with HMA when kvconform's connector suite ran its real class on that "
            "release (multi-group models, on a CPU; each release links to the evidence), shown where the config "
            "turns HMA on: ✅ passes every MUST check that applies; ❌ fails [cause]; ➖ ran, but no multi-group "
            "behaviour was judged [why]; ❔ not judged [why]. An optional package the modelled install lacks "
            "(E-NO-LMCACHE) is a note on the cell, and the cell answers for a deployment that has it (\"with lmcache "
            f"0.5.6\", as `kvconform explain --installed lmcache` does). {note}"),
        Paragraph(
            "Any configuration not listed: `kvconform explain --vllm-version R --platform P "
            "--enable-hybrid-kv-cache-manager --kv-transfer-config '{\"kv_connector\": \"NixlConnector\", "
            "\"kv_role\": \"kv_both\"}'`. The configurations that test how vLLM resolves a connector (lookup "
            "order, bad modes, unknown names, old constructors, nested MultiConnectors) are not connectors to "
            f"choose: they are [the resolver's cases](#{RESOLVER_ANCHOR}) below."),
    ]
    blocks += _newest_blocks(order, platforms, newest, by_connector)
    blocks += [
        Table(headers=["connector", "comes from", *platforms], rows=rows, row_filters=row_filters, row_anchors=anchors,
              column_filters=[{}, {}] + [{"platform": p} for p in platforms], search=True),
    ]
    blocks += _resolver_blocks(eras, order, platforms, deepest, rows_of)
    return [Section("support", blocks)]


# How many of the newest releases get a line each: who keeps HMA on, per platform.
NEWEST_RELEASES = 2


def _newest_blocks(order: list[str], platforms: list[str], newest: dict[str, list],
                   by_connector: dict[str, list[RunVerdict]]) -> list:
    """One line per newest release (its era): per platform, the connectors an explicit enable keeps HMA on with,
    each with what it did at run time on that release ("NixlConnector (run ❔ 0.34.0)"), from the support
    table's own cells; platforms with the same list share it."""
    known = [era for era in order if era in ERA_RELEASES][-NEWEST_RELEASES:]
    items = []
    for era in reversed(known):
        lists: dict[str, list[str]] = {}
        for index, platform in enumerate(platforms):
            names = []
            for name, series in newest.items():
                outcome = dict(series[index]).get(era)
                if outcome is None or not outcome.word.startswith("✅"):
                    continue
                marks = [f"run {SYMBOLS[run.verdict]} {run.release}" for run in by_connector.get(name, [])
                         if _knows(run.release) and resolve_era(run.release)[0].id == era]
                if outcome.assumption:
                    marks.insert(0, outcome.assumption)
                names.append(f"{name} ({', '.join(marks)})" if marks else name)
            lists.setdefault(", ".join(names) or "none", []).append(platform)
        parts = [f"{', '.join(on)}: {names}" for names, on in lists.items()]
        items.append(f"**{release_range(era, era)}** ([tables](#{era_anchor(era)})): " + "; ".join(parts))
    if not items:
        return []
    return [Paragraph("**The newest releases at a glance**: with `--enable-hybrid-kv-cache-manager`, HMA stays on "
                      "with these connectors, per platform, and each did this at run time on that release (the "
                      "table's cells say why and link the evidence):"),
            BulletList(items)]


def _vendor_row(vendor: str, found: list[dict[str, Any]], eras, order, platforms, deepest) -> list:
    """A vendor connector: the config of an out-of-tree connector that declares SupportsHMA as it does, and its
    run on kvconform's engine."""
    from harness.report.connector_section import declares_hma, hma_verdict

    declares = declares_hma(found)
    fixture = VENDOR_AS[declares]
    line = hma_verdict(vendor, found)
    verdict = {"✅": "pass", "❌": "fail", "➖": "not-exercised"}.get(line[:1], "unknown")
    run = f"run {SYMBOLS[verdict]} kvconform's engine"
    cells = []
    for platform in platforms:
        series = _series(eras, order, (fixture,), platform, deepest, None)
        cell = _cell(series, [], None)
        note = (f"config: {vendor} {'declares' if declares else 'does not declare'} `SupportsHMA`, so this is "
                f"the matrix's {connector_label(fixture)} ({CONNECTOR_FIXTURES[fixture].description})")
        words = {era: outcome.word for era, outcome in series if outcome is not None}
        extra = [run] if any(w.startswith("✅") for w in words.values()) else []
        cells.append(Cell(" · ".join([cell.text, *extra]), cell.kind, cell.notes + (note, f"run: {line}")))
    return [vendor, "vendor (`--kv-connector`)", *cells]


def _resolver_blocks(eras, order, platforms, deepest, rows_of) -> list:
    """The connector configurations that are no deployable connector, each with what it tests."""
    used = {f for fixtures in rows_of.values() for f in fixtures}
    cases = sorted({c for era in order for c, f, _, fl in eras[era]
                    if f == NO_FEATURES and fl is False and c != NO_CONNECTOR and c not in used},
                   key=lambda c: connector_label(c).lower())
    rows = []
    for fixture in cases:
        cells = [_cell(_series(eras, order, (fixture,), platform, deepest, None), [], None) for platform in platforms]
        term = CONNECTOR_FIXTURES.get(fixture)
        what = (term.description if term else
                "a connector name no release registers" if fixture == UNREGISTERED_CONNECTOR else f"`{fixture}`")
        rows.append([connector_label(fixture), what, *cells])
    if not rows:
        return []
    return [
        Heading(3, "The resolver's cases: configurations that test how vLLM resolves a connector",
                anchor=RESOLVER_ANCHOR),
        Paragraph("Not connectors to deploy: each asks one rule of vLLM's lookup and checks (which lookup wins, a "
                  "MultiConnector's children, a transfer mode, an old constructor, a name no release registers). "
                  "Cells as in the support table (config only)."),
        Table(headers=["configuration", "what it tests", *platforms], rows=rows,
              row_filters=[{"connector": c} for c in cases],
              column_filters=[{}, {}] + [{"platform": p} for p in platforms], search=True),
    ]
