"""The config conformance matrix (config-rules.md §4, §6, §8): every cell against the oracle and the golden file.

Each cell sends one case to the target (`--hma-target`, default the reference resolver) and asserts the
resolved HMA value, the ordered warnings, and the error's type, message and stage predicted by the
independent oracle (`suites/config/oracle.py` over the reviewed tables in `suites/config/tables/`). For
the reference resolver the outcome is also compared with the committed golden snapshot of its era.

Each cell is one pytest item, `test_matrix.py::test_config_cell[<cell id>]`, as a parametrized test function's
would be named, so `-k`, JUnit, `--shard` and the results file (whose `params` name the cell as `config_cell`) see
one test per cell. The items are `ConfigCellItem`s rather than functions: with 31,674 cells over every era,
pytest's fixture machinery per function cost several times the cell's own work. With `--config-matrix-items era`
(kvconform's gate, and `kvconform report`) each era is one `ConfigEraItem`, `test_config_cells_of_era[<era>]`,
that runs the same `test_config_cell` on each of its cells and fails naming every cell that failed; with a results
file, each cell still gets the entry its own item would have written (tests/test_config_matrix_mutants.py compares
them), so `kvconform diff` and the report see the same cells.
"""

from __future__ import annotations

import functools
from typing import Iterator

import pytest
from _pytest.skipping import evaluate_xfail_marks, xfailed_key  # the xfail state of a test's call phase

from harness.plugins.config_matrix import (MATRIX_ERA_TEST, collects_as, config_target, golden_mode, golden_store,
                                           matrix_items, selected_eras)
from harness.plugins.results import record_inner_report, record_on, results_file_written
from reference_impl.config.resolution import warnings_not_logged
from suites.config.divergences import known_divergence
from suites.config.invariants import defects_noted
from suites.config.matrix import Cell, cells_for
from suites.config.oracle import expected_outcome
from suites.config.outcomes import (explain, golden_header, golden_path, installed_missing_package,
                                    outcome_mismatches, summarize, target_raised)


def cell_params(cell: Cell) -> dict:
    """A cell's parameters as the results file names them (`params`), as a parametrized test's would be."""
    return {"config_cell": cell}


class ConfigCellItem(pytest.Item):
    """One matrix cell as a pytest item of its own: it runs `test_config_cell` on its cell, without fixtures."""

    def __init__(self, *, cell: Cell, originalname: str, **kwargs) -> None:
        super().__init__(**kwargs)
        self.cell = cell
        #: the test function's name without the cell id, as pytest's parametrized functions have it
        self.originalname = originalname
        #: the results file's `params` of this cell (`harness.plugins.results.PARAMS_ATTR`)
        self.kvconform_params = cell_params(cell)

    def runtest(self) -> None:
        test_config_cell(self)

    def reportinfo(self):
        return self.path, test_config_cell.__code__.co_firstlineno - 1, self.name


class _CellRun:
    """What `test_config_cell` reads and writes of its item, for one cell judged inside a `ConfigEraItem`: a cell
    that passes plainly needs no pytest item of its own (31,674 of them cost the gate about 4 CPU-s)."""

    def __init__(self, config: pytest.Config, cell: Cell) -> None:
        self.config, self.cell = config, cell
        self.user_properties: list = []
        self.markers: list = []

    def add_marker(self, marker) -> None:
        self.markers.append(marker)


