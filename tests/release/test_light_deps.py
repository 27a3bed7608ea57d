"""The light dependency lists of scripts/install-vllm.sh: each names a package once (pip refuses two pins of
one package, and a merge of two branches that each added one left the 0.13 list uninstallable)."""

import re
from pathlib import Path

import pytest

DEPS_DIR = Path(__file__).resolve().parents[2] / "scripts" / "vllm-light-deps"


def _package(line: str) -> str:
    """The normalised project name of a requirement line ('Foo_Bar==1.0 --no-deps' -> 'foo-bar')."""
    name = re.split(r"[\s=<>!~\[;]", line.strip(), maxsplit=1)[0]
    return re.sub(r"[-_.]+", "-", name).lower()


@pytest.mark.parametrize("deps_file", sorted(DEPS_DIR.glob("*.txt")), ids=lambda p: p.name)
def test_each_package_is_pinned_once(deps_file):
    lines = [ln for ln in deps_file.read_text().splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    names = [_package(ln) for ln in lines]
    twice = sorted({n for n in names if names.count(n) > 1})
    assert not twice, f"{deps_file.name} pins {twice} more than once; pip cannot install both pins"
    assert all("==" in ln for ln in lines), f"{deps_file.name}: every line is an exact pin ('name==version')"
