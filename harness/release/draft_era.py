"""The draft era of a new vLLM release, or only its registry row when no rule changed.

    python -m harness.release.draft_era X.Y.Z [--root DIR] [--range-only]

Writes into a kvconform tree (default: this checkout):
  * `reference_impl/config/eras.py`: a new era `vX.Y` (`vX.Y.Z` for a patch release) that evolves the newest
    era with no change (its rules copied), marked DRAFT in its summary; it joins `ERAS`;
  * `reference_impl/releases.toml`: the release's row in the release registry (the new era, the newest row's
    dependency list, not in CI), which puts the release in the known range;
  * `suites/config/tables/vX.Y.toml`: the oracle's decision table, extending the newest era's (its tables
    copied), with the sections to review named in comments.
With `--range-only` (a release that changes no rule) only the registry row is written: the release joins the
newest era. The goldens then come from `pytest suites/config --vllm-version ERA --update-golden`;
`docs/new-release.md` is the checklist. Exit status 0 written, 2 bad arguments or a tree it cannot edit.
"""

from __future__ import annotations

import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

from harness.atomic_write import write_text_atomic
from harness.errors import UsageError
from reference_impl.releases import is_before

ERAS_FILE = Path("reference_impl/config/eras.py")
RELEASES_FILE = Path("reference_impl/releases.toml")
TABLES_DIR = Path("suites/config/tables")
_RELEASE = re.compile(r"^(\d+)\.(\d+)\.(\d+)$")
# `name = Era(` / `name = _evolve(` followed by the previous era's variable (for _evolve) and the era id.
_FIRST_ERA = re.compile(r"^    (\w+) = Era\(\s*id=\"([^\"]+)\",\s*first_version=\(([\d, ]+)\)", re.M)
_EVOLVED_ERA = re.compile(r"^    (\w+) = _evolve\(\s*(\w+),\s*\"([^\"]+)\",\s*\(([\d, ]+)\)", re.M)
_RETURN = re.compile(r"^    return \(([\w, ]+)\)\n", re.M)


@dataclass(frozen=True)
class DeclaredEra:
    """An era as `eras.py` declares it: its variable, id and first version."""

    var: str
    id: str
    first_version: tuple[int, ...]


def parse_release(text: str) -> tuple[int, int, int]:
    """'0.35.0' -> (0, 35, 0); anything else is a usage error naming the value."""
    match = _RELEASE.match(text)
    if not match:
        raise UsageError(f"release: {text!r} is not a vLLM release; expected X.Y.Z such as 0.35.0")
    return int(match[1]), int(match[2]), int(match[3])


def era_id_for(release: tuple[int, int, int]) -> str:
    """The id a new era gets: vX.Y, or vX.Y.Z for a patch release."""
    x, y, z = release
    return f"v{x}.{y}" if z == 0 else f"v{x}.{y}.{z}"


def declared_eras(source: str) -> list[DeclaredEra]:
    """The eras `eras.py` builds, in the order `_build_eras` returns them."""
    found: dict[str, DeclaredEra] = {}
    for match in _FIRST_ERA.finditer(source):
        found[match[1]] = DeclaredEra(match[1], match[2], _tuple(match[3]))
    for match in _EVOLVED_ERA.finditer(source):
        found[match[1]] = DeclaredEra(match[1], match[3], _tuple(match[4]))
    returned = _RETURN.search(source)
    if not returned or not found:
        raise UsageError(f"{ERAS_FILE}: cannot find the eras _build_eras returns (expected 'return (v010, ...)')")
    names = [name.strip() for name in returned[1].split(",") if name.strip()]
    missing = [name for name in names if name not in found]
    if missing:
        raise UsageError(f"{ERAS_FILE}: the returned eras {', '.join(missing)} are not declared as 'name = _evolve(...)'")
    return [found[name] for name in names]


def _tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(",") if part.strip())


def _with_row(root: Path, release_text: str, era: str) -> tuple[Path, str]:
    """The registry's path and its text with the release's row appended: its era, the newest row's dependency list."""
    path = root / RELEASES_FILE
    source = _read(path)
    try:
        rows = {key: value for key, value in tomllib.loads(source).items() if key != "defaults"}
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"--root: cannot read the release registry {path} ({exc})") from None
    if release_text in rows:
        raise UsageError(f"release: {release_text} already has a row in {RELEASES_FILE}")
    newest = max(rows, key=parse_release)
    return path, source.rstrip("\n") + f'\n\n["{release_text}"]\nera = "{era}"\ndeps = "{rows[newest]["deps"]}"\n'


