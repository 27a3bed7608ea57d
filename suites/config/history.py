"""What changed in HMA flag resolution between two vLLM releases, cell by cell: a rule change, a defect introduced or a
defect fixed.

    python -m suites.config.history --from 0.13.0 --to 0.22.0      # two releases
    python -m suites.config.history --range 0.13.0..0.22.0         # every release step (era boundary) in between
    python -m suites.config.history --results OLD.json NEW.json    # two runs of the matrix (e.g. two installed vLLMs)
    kvconform history ...                                            # the same

Each release's outcomes are its era's rules (the reference resolver) on the config matrix's cells; the cells both
releases' matrices have are compared, and every cell whose outcome (resolved value, warnings, error) differs is one
line. The config invariants (docs/invariants.md) are checked on that cell in both releases: a reviewed defect
(harness/release/vllm_config_defects.toml) that explains a violation in the old release, none in the new one, and
whose releases end before the new one was fixed there; one that explains a violation only in the new one and whose
releases start after the old one was introduced; a violation in the new release that no reviewed defect explains is
an unreviewed violation (news); anything else is a rule change. With `--results`, the outcomes are two runs' own (any
target, e.g. `pytest suites/config --vllm-version 0.19.0 --hma-target vllm --kvconform-results OLD.json` in one
release's venv and the same in another's) and the defects those runs recorded for each cell. Exit status: 0, 2 bad
arguments (one line).
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from dataclasses import dataclass

from harness.invariants.config import Memo, check_case
from harness.invariants.defects import Defect, era_start, explaining, load_defects, unexplained, version_text
from reference_impl.config import resolve_case
from reference_impl.config.eras import ERAS, era_for_version, parse_version
from reference_impl.releases import is_before
from reference_impl.vocabulary import FLAGS
from suites.config.matrix import cells_for
from suites.config.outcomes import summarize

RULE_CHANGE, INTRODUCED, FIXED, UNREVIEWED = "rule change", "defect introduced", "defect fixed", "unreviewed violation"


@dataclass(frozen=True)
class Change:
    """One cell whose outcome differs between two releases, and what the difference is."""

    cell: str
    before: str
    after: str
    kind: str
    defects: tuple[Defect, ...] = ()
    invariants: tuple[str, ...] = ()

    def line(self) -> str:
        if self.kind in (INTRODUCED, FIXED):
            what = f"{self.kind}: " + ", ".join(f"{d.id} ({d.sentence})" for d in self.defects)
        elif self.kind == UNREVIEWED:
            what = f"{self.kind} of {', '.join(self.invariants)}"
        else:
            what = self.kind
        return f"{self.cell}: {self.before} -> {self.after}: {what}"


def _key(cell) -> str:
    """A cell's id without its era: the same configuration in another release's matrix."""
    return cell.id[len(cell.era) + 1:]


def changes(old: str, new: str) -> tuple[list[Change], int]:
    """(the changed cells from release `old` to release `new`, how many cells both matrices have)."""
    eras = {version: era_for_version(version) for version in (old, new)}
    versions = {version: parse_version(version) for version in (old, new)}
    cells = {version: {_key(c): c for c in cells_for(eras[version].id)} for version in (old, new)}
    resolvers = {version: Memo(resolve_case) for version in (old, new)}
    common = [key for key in cells[old] if key in cells[new]]
    found = []
    for key in common:
        cases = {v: {**cells[v][key].case(), "vllm_version": v, "profile": None} for v in (old, new)}
        outcomes = {v: resolvers[v](cases[v]) for v in (old, new)}
        before, after = summarize(outcomes[old]), summarize(outcomes[new])
        if before == after:
            continue
        violations = {v: check_case(cases[v], outcomes[v], resolvers[v]) for v in (old, new)}
        was = explaining(violations[old], versions[old])
        now = explaining(violations[new], versions[new])
        # a defect is fixed (introduced) at this cell when the new (old) release is outside its releases: a
        # defect that merely stops (starts) showing at a cell because another rule changed its input is no news
        introduced = tuple(d for d in now if d not in was and not d.covers(versions[old]))
        fixed = tuple(d for d in was if d not in now and not d.covers(versions[new]))
        stray = unexplained(violations[new], versions[new])
        if introduced:
            found.append(Change(key, before, after, INTRODUCED, introduced))
        elif fixed:
            found.append(Change(key, before, after, FIXED, fixed))
        elif stray:
            found.append(Change(key, before, after, UNREVIEWED, invariants=tuple(dict.fromkeys(v.invariant for v in stray))))
        else:
            found.append(Change(key, before, after, RULE_CHANGE))
    return found, len(common)


def _cells_of(path: str) -> tuple[str, dict[str, dict]]:
    """(the one era of a results file's config cells, cell key -> entry) for `--results`."""
    from harness.errors import UsageError
    from harness.results_model import ResultsFileError, load_results

    try:
        entries = [e for e in load_results(path).results if e.get("suite") == "config" and e.get("cell")]
    except ResultsFileError as exc:
        raise UsageError(f"--results: {exc}") from None
    eras = sorted({str(e["cell"].get("era")) for e in entries})
    if len(eras) != 1:
        raise UsageError(f"--results: {path} has config cells of {len(eras)} eras ({', '.join(eras) or 'none'}); "
                         "expected the run of one release (pytest suites/config --vllm-version X --kvconform-results)")
    cells = {}
    for entry in entries:
        cell = entry["cell"]
        flag = next(ident for ident, value in FLAGS.items() if value is cell.get("flag"))
        stage = "" if cell.get("stage") == "config" else "-create"
        cells[f"{flag}-{cell['platform']}-{cell['features']}-{cell['connector']}{stage}"] = entry
    return eras[0], cells


def changes_between_runs(old_path: str, new_path: str) -> tuple[list[Change], int, tuple[str, str]]:
    """(the changed cells between two results files of the config matrix, how many cells both have, their eras):
    the outcomes are the runs' own (any target); the defects are those each run recorded for its cells."""
    (old_era, old), (new_era, new) = _cells_of(old_path), _cells_of(new_path)
    starts = {era.id: era_start(era) for era in ERAS}
    by_id = {defect.id: defect for defect in load_defects()}
    common = [key for key in old if key in new]
    found = []
    for key in common:
        before, after = (summarize(entry.get("actual")) for entry in (old[key], new[key]))
        if before == after:
            continue
        was, now = ([by_id[d["id"]] for d in (entry.get("extra") or {}).get("defects") or () if d["id"] in by_id]
                    for entry in (old[key], new[key]))
        introduced = tuple(d for d in now if d not in was and not d.covers(starts.get(old_era, (0, 0, 0))))
        fixed = tuple(d for d in was if d not in now and not d.covers(starts.get(new_era, (99, 0, 0))))
        kind = INTRODUCED if introduced else FIXED if fixed else RULE_CHANGE
        found.append(Change(key, before, after, kind, introduced or fixed))
    return found, len(common), (old_era, new_era)


def steps(first: str, last: str) -> list[tuple[str, str]]:
    """Consecutive release pairs from `first` to `last`: one step per era boundary between them (its first release)."""
    ordered = sorted((first, last), key=parse_version)
    low, high = (parse_version(v) for v in ordered)
    inside = [version_text(era_start(era)) for era in ERAS
              if is_before(low, era_start(era)) and is_before(era_start(era), high)]
    releases = [ordered[0], *inside, ordered[1]]
    if is_before(last, first):
        releases.reverse()
    return list(zip(releases, releases[1:]))


def _release(option: str, text: str) -> str:
    from harness.errors import UsageError

    try:
        era_for_version(text)
    except ValueError as exc:
        raise UsageError(f"{option}: {str(exc).removeprefix('vllm_version: ')}") from None
    return text


def _print_step(title: str, found: list[Change], common: int, summary: bool) -> None:
    counts = Counter(change.kind for change in found)
    tally = ", ".join(f"{counts[kind]} {kind}" for kind in (RULE_CHANGE, INTRODUCED, FIXED, UNREVIEWED) if counts[kind])
    print(f"{title}: {len(found)} of {common} cells changed" + (f" ({tally})" if tally else ""))
    if not summary:
        for change in found:
            print("  " + change.line())


def main(argv: list[str] | None = None) -> int:
    """Command line (see the module docstring)."""
    from harness.cli import _Parser
    from harness.errors import UsageError

    prog = os.environ.get("KVCONFORM_PROG", "python -m suites.config.history")  # `kvconform history` runs this
    parser = _Parser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("--from", dest="old", metavar="X.Y.Z", help="the older release")
    parser.add_argument("--to", dest="new", metavar="X.Y.Z", help="the newer release")
    parser.add_argument("--range", metavar="X.Y.Z..X.Y.Z", help="every release step between two releases")
    parser.add_argument("--results", nargs=2, metavar=("OLD.json", "NEW.json"),
                        help="compare two results files of the config matrix (one release each, any target) instead")
    parser.add_argument("--summary", action="store_true", help="only the counts per step, not one line per cell")
    try:
        args = parser.parse_args(argv)
        if args.results is not None:
            if args.range is not None or args.old is not None or args.new is not None:
                raise UsageError("--results: give either two results files or releases (--from/--to, --range), not both")
            found, common, eras = changes_between_runs(*args.results)
            _print_step(f"{args.results[0]} (era {eras[0]}) -> {args.results[1]} (era {eras[1]})", found, common,
                        args.summary)
            return 0
        if args.range is not None:
            if args.old is not None or args.new is not None:
                raise UsageError("--range: give either --range A..B or --from A --to B, not both")
            first, sep, last = args.range.partition("..")
            if not sep or not first or not last:
                raise UsageError(f"--range: {args.range!r} is not accepted; expected two releases as A..B, e.g. 0.13.0..0.22.0")
            pairs = steps(_release("--range", first), _release("--range", last))
        else:
            if args.old is None or args.new is None:
                raise UsageError("give --from X.Y.Z and --to X.Y.Z (or --range A..B)")
            pairs = [(_release("--from", args.old), _release("--to", args.new))]
    except UsageError as exc:
        print(str(exc) if str(exc).startswith(prog) else f"{prog}: {exc}", file=sys.stderr)
        return exc.exit_code
    load_defects()
    for old, new in pairs:
        eras = (era_for_version(old).id, era_for_version(new).id)
        if eras[0] == eras[1]:
            print(f"vLLM {old} -> {new}: the same rules (era {eras[0]}): no cell changes")
            continue
        found, common = changes(old, new)
        _print_step(f"vLLM {old} (era {eras[0]}) -> {new} (era {eras[1]})", found, common, args.summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
