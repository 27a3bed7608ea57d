"""Reviewed vLLM defects of the config invariants: which releases break which invariant, why, and where in vLLM.

The data is `harness/release/vllm_config_defects.toml`. A defect covers the releases from `first_affected` up to,
not including, `fixed_in` (none: not fixed in any release kvconform knows). A violation of one of its invariants on a
covered release is explained by it when the violation's rules include one of the defect's `rules` (the reference
resolver's rule ids of the mechanism; a defect without rules explains every violation of its invariants). Its
`witness` is a case (the schema of `kvconform resolve`, without a release), or a list of them, that violates the
invariant on every covered release (one of them, at least) and on no other: the evidence, runnable on the reference
and on an installed vLLM.
"""

from __future__ import annotations

import functools
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import UsageError
from harness.invariants.config import INVARIANTS_BY_ID, Memo, Violation, check_case
from reference_impl.config import eras as E
from reference_impl.config.rules import RULES
from reference_impl.releases import is_before, within
from reference_impl.vocabulary import CASE_DEFAULTS

DEFECTS_FILE = Path(__file__).resolve().parents[1] / "release" / "vllm_config_defects.toml"
_REQUIRED = ("id", "invariants", "sentence", "first_affected", "fixed_in", "rules", "witness", "source", "upstream")
_ERA_STARTS = {tuple(era.first_version) + (0,) * (3 - len(era.first_version)) for era in E.ERAS}


def _version(text: str) -> tuple[int, int, int]:
    return E.parse_version(text)


def version_text(version: tuple[int, ...]) -> str:
    return ".".join(str(part) for part in version)


def era_start(era: E.Era) -> tuple[int, int, int]:
    """The first release an era covers, as (X, Y, Z)."""
    return tuple(era.first_version) + (0,) * (3 - len(era.first_version))  # type: ignore[return-value]


@dataclass(frozen=True)
class Defect:
    """One reviewed vLLM defect: the invariants it breaks, on which releases, why, and the evidence."""

    id: str
    invariants: tuple[str, ...]
    sentence: str
    first_affected: tuple[int, int, int]
    fixed_in: tuple[int, int, int] | None
    rules: tuple[str, ...]
    witnesses: tuple[dict[str, Any], ...]
    source: tuple[str, ...]
    upstream: str

    @property
    def fixed_in_text(self) -> str | None:
        """'0.20.0', or None when no known release fixes it."""
        return version_text(self.fixed_in) if self.fixed_in else None

    def covers(self, version: tuple[int, ...]) -> bool:
        """Whether release `version` (X, Y, Z) has the defect."""
        return within(version, self.first_affected, self.fixed_in)

    def covers_era(self, era: E.Era) -> bool:
        """Whether the releases of `era` have the defect (the range starts and ends on era boundaries)."""
        return self.covers(era_start(era))

    def explains(self, violation: Violation) -> bool:
        """Whether this defect is the cause of `violation` (its invariant, and one of its rules fired)."""
        return violation.invariant in self.invariants and (not self.rules or bool(set(self.rules) & set(violation.rules)))

    def marker(self) -> str:
        """The line `kvconform explain` prints beside the rules."""
        return defect_marker(self.as_json())

    def as_json(self) -> dict[str, Any]:
        return {"id": self.id, "sentence": self.sentence, "fixed_in": self.fixed_in_text}

    def witness_cases(self, release: str) -> list[dict[str, Any]]:
        """The witnesses as cases of `release` (a version or an era id); the defect shows on a covered release
        when one of them breaks its invariants (one input rarely reaches a mechanism in every release: a connector
        that only exists, or only imports, in some of them)."""
        return [{**CASE_DEFAULTS, **witness, "id": f"{self.id}-witness{index}", "vllm_version": release}
                for index, witness in enumerate(self.witnesses, 1)]


def defect_marker(defect: dict[str, Any]) -> str:
    """'known vLLM defect ID: sentence (fixed in X.Y.Z)' for a defect as `Defect.as_json` writes it (the form a
    results entry keeps)."""
    fixed = f"fixed in {defect['fixed_in']}" if defect.get("fixed_in") else "not fixed in any known release"
    return f"known vLLM defect {defect['id']}: {defect['sentence']} ({fixed})"


def _fail(path: Path, index: int, what: str) -> UsageError:
    return UsageError(f"{path.name}: defect {index + 1}: {what}")


