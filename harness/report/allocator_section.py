"""The allocator part of the report: pass/fail counts per target and spec section, the failures, and (given
the upstream job's results) vLLM's own `tests/v1/core` on vLLM and on the reference allocator, per file."""

from __future__ import annotations

from collections import Counter
from typing import Any

from harness.release.allocator_findings import finding_of_cell, load_findings
from harness.report.labels import label
from harness.report.model import BulletList, Heading, Paragraph, Section, Table
from reference_impl.releases import version_order_key

SUITE = "allocator"
_LISTED_FAILURES = 50


def _reviewed(entry: dict[str, Any], findings: list) -> str:
    """" (reviewed vLLM bug: ...)" when a failing cell of a vLLM release is one of its reviewed findings."""
    finding = finding_of_cell(entry, findings)
    return f" (reviewed vLLM bug: {finding.root}; upstream: {finding.upstream})" if finding else ""


def upstream_blocks(upstream: list[dict]) -> list:
    """One table per vLLM release: per file of `tests/v1/core`, tests collected, passing on vLLM (CPU) and,
    of those, passing with the reference allocator in vLLM's place (`harness.upstream.results`)."""
    blocks: list = [Heading(3, "vLLM's tests/v1/core on the reference allocator"), Paragraph(
        "From `scripts/upstream-vllm-tests.sh`: each release's whole `tests/v1/core` folder, run on vLLM (CPU) and "
        "again with vLLM's `vllm.v1.core` allocator modules replaced by the reference's for the whole process. "
        "A test counts for the reference only if it passes on vLLM.")]
    for run in sorted(upstream, key=lambda r: version_order_key(r["vllm_version"])):
        total = run["total"]
        rows = [[name, str(c["collected"]), str(c["pass_on_vllm"]), str(c["pass_on_reference"])]
                for name, c in run["files"].items()]
        rows.append(["all files", str(total["collected"]), str(total["pass_on_vllm"]), str(total["pass_on_reference"])])
        blocks += [Paragraph(f"vLLM {run['vllm_version']}:"),
                   Table(headers=["file", "collected", "pass on vLLM", "of those, pass on the reference"], rows=rows)]
    return blocks


def allocator_sections(entries: list[dict[str, Any]], upstream: list[dict] | None = None) -> list[Section]:
    """The allocator conformance summary (nothing when the allocator suite did not record), followed by the
    upstream tables when `upstream` results are given."""
    records = [e for e in entries if e["suite"] == SUITE]
    if not records:
        return [Section("allocator", [Heading(2, "Allocator conformance"), *upstream_blocks(upstream)])] \
            if upstream else []
    counts: dict[tuple[str, str], Counter] = {}
    for entry in records:
        cell = entry.get("cell") or {}
        counts.setdefault((label(cell.get("target")), label(cell.get("section"))), Counter())[entry["status"]] += 1
    rows = [[target, section, str(c["passed"]), str(c["failed"]), str(c["error"]), str(c["skipped"])]
            for (target, section), c in sorted(counts.items(), key=lambda kv: (kv[0][0].lower(), kv[0][1]))]
    failing = sorted((e for e in records if e["status"] in ("failed", "error")), key=lambda e: e["id"])
    blocks = [
        Heading(2, "Allocator conformance"),
        Table(headers=["target", "section", "passed", "failed", "error", "skipped"], rows=rows),
    ]
    if failing:
        findings = load_findings()
        items = [f"{label((e.get('cell') or {}).get('scenario'))} ({label((e.get('cell') or {}).get('section'))}, "
                 f"{label((e.get('cell') or {}).get('target'))}): {e.get('message') or e['status']}"
                 f"{_reviewed(e, findings)}" for e in failing[:_LISTED_FAILURES]]
        if len(failing) > _LISTED_FAILURES:
            items.append(f"and {len(failing) - _LISTED_FAILURES} more (see results.json.gz)")
        blocks += [Heading(3, "Failing allocator scenarios"), BulletList(items)]
    else:
        blocks.append(Paragraph("Every allocator scenario that ran passed."))
    if upstream:
        blocks += upstream_blocks(upstream)
    return [Section("allocator", blocks)]
