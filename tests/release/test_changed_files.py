"""The HMA-path lister on fake installed trees: which files it reports, and how.

The trees are written here, so what changed is known by construction (the oracle), not computed by the lister.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.errors import UsageError
from harness.release.changed_files import FileChange, changed_files, load_patterns, main, render, vllm_package_dir

PARTS = {"config": ["config/vllm.py"], "allocator": ["v1/core/*.py"], "connectors": ["kv/v1/**/*.py"]}


def _tree(root: Path, files: dict[str, str]) -> Path:
    package = root / "lib" / "python3.11" / "site-packages" / "vllm"
    for rel, text in {"__init__.py": "", **files}.items():
        (package / rel).parent.mkdir(parents=True, exist_ok=True)
        (package / rel).write_text(text)
    return package


@pytest.fixture
def trees(tmp_path):
    old = _tree(tmp_path / "old", {
        "config/vllm.py": "a\nb\nc\n",
        "v1/core/block_pool.py": "same\n",
        "v1/core/gone.py": "x\n",
        "kv/v1/nixl/worker.py": "one\ntwo\n",
        "unlisted.py": "before\n",
    })
    new = _tree(tmp_path / "new", {
        "config/vllm.py": "a\nB\nc\nd\n",          # one line changed (+1 -1), one added (+1)
        "v1/core/block_pool.py": "same\n",
        "kv/v1/nixl/worker.py": "one\ntwo\n",
        "kv/v1/mooncake/store/lease.py": "new\n",  # a new file two folders down
        "unlisted.py": "after\n",                  # not on the HMA path
    })
    return old, new


def test_lists_added_removed_and_changed_files_by_part(trees):
    old, new = trees
    assert changed_files(old, new, PARTS) == [
        FileChange("config", "config/vllm.py", "changed", added=2, removed=1),
        FileChange("allocator", "v1/core/gone.py", "removed"),
        FileChange("connectors", "kv/v1/mooncake/store/lease.py", "added"),
    ]


def test_identical_trees_change_nothing(trees):
    old, _ = trees
    assert changed_files(old, old, PARTS) == []
    assert render([], "0.33.0", "0.34.0") == "HMA-path files: none changed from 0.33.0 to 0.34.0"


def test_venv_or_package_folder(trees, tmp_path):
    old, _ = trees
    assert vllm_package_dir(str(tmp_path / "old")) == old
    assert vllm_package_dir(str(old)) == old
    with pytest.raises(UsageError, match="not a vllm package folder"):
        vllm_package_dir(str(tmp_path))


def test_command_line_prints_by_part_and_exits_1_on_changes(trees, tmp_path, capsys):
    listed = tmp_path / "files.toml"
    listed.write_text("".join(f"[{part}]\nfiles = {patterns!r}\n".replace("'", '"') for part, patterns in PARTS.items()))
    assert main([str(tmp_path / "old"), str(tmp_path / "new"), "--files", str(listed),
                 "--old-label", "0.33.0", "--new-label", "0.34.0"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "HMA-path files changed from 0.33.0 to 0.34.0: 3"
    assert "config (1):" in out and "  config/vllm.py: +2 -1 lines" in out
    assert "  kv/v1/mooncake/store/lease.py: added" in out


def test_command_line_bad_folder_is_one_line_exit_2(tmp_path, capsys):
    assert main([str(tmp_path / "nowhere"), str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a vllm package folder" in err


def test_the_shipped_list_names_the_three_parts():
    parts = load_patterns()
    assert set(parts) == {"config", "allocator", "connectors"}
    assert "config/vllm.py" in parts["config"] and "v1/core/*.py" in parts["allocator"]


def test_a_malformed_list_is_refused(tmp_path):
    bad = tmp_path / "files.toml"
    bad.write_text("[config]\nfiles = 'config/vllm.py'\n")
    with pytest.raises(UsageError, match=r"\[config\] needs files"):
        load_patterns(bad)
