"""Figures the docs state about kvconform itself, held to what the code says today (a stale count is a test
failure, not a reader's surprise)."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

from suites.config.matrix import matrix

REPO = Path(__file__).resolve().parents[1]


def test_reader_states_the_config_matrix_size():
    """docs/reader.md: `kvconform report` runs "the config matrix (tens of thousands of tiny tests", one test per
    cell: stated as an order of magnitude, which a new era (about 2,000 cells) leaves true."""
    assert _stated("docs/reader.md", r"the config matrix \((tens of thousands) of tiny tests, one per cell") == [
        "tens of thousands"]
    assert 10_000 <= sum(1 for _ in matrix()) < 100_000


def _stated(page: str, pattern: str) -> list[str]:
    """Every figure `pattern` (one group) finds on `page`; the test fails when the page no longer states it."""
    found = re.findall(pattern, " ".join((REPO / page).read_text(encoding="utf-8").split()))
    assert found, f"{page} no longer states what /{pattern}/ finds; update this test with the page"
    return found


def test_readme_counts_the_bug_classes_of_the_mutation_catalogue():
    """A class added to the catalogue makes the README's mutation score stale: rerun `kvconform mutate -j 2`."""
    from harness.connector_mutants import MUTANTS

    assert _stated("README.md", r"Of the (\d+) bug classes in the project's catalogue") == [str(len(MUTANTS))]


def test_readme_counts_the_config_and_allocator_invariants():
    from harness.invariants.config import INVARIANTS as CONFIG_INVARIANTS
    from suites.allocator.invariants import INVARIANTS as ALLOCATOR_INVARIANTS

    config = _stated("README.md", r"(\d+) (?:config )?invariants (?:of|from) the flag's contract")
    assert config == [str(len(CONFIG_INVARIANTS))] * 2, config
    assert _stated("README.md", r"(\d+) allocator and connector-path invariants") == [str(len(ALLOCATOR_INVARIANTS))]


def _workload_items(module) -> dict[str, int]:
    """Each throughput workload function of a benchmark module (marked `benchmark_workload`) and how many items
    its parametrization makes."""
    counts = {}
    for name, function in vars(module).items():
        marks = getattr(function, "pytestmark", [])
        if name.startswith("test_") and any(mark.name == "benchmark_workload" for mark in marks):
            counts[name] = 1
            for mark in marks:
                if mark.name == "parametrize":
                    counts[name] *= len(mark.args[1])
    return counts


def test_readme_counts_the_throughput_workloads_and_states_the_pages_ratios():
    """The README's workload count is the benchmarks' own (the block-pool module's workloads and the request
    streams; the 32k lookups are timed too but carry no target), and its ratio range is the one the linked page's
    table records for them (a new measurement updates the page, and the README with it)."""
    from suites.benchmarks import test_allocator_throughput, test_block_pool_throughput, workloads

    pool = sum(_workload_items(test_block_pool_throughput).values())
    stream_module = _workload_items(test_allocator_throughput)
    streams = stream_module["test_request_stream"]
    assert streams == len(workloads.STREAMS)
    stated = _stated("README.md", r"each of the (\d+) throughput workloads with a target \((\d+) block-pool "
                                  r"workloads, (\d+) request streams\) ([\d.]+x) to ([\d.]+x) as fast as vLLM")
    assert [tuple(map(int, found[:3])) for found in stated] == [(pool + streams, pool, streams)], stated

    page = (REPO / "docs" / "allocator-releases.md").read_text(encoding="utf-8")
    lines = page.split("\n## Throughput against the newest release\n", 1)[1].splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("| workload |"))
    table = list(itertools.takewhile(lambda line: line.startswith("|"), lines[header + 2:]))
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in table]
    assert len(rows) == sum(stream_module.values()) + pool, "the page's table has one row per timed workload"
    ratios = [float(row[-1].rstrip("x")) for row in rows if not row[0].startswith("32k-token prompt lookup")]
    assert len(ratios) == pool + streams, rows
    assert stated[0][3:] == (f"{min(ratios):.1f}x", f"{max(ratios):.1f}x")


def test_readme_counts_the_reviewed_config_defects_of_the_releases_it_names():
    """The releases the README names are the ones docs/invariants.md measured; the defects it counts are the
    reviewed data's (harness/release/vllm_config_defects.toml): those covering a named release, of all of them."""
    from harness.invariants.defects import load_defects
    from reference_impl.releases import parse_version

    stated = _stated("README.md", r"vLLM ((?:\d+\.\d+\.\d+, )*\d+\.\d+\.\d+ and \d+\.\d+\.\d+) break exactly the "
                                  r"reviewed defects that cover them, (\d+) of the (\d+) on record")
    assert len(stated) == 1, stated
    named, covering, on_record = stated[0]
    releases = re.split(r", | and ", named)
    measured = _stated("docs/invariants.md", r"\| (\d+\.\d+\.\d+) \| [\d,]+ matrix cells")
    assert sorted(releases, key=parse_version) == sorted(measured, key=parse_version)
    defects = load_defects()
    assert int(on_record) == len(defects)
    assert int(covering) == sum(any(d.covers(parse_version(r)) for r in releases) for d in defects)
