"""The connector suite catches each deliberately buggy connector with the check named for its bug, and
turns unusable connectors into clear failures while the run goes on (one suite run for all of them)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

CAUGHT = [
    ("BlockIdsZeroConnector", "test_c17_layer_group_routing"),
    ("NullBlockWriterConnector", "test_c15_null_block_untouched"),
    ("FullAttentionHitConnector", "test_c07_hit_min_over_groups"),
    ("OutOfWindowStoreConnector", "test_c24_swa_reuse_race"),
    ("PerBlockLoadErrorConnector", "test_c22_failure_by_request"),
    ("ScratchServingConnector", "test_c03_group_discovery_scratch"),
    ("NoneAsZeroConnector", "test_c05_lookup_none_then_value"),
    ("KernelRatioIgnoringConnector", "test_c18_kernel_block_ratio"),
]
UNUSABLE = [
    ("RaisingConnector", "build_connector_meta"),
    ("HangingConnector", "hung past"),
    ("OldConstructorConnector", "kv_cache_config"),
    ("MissingHooksConnector", "has no attribute"),
    ("NoSuchClass", "has no class"),
]


@pytest.fixture(scope="module")
def suite_run(tmp_path_factory):
    """One run of the connector suite over every buggy connector (and a vendor module that cannot import)."""
    results = tmp_path_factory.mktemp("buggy") / "results.json"
    unusable = " or ".join([name for name, _ in UNUSABLE] + ["MissingVendorConnector"])
    targets = [f"tests.connector.buggy:{name}" for name, _ in CAUGHT + UNUSABLE] + ["no_such_vendor_pkg.mod:MissingVendorConnector"]
    cmd = [sys.executable, "-m", "pytest", "--pyargs", "suites.connector", "-p", "no:cacheprovider",
           "-k", f"(c14 and fa_only) or ((c03_group_discovery_scratch or c05 or c07 or c15 or c17 or c18_kernel or c22 or c24) "
           f"and not ({unusable}))",
           "--kv-connector-timeout", "3",
           "--kvconform-results", str(results)]
    for target in targets:
        cmd += ["--kv-connector", target]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert results.exists(), f"no results written; pytest said:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    entries = json.loads(results.read_text())["results"]
    return {e["id"].split("::")[-1]: e for e in entries}, proc.stdout


@pytest.mark.parametrize("cls, test_name", CAUGHT, ids=[c[0] for c in CAUGHT])
def test_named_check_catches_buggy_connector(suite_run, cls, test_name):
    results, stdout = suite_run
    mine = {k: v for k, v in results.items() if k.startswith(f"{test_name}[{cls}-")}
    assert mine, f"{test_name} did not run for {cls}:\n{stdout[-1500:]}"
    failed = [k for k, v in mine.items() if v["status"] == "failed"]
    assert failed, f"{test_name} passed for the buggy {cls}: {[(k, v['status']) for k, v in mine.items()]}"
    assert results[failed[0]]["extra"].get("evidence"), f"no evidence recorded: {results[failed[0]]}"


@pytest.mark.parametrize("cls, needle", UNUSABLE, ids=[c[0] for c in UNUSABLE])
def test_unusable_connector_is_a_clear_failure(suite_run, cls, needle):
    results, stdout = suite_run
    entry = results.get(f"test_c14_round_trip_bytes[{cls}-fa_only]")
    assert entry is not None, stdout[-1500:]
    assert entry["status"] == "failed", entry
    assert needle in (entry.get("message") or ""), entry


def test_import_failure_is_a_clear_failure_and_in_the_header(suite_run):
    results, stdout = suite_run
    entry = results["test_c14_round_trip_bytes[MissingVendorConnector-fa_only]"]
    assert entry["status"] == "failed" and "does not import" in (entry.get("message") or ""), entry
    assert "LOAD ERROR" in stdout, "the pytest header should name the load error"


def test_the_run_goes_on_after_bad_connectors(suite_run):
    """The last connector on the command line still ran its checks."""
    results, _ = suite_run
    assert any("[MissingVendorConnector-" in k for k in results)
