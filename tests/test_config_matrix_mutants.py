"""The config matrix fails on deliberately broken resolvers, with messages that name the cell and the rule."""

from __future__ import annotations

import os
import subprocess
from collections import Counter
import sys
from pathlib import Path

import pytest

from harness.results_model import load_results
from reference_impl.config import resolve_case
from suites.config.matrix import cells_for
from suites.config.oracle import expected_outcome
from suites.config.outcomes import outcome_mismatches

REPO = Path(__file__).resolve().parents[1]


def run_matrix(*args: str, pythonpath: Path | None = None) -> subprocess.CompletedProcess:
    """Run the shipped config matrix in a fresh pytest process (no xdist, no cache), with `pythonpath` first on the
    import path where given."""
    env = {key: value for key, value in os.environ.items() if key != "KVCONFORM_TARGET"}
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(pythonpath), str(REPO), env.get("PYTHONPATH")]))
    command = [sys.executable, "-m", "pytest", str(REPO / "suites" / "config"), "-p", "no:cacheprovider", "-p", "no:xdist", "--tb=short", *args]
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize(
    ("mutant", "failing_cell", "explanation"),
    [
        (
            "ignores_kv_events_in_seed",
            "seed-F-cuda-kv_events-noconn",
            "expected ValueError at stage config: 'Hybrid KV cache manager was explicitly enabled",
        ),
        (
            "swaps_warning_order",
            "seed-N-",  # chunked local + a connector only meet in the all-pairs block: any such cell
            "warnings in order: expected ['W-C', 'W-B1'], got ['W-B1', 'W-C']",
        ),
    ],
    ids=["ignores_kv_events_in_seed", "swaps_warning_order"],
)
@pytest.mark.parametrize("items", ["cell", "era"])
def test_matrix_fails_on_mutant(mutant, failing_cell, explanation, items):
    """One item per cell, or per era as kvconform's gate runs it: the same cells fail, each named and explained."""
    result = run_matrix("--hma-target", f"tests.config_mutants:{mutant}", "--vllm-version", "seed",
                        "--config-matrix-items", items)
    output = result.stdout + result.stderr
    assert result.returncode == 1, f"mutant {mutant}: the matrix should fail (exit 1), got exit {result.returncode}:\n{output[-3000:]}"
    assert f"config cell {failing_cell}" in output, f"mutant {mutant}: no failure names cell {failing_cell}:\n{output[-3000:]}"
    assert explanation in output, f"mutant {mutant}: the failure does not explain itself with {explanation!r}:\n{output[-3000:]}"
    assert "spec rules (oracle): " in output, f"mutant {mutant}: failures should cite the spec rules that fired"
    assert "kvconform config matrix: target tests.config_mutants:" in output, "the header should name the mutant target"
    if items == "era":
        assert "test_config_cells_of_era[seed]" in output and "config matrix cells of era seed failed" in output, (
            f"mutant {mutant}: the era item should fail and count its failing cells:\n{output[-3000:]}")


def test_era_items_write_each_cell_as_its_own_item_would(tmp_path):
    """`kvconform report` runs the matrix one item per era: its results file holds every cell's entry exactly as one
    item per cell writes it (id, status, message, records; the duration aside), whatever the cell's outcome. A
    mutant that fails cells three ways (a wrong outcome, the target raising, the test's own error), two reviewed
    divergences (a strict xfail that holds, a strict XPASS) and a package the matrix models as missing, installed
    here (its cells skip)."""
    installed = tmp_path / "packages" / "mooncake"
    installed.mkdir(parents=True)
    (installed / "__init__.py").write_text("")
    documents = {}
    for items in ("cell", "era"):
        results = tmp_path / f"{items}.json"
        result = run_matrix("--hma-target", "tests.config_mutants:breaks_cells_every_way", "--vllm-version", "seed",
                            "-p", "tests.config_matrix_outcomes_plugin", "--config-matrix-items", items,
                            "--kvconform-results", str(results), pythonpath=installed.parent)
        assert result.returncode == 1, f"{items}: exit {result.returncode}:\n{(result.stdout + result.stderr)[-3000:]}"
        documents[items] = [{key: value for key, value in entry.items() if key != "duration"}
                            for entry in load_results(results).results]
    by_cell, by_era = documents["cell"], documents["era"]
    statuses = Counter((entry["status"], (entry["message"] or "").split(":")[0]) for entry in by_cell)
    assert {status for status, _ in statuses} == {"passed", "failed", "skipped"}, statuses
    assert statuses[("skipped", "xfail")] == 1 and statuses[("failed", "[XPASS(strict)] known divergence (target is wrong)")] == 1
    assert any(entry["message"].startswith("TypeError") for entry in by_cell if entry["status"] == "failed"), (
        "a cell whose test raised should fail with its exception")
    assert len(by_era) == len(by_cell) == len(cells_for("seed")) + sum(1 for e in by_cell if "test_invariants" in e["id"])
    assert by_era == by_cell, [(a["id"], b["id"]) for a, b in zip(by_cell, by_era) if a != b][:3]


@pytest.mark.parametrize("cell_id", ["seed-F-cuda-kv_events-noconn", "seed-N-xpu-chunked-P2pNcclConnector"])
def test_reference_target_passes_the_same_seed_cells(cell_id):
    """Control: the cells the mutants break pass on the reference resolver itself. Judged in this process, as
    the matrix test judges them (its oracle, its comparison): the matrix itself runs these cells in the same
    test command, so a pytest run of them here would only repeat it."""
    (cell,) = [cell for cell in cells_for("seed") if cell.id == cell_id]
    case = cell.case()
    problems = outcome_mismatches(expected_outcome(case).outcome, resolve_case(case))
    assert not problems, f"the reference resolver should pass {cell_id}: {problems}"
