"""The config matrix's machinery: the all-pairs cover, cell ids, era selection, and golden snapshots end to end."""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.eras import ERA_IDS, EraSelectionError, era_for_version, select_eras
from harness.golden import GoldenStore, read_golden, render_golden
from reference_impl.vocabulary import FLAGS, MATRIX_STAGES, PLATFORMS
from suites.config.matrix import (ALONE_CONNECTORS, ALONE_FEATURE_IDS, FEATURES, features_for, all_pairs, cells_for, connectors_for, matrix,
                                  unregistered_for)
from suites.config.options import declared_alone

REPO = Path(__file__).resolve().parents[1]


def test_all_pairs_covers_every_pair():
    dims = [("a", "b", "c"), ("x", "y"), ("1", "2", "3", "4"), ("p", "q")]
    rows = all_pairs(dims)
    for i, j in itertools.combinations(range(len(dims)), 2):
        seen = {(row[i], row[j]) for row in rows}
        missing = set(itertools.product(dims[i], dims[j])) - seen
        assert not missing, f"all_pairs left pairs of dimensions {i} and {j} uncovered: {sorted(missing)}"
    assert len(rows) < len(list(itertools.product(*dims))), "all_pairs should need fewer rows than the full product"
    assert rows == all_pairs(dims), "all_pairs must be deterministic (xdist workers collect the same cells)"


def test_cells_have_unique_readable_ids():
    cells = matrix()
    ids = [cell.id for cell in cells]
    assert len(ids) == len(set(ids)), "cell ids must be unique"
    assert "seed-F-cuda-kv_events-noconn" in ids and "v0.33-N-cuda-none-LMCacheMPConnector-create" in ids
    assert {cell.era for cell in cells} == set(ERA_IDS), "every era has cells"


@pytest.mark.parametrize("era", ["seed", "v0.33", "v0.34"])
def test_every_connector_and_feature_pair_is_covered(era):
    """Every pair, except the values that give one option alone (issue 36): those stay out of the all-pairs cover."""
    cells = [cell for cell in cells_for(era) if cell.connector not in unregistered_for(era)
             and cell.connector not in ALONE_CONNECTORS and cell.features not in ALONE_FEATURE_IDS]
    pairs = {(cell.connector, cell.features) for cell in cells}
    connectors = {cell.connector for cell in cells}
    features = {cell.features for cell in cells}
    assert pairs == set(itertools.product(connectors, features)), f"{era}: some connector x feature pair has no cell"


@pytest.mark.parametrize("era", ERA_IDS)
def test_rows_without_a_connector_or_without_features_are_complete(era):
    """The report's main table has no gaps: both blocks are full products over flag x platform x stage."""
    cells = cells_for(era)
    ran = {(cell.flag, cell.platform, cell.features, cell.connector, cell.stage) for cell in cells}
    connectors = list(connectors_for(era)) + list(unregistered_for(era))
    for flag, platform, stage in itertools.product(FLAGS, PLATFORMS, MATRIX_STAGES):
        missing = [f for f in features_for(era) if (flag, platform, f, "noconn", stage) not in ran]
        missing += [c for c in connectors if (flag, platform, "none", c, stage) not in ran]
        assert not missing, f"{era}-{flag}-{platform} ({stage}): no cell for {missing}"


# Hand-checked: flag 3 x platform 6 x stage 2 = 36 settings; 9 features without a connector (324 cells),
# each other connector without features (36 per connector), and all-pairs puts each connector x feature
# pair (besides "none"/"noconn") in exactly one row: 17 x 8 = 136 in seed (18 connector values),
# 31 x 8 = 248 in v0.33 (32 values). Names the era does not register but a neighbouring era does, and
# FooConnector (seed: MoRIIOConnector, which v0.14 registers from 0.14.0, and FooConnector; v0.33: P2pNcclConnector, which
# v0.30 registers, UMBPStoreConnector, which v0.34 registers, and FooConnector) add 36 cells each, without
# features. A sampled row at stage config also runs at create_connector (one more cell).
# Issue 36 added the values that give one option alone, in the first two blocks only (not in the pairs): EAGLE
# alone, the offloading size alone and the backend alone (from 0.11.1), the size with VLLM_USE_SIMPLE_KV_OFFLOAD=1
# (from 0.19), VLLM_USE_V1=0 (every era: read before 0.11.1), and NoRole, a connector without kv_role: seed 13
# features (468) and 19 connectors; v0.33 14 features (504) and 33 connectors; v0.34 17 features (612) and 42
# connectors. The counts below add them.
# v0.34: 12 features (the 9 + two custom speculative methods + EAGLE with lmcache offloading): 12 x 36 = 432
# without a connector; 41 connector values (v0.33's 32, UMBPStoreConnector, NixlPush, NixlBadMode,
# MultiNixlBadMode, MultiBadGrandchild, HiSparsePool, HiSparseZeroPool, MultiHiSparsePool, MultiTwoHiSparse),
# 40 x 11 = 440 pairs; unregistered: P2pNcclConnector (removed at 0.33, so it stays in every later era's
# matrix) and FooConnector.
@pytest.mark.parametrize(("era", "connectors", "features", "alone", "unregistered", "cells"), [
    ("seed", 19, 13, 4, 3, 468 + 18 * 36 + 136 + 3 * 36),  # 1360 (SharedStorageConnector: registered before 0.13)
    ("v0.33", 33, 14, 5, 4, 504 + 32 * 36 + 248 + 4 * 36),  # 2048 (UMBPStoreConnector: v0.34 registers it)
    ("v0.34", 42, 17, 5, 3, 612 + 41 * 36 + 440 + 3 * 36),  # 2636
])
def test_cell_counts(era, connectors, features, alone, unregistered, cells):
    # Reviewed counts of the features declared in the matrix; a case key's record adds a feature that sets it alone
    # (`options.declared_alone`), each one full product of flags x platforms x stages more.
    declared = len(declared_alone(era))
    features, alone = features + declared, alone + declared
    cells += declared * len(FLAGS) * len(PLATFORMS) * len(MATRIX_STAGES)
    assert len(connectors_for(era)) == connectors, f"{era}: connector values"
    assert len(features_for(era)) == features, f"{era}: feature values"
    assert len(set(features_for(era)) & ALONE_FEATURE_IDS) == alone, f"{era}: options alone"
    assert len(unregistered_for(era)) == unregistered and "FooConnector" in unregistered_for(era)
    era_cells = cells_for(era)
    interactions = [c for c in era_cells if c.connector != "noconn" and c.features != "none"]
    pairs = {(c.connector, c.features) for c in interactions}
    assert len(pairs) == (connectors - 1 - len(ALONE_CONNECTORS)) * (features - 1 - alone), f"{era}: every connector x feature"
    answered = {(c.connector, c.features, c.flag, c.platform) for c in interactions if c.stage == "create"}
    assert {(c.connector, c.features, c.flag, c.platform) for c in interactions} == answered, (
        f"{era}: every sampled connector + feature cell runs to create_connector")
    sampled_at_config = sum(1 for c in interactions if c.stage == "config")
    assert len(era_cells) == cells + sampled_at_config, f"{era}: cell count (plus the config-stage twins)"


