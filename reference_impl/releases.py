"""The release registry: the vLLM releases kvconform knows, one row each in `releases.toml`.

One home for what is said per release: its rule era, whether the vLLM CI job judges it, its dependency list and
torch pin (scripts/install-vllm.sh), its upstream-test floor (`harness.upstream`) and the CI steps it cannot run
yet; the known range of releases ends after the newest row's minor (`reference_impl.config.eras`); and where a
release's venv lives (`venv_dir`, scripts/install-vllm.sh's default, and the command that makes it). What an era
does is the eras' business (`reference_impl.config.eras` for config resolution, `reference_impl.kv_cache.release`
for the allocator); this module only places releases on the one axis, so that a floor that cannot import the
config package (the allocator's) still resolves a release to its era here.

The module needs nothing but the standard library, so that shell scripts on a clean machine read the registry
with any Python 3.11 (`python3 reference_impl/releases.py ci`); see `main` for the commands.
"""

from __future__ import annotations

import os
import re
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

__all__ = ["REGISTRY", "STEPS", "VERSION_RE", "Release", "RELEASES", "RELEASES_BY_VERSION", "RegistryError",
           "parse_version", "is_before", "within", "load", "row_for", "era_ids", "era_at_least", "profiles", "ci_releases",
           "oldest", "newest_exclusive", "upstream_default", "markdown_table", "VENV_ROOT_ENV", "venv_root", "venv_dir", "install_command",
           "install_hint", "main"]

REGISTRY = Path(__file__).with_name("releases.toml")
#: The steps of the vLLM CI job (.ci/vllm-job.sh) a known gap may name.
STEPS = ("matrix", "allocator", "upstream", "benchmarks", "connectors", "lmcache", "engine", "report")
_ROW_KEYS = {"era", "profile", "ci", "deps", "torch", "upstream_floor", "gaps"}
_RELEASE_RE = re.compile(r"^\d+\.\d+\.\d+$")
#: A version as `parse_version` reads it: X.Y or X.Y.Z, a leading "v", a local or dev suffix ignored.
VERSION_RE = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?(?:[.+-].*)?$")


class RegistryError(ValueError):
    """A registry row (or a release asked of it) that is not what the registry accepts; the text names it."""


def parse_version(text: str) -> tuple[int, int, int]:
    """'0.13.0' -> (0, 13, 0); accepts a leading 'v' and ignores local/dev suffixes such as '+cpu'."""
    match = VERSION_RE.match(text.strip()) if isinstance(text, str) else None
    if not match:
        raise ValueError(f"vllm_version: {text!r} is not a version; expected X.Y.Z such as 0.13.0")
    return int(match[1]), int(match[2]), int(match[3] or 0)


def version_order_key(text: str) -> list[int | str]:
    """A sort key for any dotted package version ('0.3.10' after '0.3.9'; a part that is not a number sorts by its
    text): the one home of ordering by parts, for vLLM releases and the optional packages' versions alike."""
    return [int(part) if part.isdigit() else part for part in text.split(".")]


Version = str | tuple[int, ...]


def _key(version: Version) -> tuple[int, int, int]:
    if isinstance(version, str):
        return parse_version(version)
    return tuple(version) + (0,) * (3 - len(version))  # type: ignore[return-value]


def is_before(version: Version, other: Version) -> bool:
    """Whether release `version` comes before `other` (each 'X.Y.Z' or a tuple (X, Y[, Z])).

    With `within`, the one place release numbers are ordered outside the era table: a behaviour that depends on
    the release asks its era (`reference_impl.config.eras`, `reference_impl.kv_cache.release`), never a number
    (tests/test_release_axis.py holds the rest of the tree to that)."""
    return _key(version) < _key(other)


def within(version: Version, first: Version, end: Version | None = None) -> bool:
    """Whether release `version` is `first` or later and before `end` (None: no end)."""
    return not is_before(version, first) and (end is None or is_before(version, end))


@dataclass(frozen=True)
class Release:
    """One row of the registry."""

    version: str
    era: str
    deps: str
    torch: str
    ci: bool = False
    profile: bool = False
    upstream_floor: float | None = None
    gaps: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def key(self) -> tuple[int, int, int]:
        """The release as (major, minor, patch), for ordering."""
        return parse_version(self.version)


