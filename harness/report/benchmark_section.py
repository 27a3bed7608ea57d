"""The throughput part of the report: each workload's figures per implementation and the ratio to vLLM."""

from __future__ import annotations

from typing import Any

from harness.report.labels import label
from harness.report.model import Cell, Heading, Paragraph, Section, Table
from harness.report.passes import BENCHMARKS_KEY, NOT_RUN

SUITE = "benchmark"
REFERENCE_IMPLEMENTATION = "vllm"


def is_vllm(implementation: str) -> bool:
    """vLLM's own figures, recorded as "vllm" or with its release ("vllm-0.33.0")."""
    name = implementation.lower()
    return name == REFERENCE_IMPLEMENTATION or name.startswith(REFERENCE_IMPLEMENTATION + "-")


_RATE_KEYS = ("requests_per_s", "block_ops_per_s")


def _lacks_vllm(entry: dict[str, Any]) -> bool:
    """Whether a test was skipped because vLLM does not import here (its typed skip cause says so)."""
    cause = entry.get("skip_cause") or {}
    return cause.get("kind") == "cannot-run-here" and REFERENCE_IMPLEMENTATION in (cause.get("packages") or ())


def _number(value: Any, digits: int = 0) -> str:
    if not isinstance(value, (int, float)):
        return "–"
    return f"{value:,.{digits}f}"


def _ratio(metrics: dict[str, Any], baseline: dict[str, Any] | None) -> Cell:
    if baseline is None:
        return Cell("❔", "unknown", ("no vLLM figure for this workload (vLLM not installed or not timed)",))
    for key in _RATE_KEYS:
        ours, theirs = metrics.get(key), baseline.get(key)
        if isinstance(ours, (int, float)) and isinstance(theirs, (int, float)) and theirs > 0:
            return Cell(f"{ours / theirs:.2f}×", "pass" if ours >= theirs else "fail")
    return Cell("❔", "unknown", ("no common rate to compare with vLLM",))


def _not_run(runs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The record of a run that left the benchmarks out (`run_info["benchmarks"]`, `harness.report.passes`), when
    every run that decided about them did so."""
    decisions = [run[BENCHMARKS_KEY] for run in runs if isinstance(run.get(BENCHMARKS_KEY), dict)]
    if decisions and all(d.get("mode") == NOT_RUN for d in decisions):
        return decisions[0]
    return None


def _not_run_section(record: dict[str, Any]) -> Section:
    """The throughput section of a run that did not run the benchmarks: what, why, and the command that runs them."""
    peer = "vLLM" if record.get("peer") == REFERENCE_IMPLEMENTATION else f"`{record.get('peer')}`"
    why = (f"{peer}, the peer every figure is compared with, was not importable, so there was no ratio to show"
           if record.get("peer_importable") is False else "the run left them out")
    return Section("benchmark", [Heading(2, "Throughput"), Paragraph(
        f"The benchmarks were not run: {why}. `kvconform report --timing` runs them "
        "timed anyway (the reference's own figures, in `compatibility.html` and `results.json.gz`); the README test "
        "command runs them untimed, as tests.")])


def benchmark_sections(entries: list[dict[str, Any]], runs: list[dict[str, Any]] = ()) -> list[Section]:
    """The throughput table; a line saying the benchmarks were not run, and why, when the runs' records say so
    (`runs`: each run's run_info); else nothing when the benchmarks did not record.

    Tests without a workload record (the vLLM side skipped because vLLM is not importable: a skip cause of kind
    `cannot-run-here` naming the package, `harness.outcomes`) are said in one line, not as a row of unknowns. The figures depend on the machine: the table is `machine_dependent`,
    so the Markdown (committed) says where they are and the HTML shows them.
    """
    records = [e for e in entries if e["suite"] == SUITE]
    if not records:
        record = _not_run(list(runs))
        return [_not_run_section(record)] if record is not None else []
    figures: dict[tuple[str, str], dict[str, Any] | None] = {}
    unrecorded: dict[str, int] = {}
    without_vllm: set[str] = set()  # the reasons of skips because vLLM does not import here
    for entry in records:
        cell = entry.get("cell") or {}
        if cell.get("workload") is None:
            reason = entry.get("message") or entry["status"]
            unrecorded[reason] = unrecorded.get(reason, 0) + 1
            if _lacks_vllm(entry):
                without_vllm.add(reason)
            continue
        metrics = entry.get("extra", {}).get("metrics")
        key = (label(cell.get("workload")), label(cell.get("implementation")))
        if isinstance(metrics, dict) or key not in figures:
            figures[key] = metrics if isinstance(metrics, dict) else None
    vllm = {w: m for (w, i), m in figures.items() if is_vllm(i) and m is not None}
    rows, untimed = [], []
    for (workload, implementation), metrics in sorted(figures.items(), key=lambda kv: (kv[0][0], kv[0][1].lower())):
        if metrics is None:
            untimed.append(f"{workload} ({implementation})")
            continue
        ratio: Cell | str = "1.00×" if is_vllm(implementation) else _ratio(metrics, vllm.get(workload))
        rows.append([workload, implementation, _number(metrics.get("requests_per_s"), 1),
                     _number(metrics.get("block_ops_per_s")), _number(metrics.get("median_s"), 6), ratio])
    blocks: list = [Heading(2, "Throughput")]
    if rows:
        blocks += [
            Paragraph("Ratios compare each implementation's requests/s (else block operations/s) with vLLM's "
                      "on the same workload in the same session; ≥ 1.00× means at least as fast."),
            Table(headers=["workload", "implementation", "requests/s", "block ops/s", "median s", "ratio vs vLLM"],
                  rows=rows, machine_dependent=True),
        ]
    if untimed:
        blocks.append(Paragraph(f"Not timed ({len(untimed)} workloads: pytest-benchmark times nothing under "
                                "xdist; `kvconform report --timing` times them in a pass of its own): "
                                + ", ".join(untimed) + "."))
    for reason, count in sorted(unrecorded.items()):
        if reason in without_vllm:
            blocks.append(Paragraph(f"vLLM was not importable, so its side of the comparison did not run "
                                    f"({count} benchmark tests skipped) and no ratio to vLLM is shown."))
        else:
            blocks.append(Paragraph(f"{count} benchmark test{'' if count == 1 else 's'} recorded no workload: {reason}"))
    return [Section("benchmark", blocks)]
