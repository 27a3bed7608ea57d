"""The connector part of the report: a check x connector table, the MUST checks that decided nothing, and
whether each connector may declare HMA.

A cell aggregates a check over the model presets: ❌ if any preset failed (footnote: the first failing
evidence), ➖ if the check does not apply (its entries' `not_applicable` records, `harness.outcomes`), ❔ if it
was skipped for another reason (a MUST check that skipped for a reason the connector's profile does not imply
decided nothing, `harness.outcomes.decided_nothing`: listed per connector under the table), ✅ otherwise.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

from harness.connector_checks import CHECKS
from harness.failure_causes import cause_of
from harness.failure_groups import cause_key, natural_key, split_check
from harness.outcomes import MULTI_GROUP, REFUSES_MULTI_GROUP, decided_nothing, is_not_applicable, skip_reason_key
from harness.report.labels import label, own_connector_label
from harness.report.model import BulletList, Cell, Heading, Paragraph, Section, Table
from harness.results_model import num_kv_cache_groups

SUITE = "connector"
# Checks that exercise a multi-group model whatever their preset cell says (their records' `multi_group`).
MULTI_GROUP_CHECK_IDS = tuple(check.id for check in CHECKS.values() if check.multi_group)
# Checks that read what the class declares (C01: SupportsHMA, the finish hook, the constructor) rather than
# exercise multi-group behaviour: an HMA verdict of ✅ needs multi-group checks beyond these to have run.
DECLARATION_CHECK_IDS = tuple(check.id for check in CHECKS.values() if check.declaration_only)
_EVIDENCE_LIMIT = 300


def _tier(entry: dict[str, Any]) -> str:
    return str((entry.get("cell") or {}).get("tier", ""))


def _is_vacuous(entry: dict[str, Any]) -> bool:
    return decided_nothing(_tier(entry), entry["status"], entry.get("not_applicable"))


def _is_not_applicable(entry: dict[str, Any]) -> bool:
    return is_not_applicable(_tier(entry), entry["status"], entry.get("not_applicable"))


def _na_kind(entry: dict[str, Any]) -> str | None:
    return (entry.get("not_applicable") or {}).get("kind") if entry["status"] == "skipped" else None


def decided_nothing_lines(connectors: list[str], grouped: dict[tuple[str, str], list],
                          shown=lambda connector: connector) -> list[str]:
    """One line per connector (named as `shown` labels it): its MUST cells that skipped for a reason its profile
    does not imply, and why."""
    lines = []
    for connector in connectors:
        vacuous = sorted((e for (_, c), es in grouped.items() if c == connector for e in es if _is_vacuous(e)),
                         key=lambda e: table_order(e["id"]))
        if not vacuous:
            lines.append(f"{shown(connector)}: none; every MUST check decided or is N/A by its profile.")
            continue
        cells = "; ".join(f"{label((e.get('cell') or {}).get('check'))} on "
                          f"{label((e.get('cell') or {}).get('preset'))}: {_evidence(e)}" for e in vacuous)
        lines.append(f"{shown(connector)}: {len(vacuous)} MUST cell(s) decided nothing: {cells}")
    return lines


def table_order(text: str) -> list:
    """The order of check ids, checks and test ids in the connector tables: natural, letters' case ignored."""
    return natural_key(text, ignore_case=True)


def _evidence(entry: dict[str, Any]) -> str:
    evidence = entry.get("extra", {}).get("evidence")
    if evidence is None:
        evidence = entry.get("message") or entry["status"]
    if not isinstance(evidence, str):
        evidence = json.dumps(evidence, sort_keys=True, ensure_ascii=False)
    evidence = " ".join(evidence.split())
    return evidence if len(evidence) <= _EVIDENCE_LIMIT else evidence[: _EVIDENCE_LIMIT - 1] + "…"


def check_cell(entries: list[dict[str, Any]], check: str) -> Cell:
    """Aggregate one check's entries (one per preset) for one connector."""
    by_preset = sorted(entries, key=lambda e: label((e.get("cell") or {}).get("preset")))
    failing = [e for e in by_preset if e["status"] in ("failed", "error")]
    if failing:
        first = failing[0]
        preset = label((first.get("cell") or {}).get("preset"))
        return Cell("❌", "fail", (f"{check} on preset {preset}: {_evidence(first)}",))
    skipped = [e for e in by_preset if e["status"] == "skipped"]
    if skipped and len(skipped) == len(by_preset) and all(_is_not_applicable(e) for e in skipped):
        return Cell("➖", "na", (skipped[0].get("message") or "not applicable",))
    other_skips = [e for e in skipped if not _is_not_applicable(e)]
    if other_skips:
        return Cell("❔", "unknown", (f"{check} not run: {other_skips[0].get('message') or 'skipped'}",))
    return Cell("✅", "pass")