def _row(version: str, raw: object, defaults: Mapping[str, object], where: str) -> Release:
    if not _RELEASE_RE.match(version):
        raise RegistryError(f"{where}: row {version!r} is not a release; expected X.Y.Z such as 0.34.0")
    if not isinstance(raw, dict):
        raise RegistryError(f"{where}: row {version!r} is not a table")
    unknown = sorted(set(raw) - _ROW_KEYS)
    if unknown:
        raise RegistryError(f"{where}: row {version!r}: unknown key {unknown[0]!r}; accepted: {', '.join(sorted(_ROW_KEYS))}")
    values = {**defaults, **raw}
    for name in ("era", "deps", "torch"):
        if not isinstance(values.get(name), str) or not values[name]:
            raise RegistryError(f"{where}: row {version!r}: {name} must be a non-empty string, got {values.get(name)!r}")
    for name in ("ci", "profile"):
        if not isinstance(values.get(name, False), bool):
            raise RegistryError(f"{where}: row {version!r}: {name} must be true or false, got {values[name]!r}")
    floor = values.get("upstream_floor")
    if floor is not None and (isinstance(floor, bool) or not isinstance(floor, (int, float)) or not 0 <= floor <= 1):
        raise RegistryError(f"{where}: row {version!r}: upstream_floor must be a share from 0 to 1, got {floor!r}")
    gaps = values.get("gaps", {})
    if not isinstance(gaps, dict):
        raise RegistryError(f"{where}: row {version!r}: gaps must be a table of step = reason")
    for step, reason in gaps.items():
        if step not in STEPS:
            raise RegistryError(f"{where}: row {version!r}: gaps: unknown step {step!r}; accepted: {', '.join(STEPS)}")
        if not isinstance(reason, str) or not reason.strip():
            raise RegistryError(f"{where}: row {version!r}: gaps.{step} must name what is missing")
    return Release(version=version, era=values["era"], deps=values["deps"], torch=values["torch"], ci=values.get("ci", False),
                   profile=values.get("profile", False),
                   upstream_floor=None if floor is None else float(floor), gaps=MappingProxyType(dict(gaps)))


def load(path: Path = REGISTRY) -> tuple[Release, ...]:
    """Every row of the registry at `path`, oldest first; RegistryError names a bad row and key."""
    with open(path, "rb") as handle:
        data = tomllib.load(handle)
    defaults = data.pop("defaults", {})
    rows = tuple(sorted((_row(version, raw, defaults, path.name) for version, raw in data.items()),
                        key=lambda row: row.key))
    if not rows:
        raise RegistryError(f"{path.name}: no release rows")
    seen: list[str] = []
    for row in rows:
        if row.era in seen and row.era != seen[-1]:
            raise RegistryError(f"{path.name}: row {row.version!r}: era {row.era!r} comes back after {seen[-1]!r}; "
                                "an era is one range of releases")
        if not seen or row.era != seen[-1]:
            seen.append(row.era)
    profiles = [row for row in rows if row.profile]
    for row in profiles:
        if sum(other.era == row.era for other in profiles) > 1:
            raise RegistryError(f"{path.name}: row {row.version!r}: era {row.era!r} has two profile rows; a profile "
                                "is named by its era")
    return rows


RELEASES: tuple[Release, ...] = load()
RELEASES_BY_VERSION: Mapping[str, Release] = MappingProxyType({row.version: row for row in RELEASES})


def row_for(version: str) -> Release:
    """The row of `version`, else of the newest release before it (its dependency list and torch hold until the
    next row); RegistryError for a release older than every row."""
    key = parse_version(version)
    chosen = None
    for row in RELEASES:
        if row.key <= key:
            chosen = row
    if chosen is None:
        raise RegistryError(f"vLLM {version} is older than every release of the registry (oldest: {RELEASES[0].version})")
    return chosen


def era_ids() -> tuple[str, ...]:
    """The eras of the registry's rows, oldest first."""
    return tuple(dict.fromkeys(row.era for row in RELEASES))


def era_at_least(era: str, first: str) -> bool:
    """Whether `era` is `first` or a later era (both ids of registry rows); ValueError naming an unknown one."""
    order = era_ids()
    for name in (era, first):
        if name not in order:
            raise ValueError(f"era {name!r} is not an era of the release registry; accepted: {', '.join(order)}")
    return order.index(era) >= order.index(first)


def profiles() -> dict[str, str]:
    """Profile name (its era's id) -> release, oldest first."""
    return {row.era: row.version for row in RELEASES if row.profile}


def ci_releases() -> list[str]:
    """The releases the vLLM CI job judges, newest first."""
    return [row.version for row in reversed(RELEASES) if row.ci]


def upstream_default() -> str:
    """The release vLLM's own tests run on when none is named (scripts/upstream-vllm-tests.sh,
    `harness.upstream.vllm_core_tests`): the newest row with an upstream floor."""
    return next(row.version for row in reversed(RELEASES) if row.upstream_floor is not None)


