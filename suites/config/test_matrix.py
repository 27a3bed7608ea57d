"""The config conformance matrix (config-rules.md §4, §6, §8): every cell against the oracle and the golden file.

Each cell sends one case to the target (`--hma-target`, default the reference resolver) and asserts the
resolved HMA value, the ordered warnings, and the error's type, message and stage predicted by the
independent oracle (`suites/config/oracle.py` over the reviewed tables in `suites/config/tables/`). For
the reference resolver the outcome is also compared with the committed golden snapshot of its era.
"""

from __future__ import annotations

import pytest

from harness.plugins.config_matrix import config_target, golden_mode, golden_store, selected_eras
from harness.plugins.results import results_file_written
from suites.config.divergences import known_divergence
from suites.config.invariants import defects_noted
from suites.config.matrix import Cell, cells_for
from suites.config.oracle import expected_outcome
from suites.config.outcomes import (explain, golden_header, golden_path, installed_missing_package,
                                    outcome_mismatches, summarize, target_raised)


def pytest_generate_tests(metafunc):
    if "config_cell" not in metafunc.fixturenames:
        return
    cells: list[Cell] = []
    store = golden_store(metafunc.config)
    for era in selected_eras(metafunc.config):
        era_cells = cells_for(era)
        store.declare(golden_path(era), [cell.id for cell in era_cells], golden_header(era))
        cells.extend(era_cells)
    metafunc.parametrize("config_cell", cells, ids=[cell.id for cell in cells])


def _skip_if_the_missing_package_is_installed(outcome: dict) -> None:
    package = installed_missing_package(outcome)
    if package:
        pytest.skip(f"not applicable here: the cell expects vLLM's error for a missing {package!r} package, and "
                    f"{package!r} is installed in this environment (the matrix models one without it)")


def test_config_cell(config_cell: Cell, hma_target, kvconform_record, request):
    """One cell: the target's outcome matches the spec's (oracle) and, for the reference, its golden line."""
    case = config_cell.case()
    expectation = expected_outcome(case)
    _skip_if_the_missing_package_is_installed(expectation.outcome)
    expected = {"id": case["id"], **expectation.outcome, "rules": list(expectation.because)}
    divergence = known_divergence(config_target(request.config).spec, config_cell.id)
    if divergence is not None:
        # Reviewed in known_divergences.toml: every assertion still runs; strict, so agreement fails loudly.
        request.applymarker(pytest.mark.xfail(strict=True, reason=divergence.describe()))
    noted = {"known_divergence": divergence.describe()} if divergence else {}
    try:
        actual = hma_target(case)
    except Exception as exc:  # a broken target: one short failure per cell, not a traceback report each
        kvconform_record(suite="config", cell=config_cell.dimensions, expected=expected, actual=None, **noted)
        pytest.fail(explain(config_cell, expectation, [target_raised(exc)]), pytrace=False)
    # the reviewed vLLM defects that produced this cell's outcome (the report marks the cell); asked only once
    # the target answered the cell, since it runs the target on the era's other cases too, and only when a results
    # file carries the note: judging an era's invariants costs about half a second of CPU per era and process,
    # paid again by every xdist worker, for a note that decides no verdict (test_invariants.py judges those)
    if results_file_written(request.config):
        noted.update(defects_noted(config_cell.era, hma_target, case["id"]))
    kvconform_record(suite="config", cell=config_cell.dimensions, expected=expected, actual=actual, **noted)

    problems = outcome_mismatches(expectation.outcome, actual)
    mode = golden_mode(request.config)
    if mode != "off":
        store, path, observed = golden_store(request.config), golden_path(config_cell.era), summarize(actual)
        if mode == "update":
            store.record(path, config_cell.id, observed)
        else:
            committed = store.expected(path, config_cell.id)
            if committed is None:
                problems.append(f"golden: no line for this cell in {path.name}; run with --update-golden")
            elif committed != observed:
                problems.append(f"golden {path.name} changed: committed {committed!r}, now {observed!r}")
    if problems:
        pytest.fail(explain(config_cell, expectation, problems, actual), pytrace=False)