def declares_hma(entries: list[dict[str, Any]]) -> bool:
    """Whether the connector declares SupportsHMA: one that does not is not applicable by its declaration on
    multi-group models ("not HMA-capable")."""
    return not any(_na_kind(e) == "declaration" for e in entries)


def _cause(entry: dict[str, Any]) -> str:
    """A failing cell's root-cause key: the structured cause its check recorded (`harness.failure_causes`), never
    its message's words; "" for a cell recorded without one (a cause no other cell can share)."""
    cause = cause_of(entry)
    return json.dumps(cause, sort_keys=True) if cause else ""


def _shown_cause(entry: dict[str, Any]) -> str:
    """A failing cell's cause as people read it: its message's first line without the check, the preset and the
    numbers (shown, never compared: which cell is shown, the verdict picks by its recorded cause)."""
    return cause_key(split_check((entry.get("message") or "").splitlines()[0] if entry.get("message") else "")[2])


def is_multi_group(entry: dict[str, Any]) -> bool:
    """Whether a cell exercised a model with several KV cache groups: its preset's, as the suite recorded it in the
    entry (`harness.results_model.num_kv_cache_groups`), or a check that always does."""
    return (num_kv_cache_groups(entry) or 0) > 1 or _check_id(entry) in MULTI_GROUP_CHECK_IDS


def hma_verdict(connector: str, entries: list[dict[str, Any]]) -> str:
    """One line: does this connector declare SupportsHMA, and may it? Judged by multi-group behaviour only:
    the checks on multi-group models, MUST tier, that failed (a harness error, status "error", is no evidence
    about the connector; single-group failures are findings of their own, not about HMA)."""
    multi = [e for e in entries if is_multi_group(e)]
    # A cause that also fails a single-group model (a crash on every step, a version mismatch) says nothing
    # about HMA: it is a finding of its own.
    single_causes = {_cause(e) for e in entries if e["status"] == "failed" and not is_multi_group(e)} - {""}
    hma_failures = [e for e in multi if e["status"] == "failed" and _cause(e) not in single_causes]
    failed_must = sorted({(e.get("cell") or {}).get("check", "?") for e in hma_failures
                          if (e.get("cell") or {}).get("tier") == "MUST"}, key=table_order)
    # the multi-group cells whose cause fails single-group models too, in the order of their recorded causes
    shared = sorted((e for e in multi if e["status"] == "failed" and _cause(e) in single_causes),
                    key=lambda e: (_cause(e), table_order(e["id"])))
    failed_should = sorted({(e.get("cell") or {}).get("check", "?") for e in hma_failures
                            if (e.get("cell") or {}).get("tier") != "MUST"}, key=table_order)
    declares = declares_hma(entries)
    # A declaration check (C01 reads the class) runs on a multi-group model but exercises no multi-group
    # behaviour: a ✅ rests on the checks that did.
    ran = [e for e in multi if e["status"] in ("passed", "failed") and _check_id(e) not in DECLARATION_CHECK_IDS]
    if not declares:
        return (f"➖ {connector} does not declare `SupportsHMA`; its multi-group checks were not run, "
                "so it must pass them before it declares it.")
    if failed_must:
        return (f"❌ {connector} declares `SupportsHMA` but must not: on multi-group models it fails MUST "
                f"check(s) {', '.join(failed_must)}.")
    refused = sorted({e["not_applicable"]["reason"] for e in multi if _is_not_applicable(e)
                      and e["not_applicable"].get("refuses") == MULTI_GROUP})
    if refused and not ran:
        return (f"➖ {connector} declares `SupportsHMA`, not exercised: it {REFUSES_MULTI_GROUP}{refused[0]}; no "
                "multi-group check applies.")
    if not ran:
        return (f"❔ {connector} declares `SupportsHMA`, not exercised: {_not_exercised(multi)}, so whether it may "
                "is unknown.")
    if shared:
        return (f"❔ {connector} declares `SupportsHMA`, but the multi-group checks it fails fail on single-group "
                f"models too ({_shown_cause(shared[0]).removeprefix('Failed: ')}), so whether it may is unknown until "
                "that is fixed.")
    suffix = f"; SHOULD checks failing: {', '.join(failed_should)}" if failed_should else ""
    checks = {_check_id(e) for e in ran}
    return (f"✅ {connector} declares `SupportsHMA` and may: it passes every MUST check that applies on every "
            f"multi-group preset ({len(ran)} multi-group cell{'s' if len(ran) != 1 else ''} of {len(checks)} "
            f"check{'s' if len(checks) != 1 else ''} ran{suffix}).")


