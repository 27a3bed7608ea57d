"""One release axis: no version-number comparison outside the release registry and the era code.

A behaviour that depends on the vLLM release asks the release's era (`reference_impl/config/eras.py` for config
resolution, `reference_impl/kv_cache/release.py` names the allocator's by era), and a release is placed on the
axis by the registry (`reference_impl/releases.py`: `is_before`, `within`, `era_at_least`). This test reads the
tracked sources of the product, the suites and the scripts (`git ls-files`; tests/ compare outcomes with
expected versions, which is not a decision) and fails on the usual spellings of a comparison by number: an
ordering of a version tuple literal, an ordering or equality with a version string literal, and an ordering of
a name that holds a version or release (`parse_version(...)`, `first_version`, `NEWEST_EXCLUSIVE`, `fixed_in`,
`*version*`, `*release*`, ...). A new comparison belongs in the era table or the registry, or asks one of them.
Nor is a release written down as a default (an option's `default="0.33.0"`, `${VAR:-0.33.0}` in a script, an
`os.environ.get(NAME, "0.33.0")`, an install hint's `scripts/install-vllm.sh 0.33.0`): which release a command runs
or suggests when none is named is the registry's to say (`reference_impl.releases.upstream_default`, `ci_releases`,
`install_hint`), so that a new release row moves it; the tests' skip reasons too (`tests.vllm_venvs.needs_vllm`).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
#: The homes of the release axis, where releases are ordered.
ALLOWED = {"reference_impl/releases.py", "reference_impl/config/eras.py", "harness/eras.py"}
SCOPES = ("harness", "reference_impl", "suites", "scripts", ".ci")

_ORDER = r"(?<![-=<>])(?:<=|>=|<|>)(?![>=])"
_NAMES = (r"(?:parse_version|parse_release|first_version|NEWEST_EXCLUSIVE|OLDEST|ERA_FIRST_VERSIONS|__version__|"
          r"version_info|first_affected|fixed_in|hma_from|registered_from|removed_from|installed_is_unknown_from|"
          r"era_start|minor|major|\w*version\w*|\w*release\w*)")
PATTERNS = {
    "a version tuple ordered": re.compile(rf"{_ORDER}\s*\(\s*[01]\s*,\s*\d+|\(\s*[01]\s*,\s*\d+(?:\s*,\s*\d+)?\s*\)\s*{_ORDER}"),
    "a version string compared": re.compile(
        rf"(?:{_ORDER}|==|!=)\s*[\"']v?\d+\.\d+(?:\.\d+)?[\"']|[\"']v?\d+\.\d+(?:\.\d+)?[\"']\s*(?:{_ORDER}|==|!=)"),
    "a version ordered by its parts": re.compile(
        r"\bint\(\s*(\w+)\s*\)\s+if\s+\1\.isdigit\(\).*(?:split\(\s*[\"']\.[\"']|\[\.\])"
        r"|map\(\s*int\s*,\s*\w+\.split\(\s*[\"']\.[\"']"),
    "a version or release ordered": re.compile(
        rf"\b{_NAMES}\b(?:\([^()]*\)|\[[^\]]*\])?\s*{_ORDER}|{_ORDER}\s*(?:\w+\()?(?:\w+\.)*{_NAMES}\b"),
}
#: A release literal as the value a command takes when none is given.
DEFAULTS = {
    "a release as a default": re.compile(
        r"""(?:\bdefault\s*=\s*|\.get\([^()]*,\s*|\bor\s+)["']v?\d+\.\d+(?:\.\d+)?["']"""
        r"""|\$\{\w+:[-=]["']?v?\d+\.\d+(?:\.\d+)?["']?\}"""),
    "a release as the install hint": re.compile(r"install-vllm\.sh\s+v?\d+\.\d+\.\d+"),
}
#: A test's skip reason that names a release to install (a reason may name the release a test is about, not the
#: one to install: the registry's install hint says that).
SKIP_REASONS = {
    "a release in a skip reason's install hint": re.compile(
        r"""(?:\breason\s*=|\bskip\(|\bimportorskip\().*install-vllm\.sh\s+v?\d+\.\d+\.\d+"""),
}
# Not comparisons: `<release>` placeholders in prose and paths, a count of versions.
_NOT_CODE = re.compile(r"<[\w-]+>|len\([^()]*\)")


