"""Assemble the report document from a results document (every suite's section that has records)."""

from __future__ import annotations

from harness.kv_engine import DEFAULT_KV_ENGINE
from harness.report.allocator_section import allocator_sections
from harness.report.benchmark_section import benchmark_sections
from harness.report.config_section import config_sections, group_by_era, matrix_cases
from harness.report.connector_section import connector_sections
from harness.report.engine_section import engine_sections, without_other_engines
from harness.report.failures_section import failures_sections
from harness.report.model import Document
from harness.report.summary_section import summary_sections
from harness.report.support_section import support_sections
from harness.report.vllm_connectors_section import vllm_connector_sections, without_vllm_connectors
from harness.results_model import ResultsDocument

TITLE = "kvconform compatibility report"


def run_line(results: ResultsDocument) -> str:
    """What produced the results, without times or commits (so the Markdown stays reproducible)."""
    info = results.run_info
    versions = sorted({str(run.get("kvconform_version")) for run in results.runs})
    targets = sorted({
        str(run.get("target") or "reference") + (f" ({run['target_version']})" if run.get("target_version") else "")
        for run in results.runs
    })
    parts = [f"kvconform {', '.join(versions)}", f"target {', '.join(targets)}"]
    if len(results.runs) > 1:
        parts.append(f"merged from {len(results.runs)} runs")
    engines = sorted({run.get("kv_engine") or DEFAULT_KV_ENGINE for run in results.runs})
    if engines != [DEFAULT_KV_ENGINE]:
        parts.append(f"engine {', '.join(engines)}")
    if info.get("vllm_version"):
        parts.append(f"vLLM version filter {info['vllm_version']}")
    return "Produced by " + " · ".join(parts) + "."


def build_document(results: ResultsDocument, upstream: list[dict] | None = None) -> Document:
    """The report document: summary, the support table (config matrix and connector runs), config matrix, allocator (with vLLM's own tests when `upstream`
    results are given), connectors, throughput."""
    entries = results.results
    # Connector cells run on vLLM's scheduler (--kv-engine vllm) are compared in their own section.
    own_engine = without_other_engines(entries)
    # The support table and the config section read the matrix's cases by era: grouped once, each configuration's
    # cell made once (the grouping was about a third of rendering a full run).
    eras = group_by_era(matrix_cases(entries))
    sections = (summary_sections(entries) + failures_sections(entries) + support_sections(entries, eras=eras)
                + config_sections(entries, eras=eras)
                + allocator_sections(entries, upstream) + connector_sections(without_vllm_connectors(own_engine))
                + vllm_connector_sections(own_engine) + engine_sections(entries)
                + benchmark_sections(entries, results.runs))
    return Document(title=TITLE, run_line=run_line(results), sections=sections)
