"""The "kvconform's engine and vLLM's scheduler" section: where a connector's verdict depends on the engine.

A connector-suite run with `--kv-engine vllm` records its cells with `"engine": "vllm"` (the installed vLLM's
own `Scheduler` drove the connector's scheduler side, `suites.connector.vllm_engine`); merged with a run of the
same connector on kvconform's engine (`kvconform merge`), each such cell has a twin without the key. This
section pairs them and lists every check whose verdict differs (pass on one engine, fail on the other), with
each side's evidence; checks the vLLM engine cannot express (not applicable, kind `engine`) are counted
with their reason, not listed as disagreements. The vLLM-engine cells stay out of the other connector tables.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from typing import Any

from harness.kv_engine import VLLM_ENGINE, VLLM_ENGINE_NA_PREFIX
from harness.report.connector_section import SUITE, _evidence, _is_not_applicable, table_order
from harness.report.labels import label
from harness.report.model import BulletList, Heading, Paragraph, Section, Table
from harness.release.scheduler_defects import defect_of_cell, load_defects

ENGINE_KEY = "engine"


def engine_of(entry: dict[str, Any]) -> str | None:
    """The non-default engine a connector-suite entry ran on (None: kvconform's own engine)."""
    if entry.get("suite") != SUITE:
        return None
    return (entry.get("cell") or {}).get(ENGINE_KEY)


def without_other_engines(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`entries` less the connector cells run on another engine (they are compared in their own section)."""
    return [e for e in entries if engine_of(e) is None]


def verdict(entry: dict[str, Any]) -> str:
    """pass, fail, n/a or not run."""
    if entry["status"] == "passed":
        return "pass"
    if entry["status"] in ("failed", "error"):
        return "fail"
    return "n/a" if _is_not_applicable(entry) else "not run"


def _twin_key(entry: dict[str, Any]) -> str:
    cell = {k: v for k, v in (entry.get("cell") or {}).items() if k != ENGINE_KEY}
    function = str(entry.get("id", "")).rpartition("::")[2].partition("[")[0]
    return repr(sorted(cell.items())) + "::" + function


def _where(entry: dict[str, Any]) -> str:
    cell = entry.get("cell") or {}
    extra = " ".join(f"{k}={v}" for k, v in sorted(cell.items())
                     if k not in ("connector", "check", "tier", "preset", ENGINE_KEY))
    return label(cell.get("preset")) + (f" ({extra})" if extra else "")


def engine_sections(entries: list[dict[str, Any]]) -> list[Section]:
    """The section, or nothing when no connector cell ran on vLLM's scheduler."""
    on_vllm = [e for e in entries if engine_of(e) == VLLM_ENGINE]
    if not on_vllm:
        return []
    own = {_twin_key(e): e for e in entries if e.get("suite") == SUITE and engine_of(e) is None}
    defects = load_defects()
    rows, unpaired, counts = [], Counter(), defaultdict(Counter)
    not_expressed: dict[str, Counter] = defaultdict(Counter)
    for entry in sorted(on_vllm, key=lambda e: (label((e.get("cell") or {}).get("connector")).lower(),
                                                table_order(label((e.get("cell") or {}).get("check"))), _where(e))):
        cell = entry.get("cell") or {}
        connector = label(cell.get("connector"))
        theirs = verdict(entry)
        counts[connector][theirs] += 1
        record = entry["not_applicable"] if theirs == "n/a" else {}
        if record.get("kind") == "engine":
            # One line per check and reason, whatever numbers (pool sizes, request counts) the reason names.
            shown = (f"{record['check']} " if record.get("check") else "") + record["reason"]
            not_expressed[connector][re.sub(r"\b\d+\b", "N", shown)] += 1
        twin = own.get(_twin_key(entry))
        if twin is None:
            unpaired[connector] += 1
            continue
        ours = verdict(twin)
        if {ours, theirs} == {"pass", "fail"}:
            evidence = _evidence(twin if ours == "fail" else entry)
            defect = defect_of_cell(entry, defects) if theirs == "fail" else None
            if defect is not None:  # the release's own scheduler breaks the check: a reviewed vLLM defect
                evidence = f"{defect.describe()}; {evidence}"
            rows.append([connector, label(cell.get("check")), _where(entry), ours, theirs, evidence])
    blocks = [
        Heading(2, "kvconform's engine and vLLM's scheduler"),
        Paragraph("The same connectors run twice: on kvconform's engine, and with `--kv-engine vllm`, where the "
                  "installed vLLM's own `Scheduler` schedules and calls the connector's scheduler side while "
                  "kvconform's workers execute and judge every byte. Below: every check whose verdict differs "
                  "(evidence from the failing side)."),
    ]
    if rows:
        blocks.append(Table(headers=["connector", "check", "preset", "kvconform engine", "vLLM scheduler", "evidence"],
                            rows=rows))
    else:
        blocks.append(Paragraph("No check passes on one engine and fails on the other."))
    summary = []
    for connector in sorted(counts, key=str.lower):
        c = counts[connector]
        line = (f"{connector} under vLLM's scheduler: {c['pass']} pass, {c['fail']} fail, {c['n/a']} n/a, "
                f"{c['not run']} not run")
        if unpaired[connector]:
            line += f"; {unpaired[connector]} cells have no kvconform-engine run to compare with"
        summary.append(line)
        for reason, n in not_expressed[connector].most_common():
            summary.append(f"{connector}: {n} cells N/A {VLLM_ENGINE_NA_PREFIX}{reason}")
    blocks.append(BulletList(summary))
    return [Section("engines", blocks)]
