"""The draft-era writer on a copy of this checkout's era declarations and decision tables.

The written `eras.py` is imported as a module of its own and its new era compared field by field with the era
it evolves, and the written table is merged by the suite's own table loader: what the draft declares is read
back by the code that will use it, not by the writer.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

import suites.config.tables as tables_module
from harness.errors import UsageError
from harness.release.draft_era import (ERAS_FILE, RELEASES_FILE, TABLES_DIR, era_id_for, main, write_draft_era,
                                      write_range_only)
from reference_impl import releases as real_releases
from reference_impl.config import eras as real_eras

CHECKOUT = Path(__file__).resolve().parents[2]
NEWEST = real_eras.ERAS[-1]
# A release two minors past the newest era: new to the tree whatever era lands next.
NEXT = f"{NEWEST.first_version[0]}.{NEWEST.first_version[1] + 2}.0"
NEXT_ID = f"v{NEWEST.first_version[0]}.{NEWEST.first_version[1] + 2}"


@pytest.fixture
def tree(tmp_path):
    (tmp_path / ERAS_FILE).parent.mkdir(parents=True)
    shutil.copy(CHECKOUT / ERAS_FILE, tmp_path / ERAS_FILE)
    shutil.copy(CHECKOUT / RELEASES_FILE, tmp_path / RELEASES_FILE)
    shutil.copytree(CHECKOUT / TABLES_DIR, tmp_path / TABLES_DIR)
    return tmp_path


def _load_eras(tree: Path, name: str):
    """The tree's eras.py as a module of its own (registered while it runs: its dataclasses look it up), over
    the tree's release registry."""
    spec = importlib.util.spec_from_file_location(name, tree / ERAS_FILE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(real_releases, "RELEASES", real_releases.load(tree / RELEASES_FILE))
        try:
            spec.loader.exec_module(module)
        finally:
            del sys.modules[name]
    return module


def test_draft_era_copies_the_newest_era_and_covers_the_release(tree):
    era_id, files = write_draft_era(tree, NEXT)
    assert era_id == NEXT_ID and files == [tree / ERAS_FILE, tree / RELEASES_FILE, tree / TABLES_DIR / f"{NEXT_ID}.toml"]
    drafted = _load_eras(tree, "drafted_eras")
    assert [e.id for e in drafted.ERAS] == [e.id for e in real_eras.ERAS] + [NEXT_ID]
    new, previous = drafted.ERAS[-1], drafted.ERAS[-2]
    assert new.first_version == NEWEST.first_version[:1] + (NEWEST.first_version[1] + 2,)
    assert new.representative == NEXT and new.summary.startswith("DRAFT")
    # every rule field is the previous era's (its section of docs/rules.md is its own prose: none yet)
    assert new.rules_section is None
    for field in dataclasses.fields(new):
        if field.name not in ("id", "first_version", "representative", "summary", "rules_section"):
            assert getattr(new, field.name) == getattr(previous, field.name), field.name
    assert drafted.era_for_version(NEXT).id == NEXT_ID
    assert real_releases.load(tree / RELEASES_FILE)[-1].era == NEXT_ID
    assert drafted.era_for_version(NEXT.rsplit(".", 1)[0] + ".7").id == NEXT_ID  # its patch releases too
    with pytest.raises(ValueError, match="outside the releases"):
        drafted.era_for_version(f"{NEWEST.first_version[0]}.{NEWEST.first_version[1] + 3}.0")


def test_draft_table_extends_the_newest_era_and_merges_to_the_same_rules(tree, monkeypatch):
    write_draft_era(tree, NEXT)
    monkeypatch.setattr(tables_module, "TABLES_DIR", tree / TABLES_DIR)
    tables_module.era_table.cache_clear()
    try:
        drafted, previous = tables_module.era_table(NEXT_ID), tables_module.era_table(NEWEST.id)
    finally:
        tables_module.era_table.cache_clear()
    assert drafted.pop("era") == NEXT_ID and previous.pop("era") == NEWEST.id
    assert drafted == previous


def test_range_only_writes_one_registry_row(tree):
    eras_before = (tree / ERAS_FILE).read_text()
    before = (tree / RELEASES_FILE).read_text()
    assert write_range_only(tree, NEXT) == [tree / RELEASES_FILE]
    after = (tree / RELEASES_FILE).read_text()
    newest_deps = real_releases.RELEASES[-1].deps
    assert after == before.rstrip("\n") + f'\n\n["{NEXT}"]\nera = "{NEWEST.id}"\ndeps = "{newest_deps}"\n'
    assert (tree / ERAS_FILE).read_text() == eras_before
    row = real_releases.load(tree / RELEASES_FILE)[-1]
    assert (row.version, row.ci, row.upstream_floor, dict(row.gaps)) == (NEXT, False, None, {})
    widened = _load_eras(tree, "widened_eras")
    assert widened.era_for_version(NEXT).id == NEWEST.id
    assert widened.known_range().endswith(f" to {NEXT.rsplit('.', 1)[0]}.x")
    assert [e.id for e in widened.ERAS] == [e.id for e in real_eras.ERAS]
    with pytest.raises(UsageError, match=f"release: {NEXT} already has a row in reference_impl/releases.toml"):
        write_range_only(tree, NEXT)


@pytest.mark.parametrize("call,message", [
    (lambda t: write_draft_era(t, "0.35"), "release: '0.35' is not a vLLM release; expected X.Y.Z"),
    (lambda t: write_draft_era(t, NEWEST.representative), "is not newer than the newest era"),
    (lambda t: write_range_only(t, "0.9.0"), "is older than the newest era"),
    (lambda t: write_draft_era(t / "elsewhere", NEXT), "cannot read"),
])
def test_refusals_are_one_line(tree, call, message):
    with pytest.raises(UsageError) as info:
        call(tree)
    assert message in str(info.value) and "\n" not in str(info.value) and info.value.exit_code == 2


def test_a_second_draft_of_the_same_release_is_refused(tree):
    write_draft_era(tree, NEXT)
    with pytest.raises(UsageError, match=f"is not newer than the newest era {NEXT_ID}"):
        write_draft_era(tree, NEXT)


def test_command_line(tree, capsys):
    assert main([NEXT, "--root", str(tree)]) == 0
    assert f"draft era {NEXT_ID} for {NEXT}" in capsys.readouterr().out
    assert main(["banana", "--root", str(tree)]) == 2
    assert capsys.readouterr().err == "draft_era: release: 'banana' is not a vLLM release; expected X.Y.Z such as 0.35.0\n"
    assert main([NEXT, "--bogus"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