def oldest() -> tuple[int, int, int]:
    """The oldest release kvconform knows."""
    return RELEASES[0].key


def newest_exclusive() -> tuple[int, int, int]:
    """The first release kvconform does not know: the minor after the newest row's."""
    major, minor, _ = RELEASES[-1].key
    return major, minor + 1, 0


#: Names a folder of prebuilt venvs, ROOT/vllm-X.Y.Z, to use instead of the checkout's (the vLLM CI job's variable,
#: .ci/vllm-job.sh; scripts/install-vllm.sh installs there too when it is set).
VENV_ROOT_ENV = "KVCONFORM_CI_VLLM_VENV_ROOT"
_CHECKOUT = Path(__file__).resolve().parents[1]


def venv_root() -> Path:
    """The folder of the release venvs: $KVCONFORM_CI_VLLM_VENV_ROOT where set, else the checkout's .cache/venvs."""
    return Path(os.environ.get(VENV_ROOT_ENV) or _CHECKOUT / ".cache" / "venvs")


def venv_dir(version: str) -> Path:
    """Where release `version`'s venv is (scripts/install-vllm.sh's default folder for it)."""
    if not _RELEASE_RE.match(version):
        raise RegistryError(f"VERSION must look like 0.33.0, got {version!r}")
    return venv_root() / f"vllm-{version}"


def install_command(version: str) -> str:
    """The command, run in the checkout, that makes `venv_dir(version)`."""
    venv_dir(version)  # the same check of the release
    return f"scripts/install-vllm.sh {version}"


def install_hint(version: str | None = None) -> str:
    """How to get a vLLM to run kvconform with, for the messages and skip reasons that ask for one: the command that
    makes `version`'s venv and the venv's Python (by default the newest release the vLLM CI job judges, so that a
    new release row moves every hint), e.g. 'scripts/install-vllm.sh 0.34.0, then run with
    .cache/venvs/vllm-0.34.0/bin/python'."""
    release = version or (ci_releases() or [RELEASES[-1].version])[0]
    python = venv_dir(release) / "bin" / "python"
    if python.is_relative_to(_CHECKOUT):
        python = python.relative_to(_CHECKOUT)
    return f"{install_command(release)}, then run with {python}"


def markdown_table() -> str:
    """The registry as a Markdown table, newest release first (docs/releases.md holds it; a test compares)."""
    lines = ["| release | era | profile | CI | dependency list | torch | upstream floor | known gaps |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for row in reversed(RELEASES):
        gaps = ", ".join(f"`{step}`" for step in row.gaps) or "–"
        floor = "–" if row.upstream_floor is None else f"{row.upstream_floor:g}"
        lines.append(f"| {row.version} | {row.era} | {'yes' if row.profile else '–'} | {'yes' if row.ci else '–'} | "
                     f"`{row.deps}.txt` | {row.torch} | "
                     f"{floor} | {gaps} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Commands for shell scripts; exit 2 with one line on a bad release or command.

      ci                      the CI job's releases, newest first, one a line
      gaps                    the CI job's known gaps, one `release:step<TAB>reason` a line
      install VERSION         `deps torch` for installing VERSION (scripts/install-vllm.sh)
      newer VERSION OTHER     exit 0 when VERSION is a later release than OTHER, else 1
      table                   the registry as the Markdown table of docs/releases.md
      upstream-default        the release vLLM's own tests run on when none is named (`upstream_default`)
      venv VERSION            the folder of VERSION's venv (`venv_dir`: scripts/install-vllm.sh's default)
    """
    args = sys.argv[1:] if argv is None else argv
    try:
        if args == ["ci"]:
            print("\n".join(ci_releases()))
        elif args == ["gaps"]:
            for row in reversed(RELEASES):
                for step, reason in row.gaps.items():
                    print(f"{row.version}:{step}\t{reason}")
        elif len(args) == 2 and args[0] == "install":
            if not _RELEASE_RE.match(args[1]):
                raise RegistryError(f"VERSION must look like 0.33.0, got {args[1]!r}")
            row = row_for(args[1])
            print(row.deps, row.torch)
        elif args == ["table"]:
            print(markdown_table(), end="")
        elif args == ["upstream-default"]:
            print(upstream_default())
        elif len(args) == 2 and args[0] == "venv":
            print(venv_dir(args[1]))
        elif len(args) == 3 and args[0] == "newer":
            return 0 if is_before(args[2], args[1]) else 1
        else:
            print("usage: releases.py ci | gaps | install VERSION | newer VERSION OTHER | table | upstream-default | venv VERSION", file=sys.stderr)
            return 2
    except (RegistryError, ValueError) as exc:
        print(f"releases: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
