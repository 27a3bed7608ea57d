"""The compatibility report: `compatibility.md`, `compatibility.html` and `results.json.gz` from one results document."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness.results_model import ResultsDocument

MARKDOWN_NAME = "compatibility.md"
HTML_NAME = "compatibility.html"
RESULTS_NAME = "results.json.gz"  # gzip: a full run's JSON is 25 MB, about 1 MB compressed


def run_details(results: ResultsDocument) -> list[str]:
    """Lines about each run (commit, machine, times) for the HTML page; kept out of the Markdown."""
    lines = []
    for index, run in enumerate(results.runs):
        machine = run.get("machine") or {}
        platform = run.get("platform") or {}
        commit = (run.get("git_commit") or "unknown")[:12] + (" (modified)" if run.get("git_dirty") else "")
        lines.append(
            f"Run {index + 1}" + (f" (shard {run['shard']})" if run.get("shard") else "") + f": commit {commit} · {platform.get('system', '?')} {machine.get('arch', '?')} "
            f"on {machine.get('node', '?')} · Python {run.get('python_version')} · torch {run.get('torch_version')} "
            f"· {run.get('started_at')} → {run.get('finished_at')} · pytest session {run.get('wall_seconds')} s"
            + (f", whole run {run['report_wall_seconds']} s" if run.get("report_wall_seconds") else "")
        )
        for step in run.get("passes") or ():
            lines.append(f"Pass {step.get('label')}: {step.get('tests')} tests in {step.get('wall_seconds')} s "
                         f"(pytest {' '.join(step.get('pytest_args') or ())})")
    return lines


def render_reports(results: ResultsDocument, upstream: list[dict] | None = None, *,
                   results_file: bool = True) -> dict[str, str | bytes]:
    """File name -> text for the report files: the Markdown pages (compatibility.md and its per-release
    pages), the HTML page and, unless `results_file` is false, the results file, gzip-compressed bytes
    (`encode_results_file`; `upstream`: the upstream job's results, loaded by
    `harness.upstream.results.load_upstream`, shown in the allocator section)."""
    # Imported here, not with the package: every suite's pytest process imports the package (its progress plugin,
    # `harness.report.passes`) and renders nothing.
    from harness.report.build import build_document
    from harness.report.html import render_html
    from harness.report.markdown import render_markdown_pages

    document = build_document(results, upstream)
    files: dict[str, str | bytes] = {
        **render_markdown_pages(document, MARKDOWN_NAME),
        HTML_NAME: render_html(document, run_details(results)),
    }
    if results_file:
        files[RESULTS_NAME] = encode_results_file(results)
    return files


def encode_results_file(results: ResultsDocument) -> bytes:
    """The bytes of `results.json.gz` for `results` (compacted: `harness.report.results_file`)."""
    from harness.report.results_file import compact_results

    return compact_results(results).encode_for(RESULTS_NAME)
