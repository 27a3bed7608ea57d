"""The config conformance matrix (config-rules.md §4, §6, §8): every cell against the oracle and the golden file.

Each cell sends one case to the target (`--hma-target`, default the reference resolver) and asserts the
resolved HMA value, the ordered warnings, and the error's type, message and stage predicted by the
independent oracle (`suites/config/oracle.py` over the reviewed tables in `suites/config/tables/`). For
the reference resolver the outcome is also compared with the committed golden snapshot of its era.

Each cell is one pytest item, `test_matrix.py::test_config_cell[<cell id>]`, as a parametrized test function's
would be named, so `-k`, JUnit, `--shard` and the results file (whose `params` name the cell as `config_cell`) see
one test per cell. The items are `ConfigCellItem`s rather than functions: with 31,674 cells over every era,
pytest's fixture machinery per function cost several times the cell's own work.
"""

from __future__ import annotations

from typing import Iterator

import pytest

from harness.plugins.config_matrix import collects_as, config_target, golden_mode, golden_store, selected_eras
from harness.plugins.results import record_on, results_file_written
from suites.config.divergences import known_divergence
from suites.config.invariants import defects_noted
from suites.config.matrix import Cell, cells_for
from suites.config.oracle import expected_outcome
from suites.config.outcomes import (explain, golden_header, golden_path, installed_missing_package,
                                    outcome_mismatches, summarize, target_raised)


class ConfigCellItem(pytest.Item):
    """One matrix cell as a pytest item of its own: it runs `test_config_cell` on its cell, without fixtures."""

    def __init__(self, *, cell: Cell, originalname: str, **kwargs) -> None:
        super().__init__(**kwargs)
        self.cell = cell
        #: the test function's name without the cell id, as pytest's parametrized functions have it
        self.originalname = originalname
        #: the results file's `params` of this cell (`harness.plugins.results.PARAMS_ATTR`)
        self.kvconform_params = {"config_cell": cell}

    def runtest(self) -> None:
        test_config_cell(self)

    def reportinfo(self):
        return self.path, test_config_cell.__code__.co_firstlineno - 1, self.name


def _cell_items(module: pytest.Module, name: str) -> Iterator[ConfigCellItem]:
    """One item per cell of the selected eras (and each era's cells declared to its golden file)."""
    store = golden_store(module.config)
    for era in selected_eras(module.config):
        era_cells = cells_for(era)
        store.declare(golden_path(era), [cell.id for cell in era_cells], golden_header(era))
        for cell in era_cells:
            yield ConfigCellItem.from_parent(module, name=f"{name}[{cell.id}]", cell=cell, originalname=name)


def _skip_if_the_missing_package_is_installed(outcome: dict) -> None:
    package = installed_missing_package(outcome)
    if package:
        pytest.skip(f"not applicable here: the cell expects vLLM's error for a missing {package!r} package, and "
                    f"{package!r} is installed in this environment (the matrix models one without it)")


@collects_as(_cell_items)
def test_config_cell(item: ConfigCellItem) -> None:
    """One cell: the target's outcome matches the spec's (oracle) and, for the reference, its golden line."""
    config, cell = item.config, item.cell
    target = config_target(config)
    if target.call is None:
        pytest.skip(target.unavailable)
    case = cell.case()
    expectation = expected_outcome(case)
    _skip_if_the_missing_package_is_installed(expectation.outcome)
    expected = {"id": case["id"], **expectation.outcome, "rules": list(expectation.because)}
    divergence = known_divergence(target.spec, cell.id)
    if divergence is not None:
        # Reviewed in known_divergences.toml: every assertion still runs; strict, so agreement fails loudly.
        item.add_marker(pytest.mark.xfail(strict=True, reason=divergence.describe()))
    noted = {"known_divergence": divergence.describe()} if divergence else {}
    try:
        actual = target.call(case)
    except Exception as exc:  # a broken target: one short failure per cell, not a traceback report each
        record_on(item, suite="config", cell=cell.dimensions, expected=expected, actual=None, **noted)
        pytest.fail(explain(cell, expectation, [target_raised(exc)]), pytrace=False)
    # the reviewed vLLM defects that produced this cell's outcome (the report marks the cell); asked only once
    # the target answered the cell, since it runs the target on the era's other cases too, and only when a results
    # file carries the note: judging an era's invariants costs about half a second of CPU per era and process,
    # paid again by every xdist worker, for a note that decides no verdict (test_invariants.py judges those)
    if results_file_written(config):
        noted.update(defects_noted(cell.era, target.call, case["id"]))
    record_on(item, suite="config", cell=cell.dimensions, expected=expected, actual=actual, **noted)

    problems = outcome_mismatches(expectation.outcome, actual)
    mode = golden_mode(config)
    if mode != "off":
        store, path, observed = golden_store(config), golden_path(cell.era), summarize(actual)
        if mode == "update":
            store.record(path, cell.id, observed)
        else:
            committed = store.expected(path, cell.id)
            if committed is None:
                problems.append(f"golden: no line for this cell in {path.name}; run with --update-golden")
            elif committed != observed:
                problems.append(f"golden {path.name} changed: committed {committed!r}, now {observed!r}")
    if problems:
        pytest.fail(explain(cell, expectation, problems, actual), pytrace=False)
