"""The "vLLM X's connectors" sections: the connector suite run against the in-tree connectors of a vLLM
release (`--kv-connector vllm:Name`), one section per release, connector x check.

Their results are connector-suite entries whose connector is named `vllm-<release>:<Name>` (the name
`harness.targets.connector.vllm_target` gives them), so they merge with the main results through `kvconform merge`
and stay out of the main connector table. A cell aggregates the presets as the main connector table
does (harness.report.connector_section.check_cell). A connector whose every check was skipped because
it cannot run on the machine (a skip cause of kind `cannot-run-here`, `harness.outcomes`) or that does not apply
to the presets (not applicable, kind `feature`) gets one line with that reason instead of a column.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

from harness.report.connector_section import SUITE, table_order, check_cell, declares_hma, hma_verdict
from harness.report.labels import label
from harness.report.model import BulletList, Cell, Heading, Paragraph, Section, Table
from harness.targets.connector.vllm_facts import is_example
from reference_impl.releases import version_order_key

_NAME = re.compile(r"^vllm-(?P<version>\d+\.\d+\.\d+[^:]*):(?P<connector>.+)$")
# The skips that hold for every check of a connector: this machine cannot run it (a skip cause,
# harness.targets.connector.vllm_facts.missing_cause), or it needs a model the presets are not (not applicable).
WHOLE_CONNECTOR_CAUSE = "cannot-run-here"
WHOLE_CONNECTOR_NA = "feature"


def whole_connector_reason(entry: dict[str, Any]) -> str | None:
    """The skip message of an entry whose reason may hold for every check of its connector (it cannot run here,
    or it lacks what the checks need), else None."""
    if entry["status"] != "skipped":
        return None
    if ((entry.get("skip_cause") or {}).get("kind") == WHOLE_CONNECTOR_CAUSE
            or (entry.get("not_applicable") or {}).get("kind") == WHOLE_CONNECTOR_NA):
        return entry.get("message") or ""
    return None


def vllm_connector_of(entry: dict[str, Any]) -> tuple[str, str] | None:
    """(vLLM release, connector name) of a connector-suite entry about a vLLM connector, else None."""
    if entry.get("suite") != SUITE:
        return None
    match = _NAME.match(str((entry.get("cell") or {}).get("connector") or ""))
    return (match.group("version"), match.group("connector")) if match else None


def without_vllm_connectors(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`entries` less those of vLLM's connectors (they have their own sections)."""
    return [e for e in entries if vllm_connector_of(e) is None]


def _cannot_run(entries: list[dict[str, Any]]) -> str | None:
    """The one whole-connector reason when no check of a connector ran (multi-group presets of a connector
    without SupportsHMA are skipped before it is built, with their own reason)."""
    if not entries or any(e["status"] != "skipped" for e in entries):
        return None
    whole = sorted({r for r in map(whole_connector_reason, entries) if r is not None})
    if whole and all(whole_connector_reason(e) is not None or (e.get("not_applicable") or {}).get("kind")
                     == "declaration" for e in entries):
        return whole[0]
    return None


def release_anchor(version: str) -> str:
    """The link target of a release's section ('vllm-connectors-0.33.0')."""
    return f"vllm-connectors-{version}"


def _release_section(version: str, entries: list[dict[str, Any]]) -> Section:
    by_connector: dict[str, list] = defaultdict(list)
    for entry in entries:
        by_connector[vllm_connector_of(entry)[1]].append(entry)
    unavailable = {c: r for c, es in by_connector.items() if (r := _cannot_run(es))}
    ran = sorted((c for c in by_connector if c not in unavailable), key=str.lower)
    grouped: dict[tuple[str, str], list] = defaultdict(list)
    checks: dict[str, tuple[str, str]] = {}
    for connector in ran:
        for entry in by_connector[connector]:
            cell = entry.get("cell") or {}
            check = label(cell.get("check"))
            grouped[(check, connector)].append(entry)
            tier, description = checks.get(check, ("", ""))
            checks[check] = (tier or label(cell.get("tier")),
                             description or str((entry.get("extra") or {}).get("description", "")))
    blocks: list = [
        Heading(2, f"vLLM {version}'s connectors", anchor=release_anchor(version)),
        Paragraph(f"The connector suite run against the connectors vLLM {version} registers, each vLLM's own class "
                  "driven through kvconform's mini engine by a thin adapter (`--kv-connector vllm:Name`). "
                  "✅ passes on every preset · ❌ fails (footnote: the first failing evidence) · "
                  "➖ not applicable (e.g. multi-group presets of a connector without `SupportsHMA`) · "
                  "❔ not run (footnote: why)."),
    ]
    deployed = [c for c in ran if not is_example(c)]
    examples = [c for c in ran if is_example(c)]
    if deployed:
        blocks += _connector_table(deployed, checks, grouped)
        blocks.append(Heading(3, f"SupportsHMA in vLLM {version}'s connectors: declared, and backed?"))
        blocks.append(BulletList([hma_verdict(c, by_connector[c]) for c in deployed]))
    if examples:
        blocks.append(Heading(3, f"vLLM {version}'s example connectors"))
        blocks.append(Paragraph("Reference code and a benchmark stub vLLM ships to show the connector API, and a "
                                "MultiConnector with one as a child: not connectors people deploy, so they stand "
                                "apart (`harness.targets.connector.vllm_facts.EXAMPLE_CONNECTORS`)."))
        blocks += _connector_table(examples, checks, grouped)
        blocks.append(BulletList([hma_verdict(c, by_connector[c]) for c in examples]))
    if unavailable:
        blocks.append(Heading(3, f"vLLM {version}'s connectors the suite could not check here"))
        blocks.append(BulletList([
            f"{c} ({'declares' if declares_hma(by_connector[c]) else 'does not declare'} `SupportsHMA`): "
            f"{unavailable[c]}" for c in sorted(unavailable, key=str.lower)]))
    return Section(f"vllm-connectors-{version}", blocks)


def _connector_table(connectors: list[str], checks: dict[str, tuple[str, str]],
                     grouped: dict[tuple[str, str], list]) -> list:
    """The check x connector table of `connectors` (only the checks any of them ran)."""
    rows = []
    for check in sorted(checks, key=table_order):
        if not any((check, c) in grouped for c in connectors):
            continue
        tier, description = checks[check]
        rows.append([check, tier, description] + [
            check_cell(grouped[(check, c)], check) if (check, c) in grouped
            else Cell("❔", "unknown", (f"{check} was not run for {c}",))
            for c in connectors])
    return [Table(headers=["check", "tier", "description"] + connectors, rows=rows,
                  column_filters=[{}, {}, {}] + [{"connector": c} for c in connectors], search=True)]


def vllm_connector_sections(entries: list[dict[str, Any]]) -> list[Section]:
    """One section per vLLM release whose connectors were checked (none when there are no such results)."""
    by_version: dict[str, list] = defaultdict(list)
    for entry in entries:
        found = vllm_connector_of(entry)
        if found is not None:
            by_version[found[0]].append(entry)
    versions = sorted(by_version, key=version_order_key, reverse=True)
    return [_release_section(v, by_version[v]) for v in versions]
