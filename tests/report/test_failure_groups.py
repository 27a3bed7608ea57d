"""Grouping failing cells by what went wrong (harness.failure_groups): hand-written inputs and expected lines."""

from __future__ import annotations

from harness.failure_groups import cell_name, entry_what, first_line, format_groups, group_entries, group_failures
from tests.report.synthetic import config_entry


def test_first_line_drops_pytest_prefixes_and_collapses_whitespace():
    assert first_line("Failed: expected `HMA off`,   got `HMA on`\nconfig cell x") == "expected `HMA off`, got `HMA on`"
    assert first_line("AssertionError: C07 [cpu]: block 3 lost\nassert 3 == 4") == "C07 [cpu]: block 3 lost"
    assert first_line("\n\n  RuntimeError: setup broke  ") == "RuntimeError: setup broke"
    assert first_line("harness.targets.connector_target.ConnectorHookError: X.build_connector_meta raised") == \
        "ConnectorHookError: X.build_connector_meta raised", "an exception's module path says nothing"
    assert first_line(None) == "" and first_line("") == ""
    assert len(first_line("x" * 1000)) == 300, "a runaway first line is cut"


def test_cell_name_is_the_parameter_id_or_the_test_name():
    assert cell_name("suites/config/test_matrix.py::test_config_cell[seed-N-cuda-kv_events-noconn]") == \
        "seed-N-cuda-kv_events-noconn"
    assert cell_name("suites/connector/test_api.py::test_c01[Lm[x]]#1") == "Lm[x]#1"
    assert cell_name("suites/allocator/test_api.py::test_free_returns_blocks") == "test_free_returns_blocks"


def test_groups_are_largest_first_and_keep_their_first_cell():
    groups = group_failures([("config", "b", "c1"), ("config", "a", "c2"), ("config", "b", "c3"),
                             ("connector", "a", "c4")])
    assert [(g.suite, g.what, g.cells) for g in groups] == [
        ("config", "b", ["c1", "c3"]), ("config", "a", ["c2"]), ("connector", "a", ["c4"])]
    assert groups[0].line() == "2 config cells: b — first: c1"
    assert groups[1].line() == "1 config cell: a — c2"


def test_thousands_are_separated():
    (group,) = group_failures(("config", "w", f"c{i}") for i in range(2304))
    assert group.line() == "2,304 config cells: w — first: c0"


def test_format_groups_caps_the_lines_and_says_where_the_rest_is():
    groups = group_failures(("config", f"way {i}", f"c{i}") for i in range(12))
    assert len(format_groups(groups, max_lines=12, see="x")) == 12, "exactly a screenful: nothing left out"
    lines = format_groups(groups, max_lines=5, see="reports/compatibility.md")
    assert len(lines) == 5
    assert lines[-1] == "… and 8 more groups (8 cells), see reports/compatibility.md"


def test_results_entries_group_by_their_message_first_line():
    entries = [
        config_entry(platform="cuda", status="failed", message="Failed: expected `HMA off`, got `HMA on` (§2.2)\nconfig cell a"),
        config_entry(platform="rocm", status="failed", message="Failed: expected `HMA off`, got `HMA on` (§2.2)\nconfig cell b"),
        config_entry(platform="cpu", status="error", message="RuntimeError: setup broke"),
        config_entry(platform="xpu"),
    ]
    assert entry_what(entries[2]) == "error: RuntimeError: setup broke"
    groups = group_entries(entries)
    assert [(g.count, g.what, g.cells[0]) for g in groups] == [
        (2, "expected `HMA off`, got `HMA on` (§2.2)", "seed-N-cuda-none-none-config"),
        (1, "error: RuntimeError: setup broke", "seed-N-cpu-none-none-config"),
    ]