class ConfigEraItem(pytest.Item):
    """Every cell of one era as one pytest item: each cell is judged by `test_config_cell` and the era item fails
    naming each cell that failed. A cell that raised nothing and was marked with nothing passed; any other cell's
    report is made by pytest's `pytest_runtest_makereport` hook on an item of its own (`ConfigCellItem`), as for a
    cell that ran alone (a reviewed divergence must still fail, strictly). With a results file each cell's report
    becomes the cell's own entry (`record_inner_report`), the one its own item would have written."""

    def __init__(self, *, era: str, cells: list[Cell], originalname: str, **kwargs) -> None:
        super().__init__(**kwargs)
        self.era, self.cells = era, cells
        #: tests this item stands for in `kvconform report`'s progress line (`harness.report.progress.TESTS_ATTR`)
        self.kvconform_tests = len(cells)
        #: the matrix's test function, which judges each cell (the plugin's header looks for it)
        self.originalname = originalname

    def _report(self, cell: Cell, run: _CellRun, call: pytest.CallInfo) -> pytest.TestReport | None:
        """The call report of a cell's own item (None for a plain pass when no results file needs it)."""
        name = f"{self.originalname}[{cell.id}]"
        if call.excinfo is None and not run.markers:
            if not results_file_written(self.config):
                return None
            return pytest.TestReport(nodeid=f"{self.parent.nodeid}::{name}", location=(*self.location[:2], name),
                                     keywords={}, outcome="passed", longrepr=None, when="call",
                                     duration=call.duration, start=call.start, stop=call.stop,
                                     user_properties=run.user_properties)
        item = ConfigCellItem.from_parent(self.parent, name=name, cell=cell, originalname=self.originalname)
        item.user_properties = run.user_properties
        for marker in run.markers:
            item.add_marker(marker)
        # what pytest's skipping plugin does after a test's call phase: the xfail a reviewed divergence added
        item.stash[xfailed_key] = evaluate_xfail_marks(item)
        return item.ihook.pytest_runtest_makereport(item=item, call=call)

    def runtest(self) -> None:
        failures, skips = [], []
        recording = results_file_written(self.config)
        for cell in self.cells:
            run = _CellRun(self.config, cell)
            # the reference's warnings are read from each cell's outcome (its failure message and its entry show
            # them); logged, pytest would keep all of the era's in this one item's captured log
            with warnings_not_logged():
                call = pytest.CallInfo.from_call(functools.partial(test_config_cell, run), when="call",
                                                 reraise=(pytest.exit.Exception, KeyboardInterrupt))
            report = self._report(cell, run, call)
            if report is None:
                continue
            if recording:
                record_inner_report(self, report, cell_params(cell))
            raised = call.excinfo.value if call.excinfo is not None else None
            if report.failed:
                if isinstance(raised, pytest.fail.Exception):
                    failures.append((cell.id, str(raised.msg)))
                elif raised is not None:  # the cell's own item would end in an error: name the cell
                    failures.append((cell.id, f"{cell.id}: {type(raised).__name__}: {raised}"))
                else:  # a reviewed divergence that no longer diverges
                    failures.append((cell.id, f"{cell.id}: {report.longrepr}"))
            elif report.skipped and not hasattr(report, "wasxfail"):
                skips.append(str(getattr(raised, "msg", "")))
        if failures:
            shown = "\n\n".join(message for _, message in failures[:_SHOWN_FAILURES])
            rest = [cell_id for cell_id, _ in failures[_SHOWN_FAILURES:]]
            more = f"\n\nand {len(rest)} more cells: {', '.join(rest)}" if rest else ""
            pytest.fail(f"{len(failures)} of {len(self.cells)} config matrix cells of era {self.era} failed "
                        f"(rerun one with -k '<cell id>'):\n\n{shown}{more}", pytrace=False)
        if skips and len(skips) == len(self.cells):
            pytest.skip(skips[0])

    def reportinfo(self):
        return self.path, test_config_cell.__code__.co_firstlineno - 1, self.name


#: failing cells an era item explains in full; the rest it names
_SHOWN_FAILURES = 20


def _cell_items(module: pytest.Module, name: str) -> Iterator[pytest.Item]:
    """One item per cell of the selected eras, or per era with --config-matrix-items era (and each era's cells
    declared to its golden file)."""
    store = golden_store(module.config)
    per_era = matrix_items(module.config) == "era"
    for era in selected_eras(module.config):
        era_cells = cells_for(era)
        store.declare(golden_path(era), [cell.id for cell in era_cells], golden_header(era))
        if per_era:
            yield ConfigEraItem.from_parent(module, name=f"{MATRIX_ERA_TEST}[{era}]", era=era, cells=era_cells,
                                            originalname=name)
            continue
        for cell in era_cells:
            yield ConfigCellItem.from_parent(module, name=f"{name}[{cell.id}]", cell=cell, originalname=name)


def _skip_if_the_missing_package_is_installed(outcome: dict) -> None:
    package = installed_missing_package(outcome)
    if package:
        pytest.skip(f"not applicable here: the cell expects vLLM's error for a missing {package!r} package, and "
                    f"{package!r} is installed in this environment (the matrix models one without it)")


@collects_as(_cell_items)
def test_config_cell(item: ConfigCellItem | _CellRun) -> None:
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
