"""Reviewed vLLM scheduler defects found by the async-scheduling checks, and the comparison of a run with them.

    python -m harness.release.scheduler_defects RESULTS.json

    python -m harness.release.scheduler_defects RESULTS.json --release X.Y.Z

RESULTS.json is a results file of the connector suite with `--kv-engine vllm` (the CI vLLM job's engine step; its
connectors are named `vllm-X.Y.Z:Name`; a kvconform connector's cells name no release: `--release` says which
vLLM's scheduler drove them). The defects are reviewed data (`vllm_scheduler_defects.toml`): a release
whose own scheduler breaks one of the checks `ASYNC_CHECKS`, with the cells that fail and the evidence. The command
prints one line per difference between the run's cells of those checks and the list (a failure no defect explains;
a cell a defect lists that did not fail) and exits 1 when there is one, 0 when the run fails exactly its release's
reviewed defects, 2 on bad input (one line).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.errors import UsageError
from harness.release.allocator_findings import AllocatorDefect
from harness.release.allocator_findings import load_defects as _load_defect_table
from harness.results_model import ResultsFileError, load_results

DEFECTS_FILE = Path(__file__).with_name("vllm_scheduler_defects.toml")
#: The checks whose failures under vLLM's scheduler this data reviews (docs/async-scheduling.md).
ASYNC_CHECKS = ("C42", "C43")
_PREFIX = "vllm-"


def load_defects(path: Path = DEFECTS_FILE) -> list[AllocatorDefect]:
    """The reviewed defects, in the allocator defects' form (`invariant` holds the check the release breaks, `failing`
    maps a release to its failing `Connector-preset` cells); a malformed entry, or one whose check is not an
    async-scheduling check, is a UsageError naming it."""
    defects = _load_defect_table(path)
    for defect in defects:
        if defect.invariant not in ASYNC_CHECKS:
            raise UsageError(f"{path.name}: defect {defect.id}: invariant {defect.invariant!r}; accepted: one of "
                             f"{', '.join(ASYNC_CHECKS)} (the async-scheduling check the release breaks)")
    return defects


def _cell_of(entry: dict, release: str | None = None) -> tuple[str, str, str] | None:
    """(release, check id, `Connector-preset`) of a connector cell run on vLLM's scheduler, else None: a vLLM
    connector's cell names its release, another connector's is `release`'s (None: not judged)."""
    cell = entry.get("cell") or {}
    connector, check = str(cell.get("connector") or ""), str(cell.get("check") or "")
    if entry.get("suite") != "connector" or cell.get("engine") != "vllm":
        return None
    if connector.startswith(_PREFIX):
        release, _, connector = connector[len(_PREFIX):].partition(":")
    if release is None:
        return None
    return release, check.partition(" ")[0], f"{connector}-{cell.get('preset', '-')}"


def defect_of_cell(entry: dict, defects: list[AllocatorDefect] | None = None) -> AllocatorDefect | None:
    """The reviewed defect a vLLM connector's cell run on vLLM's scheduler fails by, or None."""
    key = _cell_of(entry)
    if key is None or key[1] not in ASYNC_CHECKS:
        return None
    release, check, cell = key
    return next((d for d in (load_defects() if defects is None else defects)
                 if d.invariant == check and cell in d.failing.get(release, ())), None)


def compare(entries: list[dict], defects: list[AllocatorDefect], release: str | None = None) -> list[str]:
    """One line per difference: a failing C42/C43 cell no defect lists for its release, a listed cell that did not
    fail (passed, skipped, or not run on a release the run covers). `release`: the vLLM whose scheduler drove the
    cells of connectors that are not vLLM's."""
    outcome: dict[tuple[str, str, str], str] = {}
    for entry in entries:
        key = _cell_of(entry, release)
        if key is not None and key[1] in ASYNC_CHECKS:
            outcome[key] = entry["status"]
    releases = {release for release, _, _ in outcome}
    listed = {(release, d.invariant, cell): d for d in defects for release, cells in d.failing.items()
              for cell in cells}
    lines = []
    for key, status in sorted(outcome.items()):
        if status in ("failed", "error") and key not in listed:
            lines.append(f"unreviewed failure on vLLM {key[0]}: {key[1]} [{key[2]}] under --kv-engine vllm")
    for key, defect in sorted(listed.items()):
        ran = any(k[0] == key[0] and k[2].partition("-")[0] == key[2].partition("-")[0] for k in outcome)
        if key[0] in releases and ran and outcome.get(key) not in ("failed", "error"):
            lines.append(f"known defect {defect.id} did not fail on vLLM {key[0]} ({outcome.get(key, 'not run')}): "
                         f"{key[1]} [{key[2]}]")
    return lines


def main(argv: list[str] | None = None) -> int:
    """Compare an engine-step run with the reviewed scheduler defects (exit 0 same, 1 differs, 2 usage)."""
    parser = argparse.ArgumentParser(prog="python -m harness.release.scheduler_defects",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("results", help="results file of suites/connector --kv-engine vllm")
    parser.add_argument("--release", help="the vLLM release (X.Y.Z) whose scheduler drove the cells of connectors "
                                          "that are not vLLM's (kvconform's own, a vendor's)")
    args = parser.parse_args(argv)
    try:
        differences = compare(load_results(args.results).results, load_defects(), args.release)
    except (UsageError, ResultsFileError) as exc:
        print(f"scheduler_defects: error: {exc}", file=sys.stderr)
        return 2
    print("\n".join(differences) or f"the run's {', '.join(ASYNC_CHECKS)} cells under vLLM's scheduler fail exactly "
          "their reviewed defects")
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())