def _code(path: str, line: str) -> str:
    stripped = line.lstrip()
    if stripped.startswith("#"):
        return ""
    return _NOT_CODE.sub("", line.split(" # ")[0] if path.endswith(".py") else line)


def comparisons(paths: list[str], patterns: dict[str, re.Pattern] = PATTERNS) -> list[str]:
    """`path:line: what: text` for each line of `paths` (relative to the checkout) that compares releases by number
    (or, given DEFAULTS, that writes a release down as a default)."""
    found = []
    for path in paths:
        try:
            lines = (REPO / path).read_text(encoding="utf-8").splitlines()
        except (UnicodeDecodeError, OSError):
            continue
        for number, line in enumerate(lines, 1):
            code = _code(path, line)
            for what, pattern in patterns.items():
                if pattern.search(code):
                    found.append(f"{path}:{number}: {what}: {line.strip()}")
    return found


needs_checkout = pytest.mark.skipif(shutil.which("git") is None or not (REPO / ".git").exists(),
                                    reason="needs git and a checkout (the sources are listed with git ls-files)")


def _sources() -> list[str]:
    listed = subprocess.run(["git", "ls-files", "--", *SCOPES], cwd=REPO, capture_output=True, text=True, check=True)
    paths = [p for p in listed.stdout.splitlines()
             if p not in ALLOWED and (p.endswith((".py", ".sh")) or p.startswith(".ci/"))]
    assert len(paths) > 100, "git ls-files listed too few sources to judge"
    return paths


@needs_checkout
def test_no_release_comparison_outside_the_registry_and_the_eras():
    found = comparisons(_sources())
    assert not found, ("releases compared by number outside the release registry and the era code (ask the era, "
                       "or reference_impl.releases.is_before/within):\n" + "\n".join(found))


@pytest.mark.parametrize("line", [
    "    if allocator_release() < (0, 34):",
    "        self._reserves_import_pages = allocator_release() >= (0, 34)",
    '        if release == "0.33":',
    "    if parse_version(first) > parse_version(last):",
    "        return self.first_affected <= version and (self.fixed_in is None or version < self.fixed_in)",
    "    if era.first_version >= needed.installed_is_unknown_from:",
    "    if (( m <= minor )); then deps_file=$DEPS_DIR/$f; fi",
    "    inside = [version_text(era_start(era)) for era in ERAS if low < era_start(era) < high]",
    '    for run in sorted(upstream, key=lambda r: [int(p) if p.isdigit() else p for p in r["vllm_version"].split(".")]):',
    '        newest = max(versions, key=lambda v: tuple(map(int, v.split("."))))',
    '    return [int(part) if part.isdigit() else part for part in re.split(r"[.]", release)]',
    '        key = tuple(map(int, release.split(".")))',
])
def test_the_spellings_it_finds(tmp_path, line, monkeypatch):
    # each line is one this checkout had before the release axis
    monkeypatch.setattr(f"{__name__}.REPO", tmp_path)
    (tmp_path / "x.py").write_text(line + "\n")
    assert comparisons(["x.py"])


@pytest.mark.parametrize("line", [
    "    if len(versions) > 1 and not allow_mixed:",
    "    `vllm-<release>:<Name>` connector entries",
    "    return is_before(release, eras[-1].first_version)",
    "    # before 0.34 the map held blocks (a comment)",
    '        self.layer_order = sorted(self.layer_group, key=lambda n: int(n.split(".")[2]))',
    "    for run in sorted(upstream, key=lambda r: version_order_key(r[\"vllm_version\"])):",
    "    return [int(part) if part.isdigit() else part for part in _DIGITS.split(text)]  # natural order of names",
])
def test_what_it_leaves_alone(tmp_path, line, monkeypatch):
    monkeypatch.setattr(f"{__name__}.REPO", tmp_path)
    (tmp_path / "x.py").write_text(line + "\n")
    assert not comparisons(["x.py"])


