"""The `results.json.gz` that `kvconform report` writes: every entry, without what another field already holds.

Two things are left out, both recoverable, so `report --from`, `diff` and `merge` see the same evidence:

- `params` of an entry that has a `cell` (pytest's parametrize values repeat the cell: the config matrix's
  `Cell(...)` repr is one per test);
- in `expected` of a *passed* entry, each key whose value equals `actual`'s (a passed config cell matched
  the oracle on the outcome; what stays is how the oracle got there, its `rules`). Overlay `expected` on
  `actual` to get the full expected outcome back (`expected_outcome`).
"""

from __future__ import annotations

from typing import Any

from harness.results_model import ResultsDocument

_ABSENT = object()


def compact_entry(entry: dict[str, Any]) -> dict[str, Any]:
    """`entry` with the repeated parts left out (see the module docstring); other entries unchanged."""
    compact = dict(entry)
    if compact.get("cell") and compact.get("params"):
        compact["params"] = {}
    expected, actual = compact.get("expected"), compact.get("actual")
    if compact["status"] == "passed" and isinstance(expected, dict) and isinstance(actual, dict):
        compact["expected"] = {k: v for k, v in expected.items() if actual.get(k, _ABSENT) != v}
    return compact


def expected_outcome(entry: dict[str, Any]) -> Any:
    """The entry's full expected value, whether or not it was compacted."""
    expected, actual = entry.get("expected"), entry.get("actual")
    if entry["status"] == "passed" and isinstance(expected, dict) and isinstance(actual, dict):
        return {**actual, **expected}
    return expected


def compact_results(results: ResultsDocument) -> ResultsDocument:
    """The document `kvconform report` writes as results.json.gz."""
    return ResultsDocument(run_info=results.run_info, runs=results.runs,
                           results=[compact_entry(entry) for entry in results.results])
