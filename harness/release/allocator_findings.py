"""Reviewed findings of the allocator suite on vLLM releases, and the comparison of a run with them.

    python -m harness.release.allocator_findings RESULTS.json

RESULTS.json is a results file of `suites/allocator --kv-allocator vllm` (its cells name the release:
`vllm-X.Y.Z`). The findings are reviewed data (`vllm_allocator_findings.toml`): a scenario a release fails
because of a vLLM bug, with the evidence. The command prints one line per difference between the run and the
list (a failure nobody reviewed; a reviewed finding that did not fail) and exits 1 when there is one, 0 when
the run fails exactly its release's reviewed findings, 2 on bad input (one line).
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

from harness.errors import UsageError
from harness.results_model import ResultsFileError, load_results

FINDINGS_FILE = Path(__file__).with_name("vllm_allocator_findings.toml")
DEFECTS_FILE = Path(__file__).with_name("vllm_allocator_defects.toml")
_FIELDS = ("test", "failing", "passing", "root", "evidence", "upstream")
_DEFECT_FIELDS = ("id", "invariant", "sentence", "failing", "passing", "fixed_in", "evidence", "upstream")
#: The invariant cells of the allocator suite: `test_invariant[INV-KV-NN-LAYOUT]`.
_INVARIANT_CELL = re.compile(r"test_invariants\.py::test_invariant\[(?P<invariant>INV-KV-\d+)-(?P<layout>[^\]]+)\]$")
_TARGET_PREFIX = "vllm-"


@dataclass(frozen=True)
class AllocatorFinding:
    """A scenario (`test`, a pytest node id) that the releases in `failing` fail because of a vLLM bug (`root`,
    `evidence`, the `upstream` issue), and the releases measured passing it."""

    test: str
    failing: tuple[str, ...]
    passing: tuple[str, ...]
    root: str
    evidence: str
    upstream: str


def load_findings(path: Path = FINDINGS_FILE) -> list[AllocatorFinding]:
    """The reviewed findings; a malformed entry is a UsageError naming the entry and the field."""
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    findings = []
    for index, entry in enumerate(data.get("finding", [])):
        missing = [name for name in _FIELDS if name not in entry]
        unknown = sorted(set(entry) - set(_FIELDS))
        if missing or unknown:
            raise UsageError(f"{path.name}: finding {index + 1}: missing {missing or 'nothing'}, unknown "
                             f"{unknown or 'nothing'}; accepted fields: {', '.join(_FIELDS)}")
        findings.append(AllocatorFinding(entry["test"], tuple(entry["failing"]), tuple(entry["passing"]),
                                         entry["root"], entry["evidence"], entry["upstream"]))
    return findings


@dataclass(frozen=True)
class AllocatorDefect:
    """A reviewed vLLM defect: a release violates allocator invariant `invariant` (`suites/allocator/invariants.py`).
    `failing`: release -> the layouts whose invariant cell fails there (measured); `passing`: releases measured
    passing every cell; `fixed_in`: the first release without it ("" when none is known yet)."""

    id: str
    invariant: str
    sentence: str
    failing: dict[str, tuple[str, ...]]
    passing: tuple[str, ...]
    fixed_in: str
    evidence: str
    upstream: str

    def describe(self) -> str:
        """`known vLLM defect ID (INVARIANT): sentence (fixed in X.Y.Z)`: the strict xfail's reason."""
        fixed = f"fixed in {self.fixed_in}" if self.fixed_in else "not fixed in any release measured"
        return f"known vLLM defect {self.id} ({self.invariant}): {self.sentence} ({fixed})"


def load_defects(path: Path = DEFECTS_FILE) -> list[AllocatorDefect]:
    """The reviewed defects; a malformed entry is a UsageError naming the entry and the field."""
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    defects = []
    for index, entry in enumerate(data.get("defect", [])):
        missing = [name for name in _DEFECT_FIELDS if name not in entry]
        unknown = sorted(set(entry) - set(_DEFECT_FIELDS))
        if missing or unknown or not isinstance(entry.get("failing"), dict):
            raise UsageError(f"{path.name}: defect {index + 1}: missing {missing or 'nothing'}, unknown "
                             f"{unknown or 'nothing'}; accepted fields: {', '.join(_DEFECT_FIELDS)} (failing: a "
                             "table of release = [layouts])")
        defects.append(AllocatorDefect(entry["id"], entry["invariant"], entry["sentence"],
                                       {release: tuple(layouts) for release, layouts in entry["failing"].items()},
                                       tuple(entry["passing"]), entry["fixed_in"], entry["evidence"],
                                       entry["upstream"]))
    return defects


