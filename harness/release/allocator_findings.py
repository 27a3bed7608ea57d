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
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

from harness.errors import UsageError
from harness.results_model import ResultsFileError, load_results

FINDINGS_FILE = Path(__file__).with_name("vllm_allocator_findings.toml")
_FIELDS = ("test", "failing", "passing", "root", "evidence", "upstream")
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


def compare(entries: list[dict], findings: list[AllocatorFinding]) -> tuple[str, list[str]]:
    """(release, differences): each failure no finding explains, and each finding of the release that did not
    fail, as one line."""
    release = release_of(entries)
    outcome = {e["id"]: e["status"] for e in entries if e.get("suite") == "allocator"}
    lines = []
    for test_id, status in sorted(outcome.items()):
        if status in ("failed", "error") and finding_for(test_id, release, findings) is None:
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
        print(f"vLLM {release}: the allocator suite fails exactly its {len(known)} reviewed finding(s)")
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())
