"""The config invariants on one release: the matrix's cells (and the reviewed defects' witnesses) against what
every correct engine should do, compared with the reviewed vLLM defects.

    python -m suites.config.invariants --era v0.14                  # the reference resolver at an era's rules
    python -m suites.config.invariants --target vllm [--random 200]  # the installed vLLM (its own era's cells)

Each invariant (`harness.invariants.config`, docs/invariants.md) is checked on every cell of the era's config
matrix, optionally on `--random N` seeded random cases too (`random_cases.py`), and on each reviewed defect's
witness. The result is one line per invariant: it holds, it is broken by known defects (their ids), or it
differs from the reviewed data (a violation no defect explains, or a defect of this release that did not show).
Exit status: 0 exactly the reviewed defects, 1 news, 2 bad arguments, 4 the target cannot be loaded.
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass, replace
from typing import Any, Callable

from harness.eras import ERA_IDS, ERA_RELEASES
from harness.invariants.config import INVARIANTS, Memo, Violation, check_case, evaluate_answered, judged
from harness.invariants.defects import Defect, Verdict, judge, load_defects
from reference_impl.config.eras import parse_version
from reference_impl.config.outcome import Outcome
from reference_impl.config.resolution import warnings_not_logged
from suites.config.matrix import cells_for
from suites.config.outcomes import decided_by_installed_package
from suites.config.random_cases import random_cases


def era_cases(era: str, random_count: int = 0, seed: int = 1) -> list[dict[str, Any]]:
    """The matrix cells of `era` as cases, then `random_count` seeded random cases of it."""
    cases = [cell.case() for cell in cells_for(era)]
    return cases + (random_cases(era, random_count, seed) if random_count else [])


def witness_violations(release: str, target: Callable[[dict], dict]) -> list[Violation]:
    """The violations each reviewed defect's witness shows on `release` through `target` (the defect's own
    invariants only)."""
    found = []
    resolve = target if isinstance(target, Memo) else Memo(target)
    by_id = {inv.id: inv for inv in INVARIANTS}
    for defect in load_defects():
        for case in defect.witness_cases(release):
            found.extend(check_case(case, resolve(case), resolve, [by_id[i] for i in defect.invariants]))
    return found


def violations_on(cases: list[dict], release: str, target: Callable[[dict], dict]) -> tuple[list[Violation], int]:
    """(every violation of the invariants by `target` on `cases` and on the defects' witnesses, how many of the
    cases the target answered: not unknown, not refused as input it cannot read)."""
    resolve = Memo(target)
    answers = [resolve.typed_or_answer(case) for case in cases]
    found = evaluate_answered(list(zip(cases, answers)), resolve)
    answered = sum(judged(answer) for answer in answers if isinstance(answer, Outcome))
    return found + witness_violations(release, resolve), answered


def with_reference_rules(violations: list[Violation], reference: list[Violation]) -> list[Violation]:
    """`violations` of another target, each carrying the rules of the reference resolver's violation of the same
    invariant on the same case (the rules that tie a violation to its defect): a violation the reference does
    not share keeps its own and no defect explains it."""
    rules = {(v.invariant, v.case_id): v.rules for v in reference}
    return [replace(v, rules=rules.get((v.invariant, v.case_id), v.rules)) for v in violations]


def run(era: str, release: str, target: Callable[[dict], dict], random_count: int = 0,
        seed: int = 1) -> tuple[list[Verdict], int]:
    """(one verdict per invariant on `release`, how many cases the target answered) through `target`; a target
    other than the reference has its violations tied to defects by the reference's rules on the same cases."""
    from reference_impl.config import resolve_case

    cases = era_cases(era, random_count, seed)
    if target is not resolve_case:
        # the eras model an install without the connectors' optional packages: where this environment has one (a
        # vLLM venv that also serves the LMCache step) a case that package decides is not judged, as the matrix
        # skips its cell
        cases = [case for case in cases if not decided_by_installed_package(resolve_case(case))]
    violations, answered = violations_on(cases, release, target)
    if target is not resolve_case:
        violations = with_reference_rules(violations, violations_on(cases, release, resolve_case)[0])
    return judge(violations, parse_version(release), [inv.id for inv in INVARIANTS]), answered


@dataclass(frozen=True)
class EraJudgement:
    """The invariants on one era's matrix through one target: a verdict per invariant, how many cells the target
    answered, and per case id the reviewed defects that produced its outcome."""

    verdicts: dict[str, Verdict]
    answered: int
    defects_by_case: dict[Any, tuple[Defect, ...]]


def release_of(era: str, target: Callable[[dict], dict]) -> str:
    """The release a target is judged as: an installed vLLM's own (the `vllm` target), else the era's first."""
    version = getattr(target, "version", None)
    try:
        parse_version(str(version))
        return str(version)
    except ValueError:
        return ERA_RELEASES[era]