_DEFECTS: list[AllocatorDefect] | None = None


def defect_for_cell(invariant: str, layout: str, release: str,
                    defects: list[AllocatorDefect] | None = None) -> AllocatorDefect | None:
    """The reviewed defect that makes `invariant` fail on `layout` on vLLM `release`, or None."""
    global _DEFECTS
    if defects is None:
        if _DEFECTS is None:
            _DEFECTS = load_defects()
        defects = _DEFECTS
    for defect in defects:
        if defect.invariant == invariant and layout in defect.failing.get(release, ()):
            return defect
    return None


def finding_for(test_id: str, release: str, findings: list[AllocatorFinding] | None = None) -> AllocatorFinding | None:
    """The reviewed finding that explains `test_id` failing on `release`, or None."""
    for finding in findings if findings is not None else load_findings():
        if finding.test == test_id and release in finding.failing:
            return finding
    return None


def finding_of_cell(entry: dict, findings: list[AllocatorFinding]) -> AllocatorFinding | None:
    """The reviewed finding a failing allocator cell of a vLLM release (target `vllm-X.Y.Z`) is, or None."""
    target = str((entry.get("cell") or {}).get("target") or "")
    if not target.startswith(_TARGET_PREFIX):
        return None
    return finding_for(entry["id"], target[len(_TARGET_PREFIX):], findings)


def release_of(entries: list[dict]) -> str:
    """The one vLLM release a run's allocator cells name (`vllm-X.Y.Z`); a UsageError otherwise."""
    # A scenario skipped as N/A before it ran records no target.
    targets = {str(target) for e in entries if e.get("suite") == "allocator"
               and (target := (e.get("cell") or {}).get("target")) is not None}
    releases = {t[len(_TARGET_PREFIX):] for t in targets if t.startswith(_TARGET_PREFIX)}
    if len(releases) != 1 or len(targets) != 1:
        raise UsageError(f"the results' allocator cells name the targets {sorted(targets) or 'none'}; "
                         f"expected one vLLM release ({_TARGET_PREFIX}X.Y.Z): a run of --kv-allocator vllm")
    return releases.pop()


def _defect_of(test_id: str, release: str, defects: list[AllocatorDefect]) -> AllocatorDefect | None:
    cell = _INVARIANT_CELL.search(test_id)
    return defect_for_cell(cell["invariant"], cell["layout"], release, defects) if cell else None


def compare(entries: list[dict], findings: list[AllocatorFinding],
            defects: list[AllocatorDefect] | None = None) -> tuple[str, list[str]]:
    """(release, differences): each failure no finding explains, each finding of the release that did not fail,
    and each invariant cell a reviewed defect expects to fail (a strict xfail) that passed, as one line."""
    release = release_of(entries)
    defects = load_defects() if defects is None else defects
    outcome = {e["id"]: e["status"] for e in entries if e.get("suite") == "allocator"}
    messages = {e["id"]: str(e.get("message") or "") for e in entries if e.get("suite") == "allocator"}
    lines = []
    for test_id, status in sorted(outcome.items()):
        defect = _defect_of(test_id, release, defects)
        if defect is not None:
            if status != "skipped" or not messages[test_id].startswith("xfail"):
                lines.append(f"known defect {defect.id} did not fail on vLLM {release} ({status}): {test_id}")
        elif status in ("failed", "error") and finding_for(test_id, release, findings) is None:
            lines.append(f"unreviewed failure on vLLM {release}: {test_id}")
    for finding in findings:
        if release in finding.failing and outcome.get(finding.test) not in ("failed", "error"):
            lines.append(f"reviewed finding did not fail on vLLM {release} "
                         f"({outcome.get(finding.test, 'not run')}): {finding.test}")
    return release, lines


def main(argv: list[str] | None = None) -> int:
    """Compare an allocator run of a vLLM release with the reviewed findings (exit 0 same, 1 differs, 2 usage)."""
    parser = argparse.ArgumentParser(prog="python -m harness.release.allocator_findings",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("results", help="results file of suites/allocator --kv-allocator vllm")
    args = parser.parse_args(argv)
    try:
        findings = load_findings()
        release, differences = compare(load_results(args.results).results, findings)
    except (UsageError, ResultsFileError) as exc:
        print(f"allocator_findings: error: {exc}", file=sys.stderr)
        return 2
    for line in differences:
        print(line)
    if not differences:
        known = [f for f in findings if release in f.failing]
        expected = [d for d in load_defects() if release in d.failing]
        print(f"vLLM {release}: the allocator suite fails exactly its {len(known)} reviewed finding(s) and its "
              f"{len(expected)} reviewed defect(s) (strict xfail)")
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())