def write_range_only(root: Path, release_text: str) -> list[Path]:
    """The one-row change for a release that changes no rule: its registry row puts it in the newest era's range."""
    release = parse_release(release_text)
    eras = declared_eras(_read(root / ERAS_FILE))
    if is_before(release, eras[-1].first_version):
        raise UsageError(f"release: {release_text} is older than the newest era {eras[-1].id}; nothing to widen")
    path, updated = _with_row(root, release_text, eras[-1].id)
    write_text_atomic(path, updated)
    return [path]


def write_draft_era(root: Path, release_text: str) -> tuple[str, list[Path]]:
    """Declare the draft era of `release_text` in `eras.py` and the oracle's tables; returns (era id, files)."""
    release = parse_release(release_text)
    path = root / ERAS_FILE
    source = _read(path)
    eras = declared_eras(source)
    previous = eras[-1]
    new_id = era_id_for(release)
    if not is_before(previous.first_version, release):
        raise UsageError(f"release: {release_text} is not newer than the newest era {previous.id} "
                         f"({'.'.join(map(str, previous.first_version))}); a draft era must come last")
    if new_id in {era.id for era in eras}:
        raise UsageError(f"release: era {new_id} is already declared in {ERAS_FILE}")
    table_path = root / TABLES_DIR / f"{new_id}.toml"
    previous_table = root / TABLES_DIR / f"{previous.id}.toml"
    if table_path.exists():
        raise UsageError(f"release: {table_path} already exists")
    spec = _read_table(previous_table).get("spec", "")

    var = "v" + new_id[1:].replace(".", "")
    first = release[:2] if release[2] == 0 else release
    block = (
        f"    # DRAFT written by scripts/new-vllm-release.sh: {previous.id}'s rules, copied. Change the fields\n"
        f"    # {release_text} changes (docs/new-release.md), then replace the summary.\n"
        f"    {var} = _evolve(\n"
        f"        {previous.var}, \"{new_id}\", {first}, \"{release_text}\",\n"
        f"        \"DRAFT: the rules of {previous.id}, not yet checked against {release_text}\",\n"
        f"    )\n"
    )
    returned = _RETURN.search(source)
    names = returned[1].rstrip(", ")
    source = source[:returned.start()] + block + f"    return ({names}, {var})\n" + source[returned.end():]
    registry, registry_text = _with_row(root, release_text, new_id)

    sections = sorted(k for k, v in _merged_table(root, previous.id).items() if isinstance(v, dict))
    table = (
        f"# Era {new_id} (vLLM {release_text}). DRAFT written by scripts/new-vllm-release.sh: every table of\n"
        f"# {previous.id} applies as it is (extends). Where {release_text} changes a rule, add the section and the\n"
        f"# entry here with the vLLM source line it comes from (docs/new-release.md). Sections: {', '.join(sections)}.\n"
        f"era = \"{new_id}\"\n"
        f"extends = \"{previous.id}\"\n"
        f"spec = \"{spec}\"\n"
    )
    write_text_atomic(table_path, table)
    write_text_atomic(registry, registry_text)
    write_text_atomic(path, source)
    return new_id, [path, registry, table_path]


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"--root: cannot read {path} ({exc.strerror or exc}); is it a kvconform checkout?") from None


def _read_table(path: Path) -> dict:
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"--root: cannot read the decision table {path} ({exc})") from None


def _merged_table(root: Path, era: str) -> dict:
    """The era's table merged over the chain it extends (keys only matter here: which sections exist)."""
    own = _read_table(root / TABLES_DIR / f"{era}.toml")
    parent = own.get("extends")
    merged = dict(_merged_table(root, parent)) if parent else {}
    merged.update(own)
    return merged


def main(argv: list[str] | None = None) -> int:
    """Command line: write the draft era (or the registry row) and name the files."""
    from harness.cli import _Parser

    parser = _Parser(prog="python -m harness.release.draft_era",
                     description="Write the draft era of a new vLLM release (or only widen the range).")
    parser.add_argument("release", help="the new vLLM release, X.Y.Z")
    parser.add_argument("--root", default=".", help="the kvconform checkout to write into (default: .)")
    parser.add_argument("--range-only", action="store_true",
                        help="no rule changed: only the release's registry row (it joins the newest era)")
    try:
        args = parser.parse_args(argv)
        root = Path(args.root)
        if args.range_only:
            files = write_range_only(root, args.release)
            print(f"draft_era: {args.release} joins the newest era; changed {', '.join(map(str, files))}")
        else:
            era, files = write_draft_era(root, args.release)
            print(f"draft_era: draft era {era} for {args.release}; wrote {', '.join(map(str, files))}")
    except UsageError as exc:
        print(f"draft_era: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
