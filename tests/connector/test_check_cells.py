"""Every test of the connector suite records its own cell: two tests (or two parametrizations of one test) that
check the same thing on the same preset differ in their cell, so `kvconform merge` and `diff` never see one cell
with two outcomes (C30's deployment variants once all recorded as preset "-", and a run with one variant failing
could not be merged; C24's and C25's forced races and C18's kernel-block test recorded the cells of their
check's other test, and `kvconform diff` judged only one of the two: a regression of the forced race alone was
"No cell changed")."""

from __future__ import annotations

import importlib
import itertools
import json
import pkgutil

import pytest

import suites.connector
from harness.connector_checks import CHECKS
from suites.connector.catalogue import check_cell


def _parametrizations(function) -> list[dict]:
    """The parameter sets pytest generates for a test function from its parametrize marks."""
    axes = []
    for mark in getattr(function, "pytestmark", []):
        if mark.name != "parametrize":
            continue
        names = [n.strip() for n in mark.args[0].split(",")] if isinstance(mark.args[0], str) else list(mark.args[0])
        values = [v.values if hasattr(v, "values") else v for v in mark.args[1]]
        axes.append([dict(zip(names, v if len(names) > 1 else (v,))) for v in values])
    return [dict(kv for part in combo for kv in part.items()) for combo in itertools.product(*axes)] or [{}]


def _checks():
    for info in pkgutil.iter_modules(suites.connector.__path__):
        if not info.name.startswith("test_"):
            continue
        module = importlib.import_module(f"suites.connector.{info.name}")
        for name, function in vars(module).items():
            marks = [m for m in getattr(function, "pytestmark", []) if m.name == "kv_check"] if name.startswith("test_") else []
            if marks:
                yield f"{info.name}::{name}", marks[0], function


def test_the_suite_has_checks_to_look_at():
    assert sum(1 for _ in _checks()) >= len(CHECKS), "fewer connector tests than catalogued checks: is the walk broken?"


def test_every_parametrization_of_a_check_is_its_own_cell():
    seen: dict[str, str] = {}
    for test_name, mark, function in _checks():
        for params in _parametrizations(function):
            cell = check_cell(mark.args[0], "SomeConnector", {"connector_target": object(), **params},
                              mark.kwargs.get("scenario"))
            key = json.dumps(cell, sort_keys=True)  # across test functions too: a cell is all diff and merge see
            assert key not in seen, (f"{test_name}{params} records the same cell as {seen[key]}: {cell}; a parameter "
                                     "that is not in the cell makes two outcomes of one cell")
            seen[key] = f"{test_name}{params}"


@pytest.mark.parametrize("params,expected", [
    ({"preset": "fa+swa"}, {"preset": "fa+swa"}),
    ({}, {"preset": "-"}),
    ({"variant": "dtype"}, {"preset": "-", "variant": "dtype"}),
    ({"preset": "fa_only", "mode": "async"}, {"preset": "fa_only", "mode": "async"}),
])
def test_a_cell_names_connector_check_tier_and_every_parameter(params, expected):
    cell = check_cell("C30", "X", {"connector_target": object(), **params})
    assert cell == {"connector": "X", "check": "C30 key-isolation", "tier": "MUST", **expected}


def test_a_scenario_is_part_of_the_cell():
    cell = check_cell("C24", "X", {"connector_target": object(), "preset": "fa+swa"}, "forced")
    assert cell == {"connector": "X", "check": "C24 swa-reuse-race", "tier": "MUST", "preset": "fa+swa",
                    "scenario": "forced"}
