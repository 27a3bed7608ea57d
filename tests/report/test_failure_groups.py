"""Grouping failing cells by what went wrong (harness.failure_groups): hand-written inputs and expected lines."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from harness.failure_groups import (cause_key, cell_name, entry_what, first_line, format_groups, group_entries,
                                    group_failures, natural_key, split_check)
from tests.report.synthetic import config_entry


def test_first_line_drops_pytest_prefixes_and_collapses_whitespace():
    assert first_line("Failed: expected `HMA off`,   got `HMA on`\nconfig cell x") == "expected `HMA off`, got `HMA on`"
    assert first_line("AssertionError: C07 [cpu]: block 3 lost\nassert 3 == 4") == "C07 [cpu]: block 3 lost"
    assert first_line("\n\n  RuntimeError: setup broke  ") == "RuntimeError: setup broke"
    assert first_line("suites.connector.runner.ConnectorHookError: X.build_connector_meta raised") == \
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
        (2, "expected `HMA off`, got `HMA on` (§2.2)", "seed-N-cuda-none-noconn-config"),
        (1, "error: RuntimeError: setup broke", "seed-N-cpu-none-noconn-config"),
    ]


# vLLM 0.33.0's ExampleConnector through the connector suite (first lines as the checks report them, from a real
# run): ten failing cells, five bugs (issue 19).
EXAMPLE = "vllm-0.33.0:ExampleConnector-fa_only"
SHAPE = ("ExampleConnector.start_load_kv (worker role) raised RuntimeError: shape mismatch: value tensor of shape "
         "[{}, 2, 16] cannot be broadcast to indexing result of shape [688, 2, 16]")
MISSING = ("ExampleConnector.start_load_kv (worker role) raised FileNotFoundError: No such file or directory: "
           "/tmp/kvconform-vllm-{}/ExampleConnector/{}/model.layers.0.full.safetensors")
WRONG_KV = ("the model read wrong KV — while: {}: {} reads, first: ReadError(req_id='{}', layer='model.layers.0.full', "
            "position=0, detail='KV differs from the oracle (block {})')")
EXAMPLE_FAILURES = [
    ("C11", SHAPE.format(80)), ("C26", SHAPE.format(80)), ("C27", SHAPE.format(256)),
    ("C16", MISSING.format("huy4kbzo", "569cbd016ff543e8e2233c127ecef20f")),
    ("C20", MISSING.format("huy4kbzo", "3b66d4ca38793368d6534126df165df0")),
    ("C25", MISSING.format("q0x9_a1b", "bd37ca11fac37b6e89ea5f898917ee22")),
    ("C19", "the load wrote a block of the local prefix hit: ['rank 0 layer model.layers.0.full block 69']"),
    ("C21", WRONG_KV.format("TP=2 async loads", 12, "a7f2e5e4fe46", 112)),
    ("C34", WRONG_KV.format("TP=2 reload", 4, "24bbf6a50ff4", 44)),
    ("C30", "cache_salt tenant-b: hit 784 on objects stored under another key"),
]


def test_connector_failures_group_by_root_cause_across_checks():
    """Request ids, block numbers, token counts, shapes and store paths stay out of the key, and so does the
    scenario a shared oracle names: the ten cells read as ExampleConnector's five bugs, each naming its checks."""
    groups = group_failures(("connector", f"{check} [fa_only]: {what}", EXAMPLE) for check, what in EXAMPLE_FAILURES)
    assert [(g.count, g.checks) for g in groups] == [
        (3, ["C11", "C26", "C27"]), (3, ["C16", "C20", "C25"]), (2, ["C21", "C34"]), (1, ["C19"]), (1, ["C30"])]
    assert groups[0].what == "C11, C26, C27: " + SHAPE.format(80)
    assert groups[0].line() == f"3 connector cells: C11, C26, C27: {SHAPE.format(80)} — first: C11 {EXAMPLE}"
    # another connector with the same cause is its own finding
    other = group_failures([("connector", f"C16 [fa_only]: {EXAMPLE_FAILURES[3][1]}", EXAMPLE),
                            ("connector", f"C16 [fa_only]: {EXAMPLE_FAILURES[3][1]}", "VendorConnector-fa_only")])
    assert len(other) == 2
    # other suites keep grouping by the whole first line: numbers there name rules
    assert len(group_failures([("config", "expected `HMA off` (§2.2 2)", "a"), ("config", "expected `HMA off` (§2.2 3)", "b")])) == 2


def test_cause_key_leaves_out_what_differs_from_cell_to_cell():
    assert cause_key(MISSING.format("abc_1234", "569cbd016ff543e8e2233c127ecef20f")) == (
        "ExampleConnector.start_load_kv (worker role) raised FileNotFoundError: No such file or directory: "
        "…/model.layers.N.full.safetensors")
    assert split_check("now failed: C07 [fa+swa]: hit 512") == ("C07", "fa+swa", "now failed: hit 512")
    assert split_check("expected `HMA off`") == (None, None, "expected `HMA off`")