@functools.lru_cache(maxsize=None)
def era_judgement(era: str, target: Callable[[dict], dict]) -> EraJudgement:
    """`run` on one era's matrix, once per (era, target) and process (the suite's tests share it). The reference's
    warnings on the era's cells and their relatives are judged from the outcomes, not logged (pytest would keep
    tens of thousands of records for the one test that happens to ask first)."""
    with warnings_not_logged():
        verdicts, answered = run(era, release_of(era, target), target)
    by_case: dict[Any, list[Defect]] = {}
    for verdict in verdicts:
        for violation in verdict.violations:
            for defect in verdict.defects:
                if defect.explains(violation) and defect not in by_case.setdefault(violation.case_id, []):
                    by_case[violation.case_id].append(defect)
    return EraJudgement({v.invariant: v for v in verdicts}, answered, {k: tuple(v) for k, v in by_case.items()})


@functools.lru_cache(maxsize=None)
def _defects_by_case(era: str, target: Callable[[dict], dict]) -> dict[Any, tuple[Defect, ...]]:
    """`era_judgement`'s defects per case, or none when the target raised on some case of the era (or a
    defect's witness): the cells it raised on fail with 'target raised ...' themselves, and a cell it answered
    must not fail with another cell's exception. Cached, so a raising target is run through the era once."""
    try:
        return era_judgement(era, target).defects_by_case
    except Exception:  # noqa: BLE001 -- any exception of a broken target; reported by the cells it raised on
        return {}


def defects_noted(era: str, target: Callable[[dict], dict], case_id: Any) -> dict[str, Any]:
    """What a matrix cell's results entry notes about the reviewed defects that produced its outcome:
    {"defects": [{"id", "sentence", "fixed_in"}, ...]}, or nothing when none did (or the target raised on some
    case, which leaves the era without a judgement)."""
    defects = _defects_by_case(era, target).get(case_id)
    return {"defects": [defect.as_json() for defect in defects]} if defects else {}


def verdict_line(verdict: Verdict) -> str:
    """One line: the invariant's id and what became of it."""
    count = len(verdict.violations)
    if verdict.news:
        parts = []
        if verdict.unexplained:
            first = verdict.unexplained[0]
            parts.append(f"{len(verdict.unexplained)} violation(s) no reviewed defect explains, first "
                         f"{first.case_id}: {first.detail}")
        for defect in verdict.silent:
            parts.append(f"reviewed defect {defect.id} did not show")
        return f"{verdict.invariant}: NEWS: " + "; ".join(parts)
    if verdict.defects:
        ids = ", ".join(defect.id for defect in verdict.defects)
        return f"{verdict.invariant}: broken by known defect(s) {ids} ({count} violation(s))"
    return f"{verdict.invariant}: holds"


def main(argv: list[str] | None = None) -> int:
    """Command line (see the module docstring)."""
    from harness.cli import _Parser
    from harness.errors import EXIT_TARGET, UsageError

    parser = _Parser(prog="python -m suites.config.invariants", description=__doc__.split("\n\n")[0])
    parser.add_argument("--era", help=f"judge the reference resolver at this era's rules: {', '.join(ERA_IDS)}")
    parser.add_argument("--target", help="judge this target instead: vllm (the installed vLLM, on its own era's cells)")
    parser.add_argument("--random", type=int, default=0, metavar="N", help="also N seeded random cases of the era")
    parser.add_argument("--seed", type=int, default=1, help="the random cases' seed (default 1)")
    try:
        args = parser.parse_args(argv)
        if (args.era is None) == (args.target is None):
            raise UsageError("python -m suites.config.invariants: give exactly one of --era ERA and --target vllm")
        if args.era is not None and args.era not in ERA_IDS:
            raise UsageError(f"--era: {args.era!r} is not an era id; accepted: {', '.join(ERA_IDS)}")
        if args.target not in (None, "vllm"):
            raise UsageError(f"--target: {args.target!r} is not a known target; accepted: vllm")
        if args.random < 0:
            raise UsageError(f"--random: {args.random} is not accepted; expected 0 or more cases")
        if args.target == "vllm":
            from harness.targets.config.vllm_target import load_target

            target = load_target()
            era, release, name = target.era, target.version, target.describe()
        else:
            from reference_impl.config import resolve_case

            target, era, release = resolve_case, args.era, ERA_RELEASES[args.era]
            name = f"the reference resolver, era {era}"
    except UsageError as exc:
        print(f"invariants: {exc}", file=sys.stderr)
        return exc.exit_code if exc.exit_code != EXIT_TARGET else EXIT_TARGET
    verdicts, answered = run(era, release, target, args.random, args.seed)
    print(f"config invariants on {name} (release {release}): {answered} cases answered and {len(load_defects())} witnesses")
    for verdict in verdicts:
        print("  " + verdict_line(verdict))
    news = [v for v in verdicts if v.news]
    print(f"{len(news)} invariant(s) differ from the reviewed defects" if news
          else "exactly the reviewed defects of this release")
    return 1 if news else 0


if __name__ == "__main__":
    sys.exit(main())