def _check_id(entry: dict[str, Any]) -> str:
    return str((entry.get("cell") or {}).get("check", "")).split(" ")[0]


def _not_exercised(multi: list[dict[str, Any]]) -> str:
    """Why no multi-group check exercised the connector: what ran (a declaration check only) and the most common
    reason the others were skipped."""
    declared = sorted({_check_id(e) for e in multi if e["status"] in ("passed", "failed")})
    why = "only the declaration check " + ", ".join(declared) + " ran on a multi-group model" if declared \
        else "no multi-group check ran"
    # skips grouped by their typed records (`skip_reason_key`; by their words where they carry none), the largest
    # group shown in the words of its first message in sort order
    groups: dict[str, list[str]] = defaultdict(list)
    for e in multi:
        if e["status"] == "skipped" and e.get("message"):
            shown = " ".join(e["message"].split())
            key = skip_reason_key(e.get("not_applicable"), e.get("skip_cause"))
            groups[key if key is not None else shown].append(shown)
    if groups:
        largest = max(groups.values(), key=lambda shown: (len(shown), min(shown)))
        why += f" ({len(largest)} of {sum(map(len, groups.values()))} skipped: {min(largest)})"
    return why


def connector_sections(entries: list[dict[str, Any]]) -> list[Section]:
    """The connector conformance section, or nothing when the connector suite did not record."""
    records = [e for e in entries if e["suite"] == SUITE]
    if not records:
        return []
    grouped: dict[tuple[str, str], list] = defaultdict(list)
    checks: dict[str, tuple[str, str]] = {}
    for entry in records:
        cell = entry.get("cell") or {}
        check, connector = label(cell.get("check")), label(cell.get("connector"))
        grouped[(check, connector)].append(entry)
        tier, description = checks.get(check, ("", ""))
        checks[check] = (tier or label(cell.get("tier")), description or str(entry["extra"].get("description", "")))
    connectors = sorted({c for _, c in grouped}, key=str.lower)
    check_ids = sorted(checks, key=table_order)
    rows = []
    for check in check_ids:
        tier, description = checks[check]
        rows.append([check, tier, description] + [
            check_cell(grouped[(check, c)], check) if (check, c) in grouped else Cell("❔", "unknown", (f"{check} was not run for this connector",))
            for c in connectors
        ])
    # kvconform's own connectors carry its name (vLLM's classes of the same name have sections of their own);
    # the HTML filter offers the same label as the column
    table = Table(
        headers=["check", "tier", "description"] + [own_connector_label(c) for c in connectors],
        rows=rows,
        column_filters=[{}, {}, {}] + [{"connector": own_connector_label(c)} for c in connectors],
        search=True,
    )
    verdicts = [hma_verdict(own_connector_label(c), [e for (_, conn), es in grouped.items() if conn == c for e in es])
                for c in connectors]
    return [Section("connector", [
        Heading(2, "Connector conformance"),
        Paragraph("✅ pass = passes on every preset · ❌ fail = fails (note: the first failing evidence) · "
                  "➖ n/a = not applicable (note: why) · ❔ unknown = not run (note: why); the check ids are "
                  "explained in the connector spec section 4.2. `kvconform:` names kvconform's own connectors "
                  "(`reference_impl/connector`, what the suite runs without `--kv-connector`), never vLLM's classes "
                  "of the same name: each vLLM release whose connectors ran has a section of its own."),
        table,
        Heading(3, "MUST checks that decided nothing"),
        Paragraph("A MUST check that skipped for a reason the connector's profile (or its release) does not imply: "
                  "no verdict, so a bug of its class would pass unnoticed there."),
        BulletList(decided_nothing_lines(connectors, grouped, own_connector_label)),
        Heading(3, "May each connector declare SupportsHMA?"),
        BulletList(verdicts),
    ])]