@needs_checkout
def test_no_release_as_a_default_outside_the_registry():
    found = comparisons(_sources(), DEFAULTS)
    assert not found, ("a release written down as a default outside the release registry (ask it: "
                       "reference_impl.releases.upstream_default, ci_releases, ...):\n" + "\n".join(found))


@pytest.mark.parametrize("line", [
    '    parser.add_argument("--vllm-version", default="0.33.0")',
    "VLLM_VERSION=${KVCONFORM_CI_VLLM_VERSION:-0.33.0}",
    '    release = os.environ.get("KVCONFORM_RELEASE", "0.34.0")',
    '    era = args.era or "v0.33"',
])
def test_the_defaults_it_finds(tmp_path, line, monkeypatch):
    # the first two are lines this checkout had
    monkeypatch.setattr(f"{__name__}.REPO", tmp_path)
    (tmp_path / "x.py").write_text(line + "\n")
    assert comparisons(["x.py"], DEFAULTS)


@pytest.mark.parametrize("line", [
    '    group.addoption("--kv-connector-timeout", default=60.0)',
    "    seconds = float(entry.get(\"duration\") or 0.0)",
    '    help="only this vLLM release or rule era (a version, an era id, v0.33 or v0.34)"',
    '    parser.add_argument("--vllm-version", default=upstream_default())',
])
def test_the_defaults_it_leaves_alone(tmp_path, line, monkeypatch):
    monkeypatch.setattr(f"{__name__}.REPO", tmp_path)
    (tmp_path / "x.py").write_text(line + "\n")
    assert not comparisons(["x.py"], DEFAULTS)


@pytest.mark.parametrize("line", [
    'INSTALL_HINT = "install one with: scripts/install-vllm.sh 0.33.0 (then run with .cache/venvs/vllm-0.33.0/bin/python)"',
    '    echo "install one with scripts/install-vllm.sh 0.34.0" >&2',
])
def test_the_install_hints_it_finds(tmp_path, line, monkeypatch):
    # the first is a line this checkout had
    monkeypatch.setattr(f"{__name__}.REPO", tmp_path)
    (tmp_path / "x.py").write_text(line + "\n")
    assert comparisons(["x.py"], DEFAULTS)


@needs_checkout
def test_no_release_in_a_test_skip_reason():
    listed = subprocess.run(["git", "ls-files", "--", "tests", "conftest.py"], cwd=REPO, capture_output=True, text=True,
                            check=True)
    paths = [p for p in listed.stdout.splitlines() if p.endswith(".py") and p != "tests/test_release_axis.py"]
    assert len(paths) > 100, "git ls-files listed too few tests to judge"
    found = comparisons(paths, SKIP_REASONS)
    assert not found, ("a skip reason names a release to install (use tests.vllm_venvs.needs_vllm, the registry's "
                       "install hint):\n" + "\n".join(found))


@pytest.mark.parametrize("line,found", [
    # lines this checkout had
    ('    pytest.importorskip("vllm.v1.kv_offload.cpu.spec", reason="needs vLLM (scripts/install-vllm.sh 0.27.0)")', True),
    ('needs_vllm = pytest.mark.skipif(not HAS_VLLM, reason="needs vLLM (scripts/install-vllm.sh 0.33.0, then run with its "',
     True),
    # an expected message about an installed release, and the helper
    ('        "import (missing package \'x\'); reinstall it with: scripts/install-vllm.sh 0.33.0"', False),
    ('needs_vllm = pytest.mark.skipif(not HAS_VLLM, reason=needs_vllm_reason())', False),
])
def test_the_skip_reasons_it_finds(tmp_path, line, found, monkeypatch):
    monkeypatch.setattr(f"{__name__}.REPO", tmp_path)
    (tmp_path / "x.py").write_text(line + "\n")
    assert bool(comparisons(["x.py"], SKIP_REASONS)) is found