def _parse(entry: dict, index: int, path: Path) -> Defect:
    missing = [name for name in _REQUIRED if name not in entry]
    unknown = sorted(set(entry) - set(_REQUIRED))
    if missing or unknown:
        raise _fail(path, index, f"missing {missing or 'nothing'}, unknown {unknown or 'nothing'}; "
                                 f"accepted fields: {', '.join(_REQUIRED)}")
    invariants = tuple(entry["invariants"])
    bad = [inv for inv in invariants if inv not in INVARIANTS_BY_ID]
    if not invariants or bad:
        raise _fail(path, index, f"invariants: {bad or '[]'} not accepted; expected ids of "
                                 f"harness.invariants.config ({', '.join(INVARIANTS_BY_ID)})")
    rules = tuple(entry["rules"])
    if any(rule not in RULES for rule in rules):
        raise _fail(path, index, f"rules: {[r for r in rules if r not in RULES]} are not rule ids of "
                                 "reference_impl.config.rules")
    versions = {}
    for name in ("first_affected", "fixed_in"):
        text = entry[name]
        if name == "fixed_in" and text == "":
            versions[name] = None
            continue
        try:
            versions[name] = _version(text)
        except ValueError:
            raise _fail(path, index, f"{name}: {text!r} is not accepted; expected X.Y.Z"
                                     + (" or \"\" (not fixed)" if name == "fixed_in" else "")) from None
        if versions[name] not in _ERA_STARTS and is_before(versions[name], E.NEWEST_EXCLUSIVE):
            starts = ", ".join(version_text(v) for v in sorted(_ERA_STARTS))
            raise _fail(path, index, f"{name}: {text!r} is inside an era; a defect's releases start and end where "
                                     f"an era does ({starts}); split the era first")
    given = entry["witness"]
    witnesses = tuple(dict(w) for w in (given if isinstance(given, list) else [given]))
    for witness in witnesses:
        unknown_keys = sorted(set(witness) - set(CASE_DEFAULTS) | ({"vllm_version", "profile", "id"} & set(witness)))
        if unknown_keys:
            raise _fail(path, index, f"witness: keys {unknown_keys} are not accepted; expected case fields without a "
                                     "release or id")
    return Defect(entry["id"], invariants, " ".join(entry["sentence"].split()), versions["first_affected"],
                  versions["fixed_in"], rules, witnesses, tuple(entry["source"]), " ".join(entry["upstream"].split()))


@functools.lru_cache(maxsize=4)
def load_defects(path: Path = DEFECTS_FILE) -> tuple[Defect, ...]:
    """The reviewed defects; a malformed entry is a UsageError naming the entry and the field."""
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    defects = tuple(_parse(entry, index, path) for index, entry in enumerate(data.get("defect", [])))
    ids = [defect.id for defect in defects]
    if len(set(ids)) != len(ids):
        raise UsageError(f"{path.name}: defect ids repeat: {sorted({i for i in ids if ids.count(i) > 1})}")
    return defects


def covering(invariant: str, version: tuple[int, ...], defects: tuple[Defect, ...] | None = None) -> list[Defect]:
    """The defects that break `invariant` on release `version`."""
    return [d for d in (load_defects() if defects is None else defects) if invariant in d.invariants and d.covers(version)]


def explaining(violations: list[Violation], version: tuple[int, ...],
               defects: tuple[Defect, ...] | None = None) -> list[Defect]:
    """The defects of release `version` that explain at least one of `violations`, in file order."""
    return [d for d in (load_defects() if defects is None else defects)
            if d.covers(version) and any(d.explains(v) for v in violations)]


def unexplained(violations: list[Violation], version: tuple[int, ...],
                defects: tuple[Defect, ...] | None = None) -> list[Violation]:
    """The violations no reviewed defect of release `version` explains (news: a defect nobody reviewed)."""
    pool = [d for d in (load_defects() if defects is None else defects) if d.covers(version)]
    return [v for v in violations if not any(d.explains(v) for d in pool)]


@dataclass(frozen=True)
class Verdict:
    """How one invariant fares on one release: its violations, the reviewed defects that cover it there, the
    violations none of them explains and the covering defects that explain none (both are news)."""

    invariant: str
    violations: tuple[Violation, ...]
    defects: tuple[Defect, ...]
    unexplained: tuple[Violation, ...]
    silent: tuple[Defect, ...]

    @property
    def news(self) -> bool:
        """Whether the run differs from the reviewed defects (a new violation, or a defect that did not show)."""
        return bool(self.unexplained or self.silent)

    @property
    def expected_to_fail(self) -> bool:
        return bool(self.defects)


def judge(violations: list[Violation], version: tuple[int, ...], invariants: list[str],
          defects: tuple[Defect, ...] | None = None) -> list[Verdict]:
    """One verdict per invariant id in `invariants`, for release `version`."""
    verdicts = []
    for invariant in invariants:
        mine = tuple(v for v in violations if v.invariant == invariant)
        cover = tuple(covering(invariant, version, defects))
        verdicts.append(Verdict(invariant, mine, cover,
                                tuple(v for v in mine if not any(d.explains(v) for d in cover)),
                                tuple(d for d in cover if not any(d.explains(v) for v in mine))))
    return verdicts


def defects_of(case: dict, outcome: dict, resolve=None) -> list[Defect]:
    """The reviewed defects that produced `outcome` of `case` (a case naming its release, command line and all):
    the invariants are checked on it, its related cases answered by `resolve` (default: the reference resolver,
    whose rules tie a violation to its defect)."""
    from reference_impl.config import resolve_case

    release = case.get("vllm_version") or case.get("profile")
    try:
        version = E.parse_version(E.resolve_era(release)[1])
    except ValueError:
        return []
    violations = check_case(case, outcome, Memo(resolve or resolve_case))
    return explaining(violations, version)
