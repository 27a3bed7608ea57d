"""Figures the docs state about kvconform itself, held to what the code says today (a stale count is a test
failure, not a reader's surprise)."""

from __future__ import annotations

import re
from pathlib import Path

from suites.config.matrix import matrix

REPO = Path(__file__).resolve().parents[1]


def test_reader_states_the_config_matrix_size():
    """docs/reader.md: `kvconform report` runs "the config matrix (N tiny tests)", one test per cell."""
    text = (REPO / "docs" / "reader.md").read_text(encoding="utf-8")
    stated = re.search(r"the config matrix \(([\d,]+) tiny tests\)", text)
    assert stated, "docs/reader.md no longer states the matrix size this test checks"
    assert int(stated.group(1).replace(",", "")) == sum(1 for _ in matrix())


def _stated(page: str, pattern: str) -> list[str]:
    """Every figure `pattern` (one group) finds on `page`; the test fails when the page no longer states it."""
    found = re.findall(pattern, " ".join((REPO / page).read_text(encoding="utf-8").split()))
    assert found, f"{page} no longer states what /{pattern}/ finds; update this test with the page"
    return found


def test_readme_and_vendor_page_count_the_connector_checks():
    from harness.connector_checks import CHECKS

    assert _stated("README.md", r"the (\d+) connector checks with tier") == [str(len(CHECKS))]
    assert _stated("docs/vendor.md", r"kvconform checks # the (\d+) checks") == [str(len(CHECKS))]


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


def test_readme_states_the_known_range_of_releases():
    from reference_impl.releases import RELEASES

    oldest, newest = RELEASES[0].key, RELEASES[-1].key
    assert _stated("README.md", r"knows every era from (\d+\.\d+\.\d+ to \d+\.\d+)\.x") == [
        f"{'.'.join(map(str, oldest))} to {newest[0]}.{newest[1]}"]