def test_the_recorded_connector_scopes_a_group_whatever_the_cell_is_called():
    """A check parametrized by something else than a preset (C30's deployments: '-tp') still groups with its
    connector's other cells when the record names the connector."""
    connector = "vllm-0.33.0:ExampleConnector"
    groups = group_failures([("connector", f"C14 [fa_only]: {SHAPE.format(80)}", f"{connector}-fa_only", connector),
                             ("connector", f"C30 [-]: {SHAPE.format(688)}", f"{connector}-tp", connector)])
    assert [(g.count, g.checks) for g in groups] == [(2, ["C14", "C30"])]


def test_a_recorded_cause_groups_connector_cells_whatever_their_words():
    """A connector check's recorded cause (`harness.failure_causes`) is its root cause: cells that recorded one
    group by it, however their messages read; the same words with another cause are another group; a cell
    recorded without a cause groups by its words, apart from the typed ones."""
    connector = "vllm-0.33.0:ExampleConnector"
    leak = {"tag": "key-leak", "components": ["model"]}
    vacuous = {"tag": "isolation-vacuous"}
    groups = group_failures([
        ("connector", "C30 [fa_only]: keys ignore the model name: stored under {...}", "a-fa_only", connector, leak),
        ("connector", "C30 [fa+swa]: the model name is not part of the key", "a-fa+swa", connector, leak),
        ("connector", "C30 [fa+swa+mamba]: keys ignore the model name: stored under {...}", "a-fa+swa+mamba",
         connector, vacuous),
        ("connector", "C31 [fa_only]: keys ignore the model name: stored under {...}", "a-fa_only", connector, None),
    ])
    assert sorted((g.count, tuple(g.checks)) for g in groups) == [(1, ("C30",)), (1, ("C31",)), (2, ("C30",))]
    (two,) = [g for g in groups if g.count == 2]
    assert two.cells == ["C30 a-fa+swa", "C30 a-fa_only"]


def test_natural_key_orders_numbers_by_value_and_may_ignore_case():
    assert sorted(["c10", "c2", "C1"], key=natural_key) == ["C1", "c2", "c10"]
    assert sorted(["b2", "A10", "a9"], key=natural_key) == ["A10", "a9", "b2"]
    assert sorted(["b2", "A10", "a9"], key=lambda t: natural_key(t, ignore_case=True)) == ["a9", "A10", "b2"]


# The dotted-version order has its own home (`reference_impl.releases.version_order_key`); every other natural
# order of names is `natural_key`.
_NATURAL_HOMES = {"harness/failure_groups.py", "reference_impl/releases.py"}
_NATURAL_COPY = re.compile(r"int\(\s*(\w+)\s*\)\s+if\s+\1\.isdigit\(\)")


def natural_copies(sources: dict[str, str]) -> list[str]:
    """`path:line` for each natural sort key spelled outside its homes."""
    return [f"{path}:{number}" for path, text in sources.items() if path not in _NATURAL_HOMES
            for number, line in enumerate(text.splitlines(), 1) if _NATURAL_COPY.search(line)]


def test_the_natural_sort_key_has_one_home():
    repo = Path(__file__).resolve().parents[2]
    listed = subprocess.run(["git", "ls-files", "--", "harness", "reference_impl", "suites"], cwd=repo,
                            capture_output=True, text=True, check=True).stdout.split()
    sources = {path: (repo / path).read_text(encoding="utf-8") for path in listed if path.endswith(".py")}
    assert len(sources) > 100
    assert natural_copies(sources) == []
    assert natural_copies({"harness/report/x.py": "    return [int(p) if p.isdigit() else p.lower() for p in parts]"})


def test_the_recorded_check_names_the_failing_check_whatever_the_message_says():
    """Which check failed is the cell's record (`check_of`), not the message's "C16 [preset]: ": a message without
    it (an error raised before the check ran) or with another check's id groups under the recorded check."""
    from harness.results_model import make_entry

    def entry(check, preset, message, status="failed"):
        return make_entry(nodeid=f"suites/connector/test_x.py::test_{check.lower()}[{preset}-Vendor]", suite="connector",
                          status=status, message=message, extra={"cause": {"tag": "connector-load"}},
                          cell={"connector": "Vendor", "check": f"{check} some-name", "tier": "MUST", "preset": preset})

    groups = group_entries([entry("C02", "fa_only", "ImportError: no module vendor_kv", "error"),
                            entry("C03", "fa+swa", "C99 [fa_only]: ImportError: no module vendor_kv")])
    assert [(g.count, g.checks) for g in groups] == [(2, ["C02", "C03"])]
    assert group_failures([("connector", "C07 [x]: hit 3", "Vendor-fa_only", "Vendor", None, ("C05", "fa_only"))]
                          )[0].checks == ["C05"]