def test_era_selection():
    assert select_eras(None) == ERA_IDS
    assert select_eras("seed") == ("seed",) and select_eras("0.12.0") == ("pre-seed",)
    assert era_for_version("0.11.1") == "pre-seed" and era_for_version("0.29.3") == "v0.25" and era_for_version("0.24.1") == "v0.24"
    assert select_eras("0.34.0") == ("v0.34",) and select_eras("v0.34") == ("v0.34",)
    for bad in ("0.35.0", "0.9.0", "latest"):
        with pytest.raises(EraSelectionError, match="--vllm-version"):
            select_eras(bad)


def test_golden_store_keeps_deselected_and_drops_undeclared(tmp_path):
    path = tmp_path / "era.txt"
    path.write_text(render_golden({"a": "on", "b": "off", "gone": "on"}, "header"))
    store = GoldenStore()
    store.declare(path, ["a", "b", "c"], "header line")
    store.record(path, "a", "off")
    store.record(path, "c", "unknown")
    other = GoldenStore()
    other.merge_wire(store.to_wire())
    assert other.write_updates() == [path]
    assert read_golden(path) == {"a": "off", "b": "off", "c": "unknown"}
    assert path.read_text().startswith("# header line\n")


def _run_matrix(golden_dir: Path, *args: str, xdist: bool) -> subprocess.CompletedProcess:
    env = {**os.environ, "KVCONFORM_GOLDEN_DIR": str(golden_dir)}
    env.pop("KVCONFORM_TARGET", None)
    command = [sys.executable, "-m", "pytest", str(REPO / "suites" / "config"), "-p", "no:cacheprovider",
               "-p", "no:randomly", *(("-n", "2") if xdist else ("-p", "no:xdist")), "-q", "--vllm-version", "v0.10",
               *args]
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


def test_golden_update_then_a_changed_cell_fails_by_name(tmp_path):
    golden_dir = tmp_path / "golden"
    shutil.copytree(REPO / "suites" / "config" / "golden", golden_dir)
    (golden_dir / "v0.10.txt").unlink()
    # Under xdist: the workers' golden records reach the controller, which writes the file.
    update = _run_matrix(golden_dir, "--update-golden", xdist=True)
    assert (golden_dir / "v0.10.txt").is_file(), f"--update-golden should write v0.10.txt:\n{update.stdout[-2000:]}"
    assert read_golden(golden_dir / "v0.10.txt") == read_golden(REPO / "suites" / "config" / "golden" / "v0.10.txt"), (
        "rewriting the golden file from the reference should reproduce the committed one"
    )
    entries = read_golden(golden_dir / "v0.10.txt")
    cell = "v0.10-N-cpu-none-noconn"
    entries[cell] = "on" if entries[cell] != "on" else "off"
    (golden_dir / "v0.10.txt").write_text(render_golden(entries, "edited"))
    check = _run_matrix(golden_dir, xdist=False)  # the comparison is per cell: no xdist needed to see it
    assert check.returncode == 1, f"a changed golden line must fail the run:\n{check.stdout[-2000:]}"
    grouped = [line for line in check.stdout.splitlines() if "golden v0.10.txt changed" in line]
    assert len(grouped) == 1 and grouped[0].endswith(cell), (
        f"the console's grouped line names the changed golden file and the cell:\n{check.stdout[-2000:]}")
