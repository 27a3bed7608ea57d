"""The connector suite catches each deliberately buggy connector with the check named for its bug, with the
connector's optional `kvconform_*` backdoors and without them (`--kv-connector-backdoors off`), while the
correct reference connector, run the same way as a vendor connector, passes those checks. Unusable
connectors are one collection error, not a failure per check."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUGGY = "tests.connector.buggy"
REFERENCE = "reference_impl.connector.lmcache_like:LMCacheLikeConnector"
# Every buggy connector's store: small enough that the capacity probes fill it.
EXTRA_CONFIG = json.dumps({"cpu_bytes": 400_000})

# (buggy class, the check named for its bug, the test function that runs that check)
CAUGHT = [
    ("BlockIdsZeroConnector", "C17", "test_c17_layer_group_routing"),
    ("GroupSwapConnector", "C17", "test_c17_layer_group_routing"),
    ("NullBlockWriterConnector", "C15", "test_c15_null_block_untouched"),
    ("NullBlockStoringConnector", "C15", "test_c15_null_block_untouched"),
    ("FullAttentionHitConnector", "C07", "test_c07_hit_min_over_groups"),
    ("MambaBlindHitConnector", "C07", "test_c07_hit_min_over_groups"),
    ("OutOfWindowStoreConnector", "C24", "test_c24_swa_reuse_race_forced"),
    ("FinishNoDelayConnector", "C25", "test_c25_finish_reuse_race_forced"),
    ("PerBlockLoadErrorConnector", "C22", "test_c22_failure_by_request"),
    ("PinLeakConnector", "C04", "test_c04_lookup_idempotent"),
    ("ProcessSaltedKeysConnector", "C36", "test_c36_determinism_across_processes"),
    ("SaltBlindConnector", "C30", "test_c30_key_isolation"),
    ("LoRABlindConnector", "C30", "test_c30_key_isolation"),
    ("HMAStubFinishConnector", "C01", "test_c01_declares_hma"),
    ("ScratchServingConnector", "C03", "test_c03_group_discovery_scratch"),
    ("NoneAsZeroConnector", "C05", "test_c05_lookup_none_then_value"),
    ("KernelRatioIgnoringConnector", "C18", "test_c18_kernel_block_ratio"),
]
MISBEHAVING = [  # load fine, then misbehave in every check: the check names the hook
    ("RaisingConnector", "build_connector_meta"),
    ("HangingConnector", "hung past"),
]
NAMED_TESTS = sorted({test for _, _, test in CAUGHT})


def run_suite(tmp_path: Path, backdoors: str) -> tuple[dict, str]:
    """One suite run: every buggy connector on the check named for it, the reference connector on all of
    those checks, the misbehaving ones on one check."""
    results = tmp_path / f"results-{backdoors}.json"
    selection = [f"({test} and {cls})" for cls, _, test in CAUGHT]
    selection.append(f"(LMCacheLikeConnector and ({' or '.join(NAMED_TESTS)}))")
    selection += [f"(test_c14 and fa_only and {cls})" for cls, _ in MISBEHAVING]
    cmd = [sys.executable, "-m", "pytest", "--pyargs", "suites.connector", "-p", "no:cacheprovider", "-q",
           "-p", "no:randomly", "--tb=line", "-k", " or ".join(selection), "--kv-connector-timeout", "60",
           "--kv-connector-extra-config", EXTRA_CONFIG, "--kv-connector-backdoors", backdoors,
           "--kvconform-results", str(results), "--kv-connector", REFERENCE]
    for cls in [c for c, _, _ in CAUGHT] + [c for c, _ in MISBEHAVING]:
        cmd += ["--kv-connector", f"{BUGGY}:{cls}"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=1200)
    assert results.exists(), f"no results written; pytest said:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    entries = json.loads(results.read_text())["results"]
    return {e["id"].split("::")[-1]: e for e in entries}, proc.stdout


@pytest.fixture(scope="module", params=["on", "off"], ids=["with-backdoors", "without-backdoors"])
def suite_run(request, tmp_path_factory):
    """The suite run with backdoors on, then off."""
    return request.param, *run_suite(tmp_path_factory.mktemp("buggy"), request.param)


@pytest.mark.parametrize("cls, check_id, test_name", CAUGHT, ids=[c[0] for c in CAUGHT])
def test_named_check_catches_buggy_connector(suite_run, cls, check_id, test_name):
    backdoors, results, stdout = suite_run
    mine = {k: v for k, v in results.items() if k.startswith(f"{test_name}[{cls}")}
    assert mine, f"{test_name} did not run for {cls}:\n{stdout[-1500:]}"
    failed = [k for k, v in mine.items() if v["status"] == "failed"]
    assert failed, (f"{check_id} ({test_name}) passed for the buggy {cls} with backdoors {backdoors}: "
                    f"{[(k, v['status'], v.get('message')) for k, v in mine.items()]}")
    evidence = results[failed[0]]["extra"].get("evidence") or ""
    assert evidence.startswith(f"{check_id} ["), f"the evidence does not start with '{check_id} [preset]': {evidence!r}"


@pytest.mark.parametrize("test_name", NAMED_TESTS)
def test_reference_connector_passes_as_a_vendor(suite_run, test_name):
    """No false alarm: the correct connector, loaded with --kv-connector like a vendor's, passes."""
    backdoors, results, stdout = suite_run
    mine = {k: v for k, v in results.items() if k.startswith(f"{test_name}[LMCacheLikeConnector")}
    assert mine, f"{test_name} did not run for the reference connector:\n{stdout[-1500:]}"
    bad = {k: v.get("message") for k, v in mine.items() if v["status"] not in ("passed", "skipped")}
    assert not bad, f"the reference connector failed with backdoors {backdoors}: {bad}"


@pytest.mark.parametrize("cls, needle", MISBEHAVING, ids=[c[0] for c in MISBEHAVING])
def test_misbehaving_connector_is_a_clear_failure(suite_run, cls, needle):
    _, results, stdout = suite_run
    entry = results.get(f"test_c14_round_trip_bytes[{cls}-fa_only]")
    assert entry is not None, stdout[-1500:]
    assert entry["status"] == "failed", entry
    assert needle in (entry.get("message") or ""), entry


UNUSABLE = [
    ("tests.connector.buggy:OldConstructorConnector", "kv_cache_config"),
    ("tests.connector.buggy:MissingHooksConnector", "lacks the connector hooks"),
    ("tests.connector.buggy:NoSuchClass", "has no class"),
    ("no_such_vendor_pkg.mod:MissingVendorConnector", "does not import"),
]


@pytest.mark.parametrize("spec, needle", UNUSABLE, ids=[u[0].rpartition(":")[2] for u in UNUSABLE])
def test_unusable_connector_is_one_collection_error(spec, needle):
    """pytest: one collection error naming the reason, nothing runs; `kvconform report`: exit 4, one line."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "--pyargs", "suites.connector", "-p", "no:cacheprovider",
                           "-q", "--kv-connector", spec], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stdout[-1500:]
    assert proc.stdout.count("ERROR collecting") == 1, proc.stdout[-1500:]
    assert "could not be loaded" in proc.stdout and needle in proc.stdout, proc.stdout[-1500:]
    assert " passed" not in proc.stdout and " failed" not in proc.stdout, proc.stdout[-1500:]
    report = subprocess.run([sys.executable, "-m", "harness.cli", "report", "--kv-connector", spec, "--output-dir",
                             str(REPO / ".kvconform-unused")], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert report.returncode == 4, report.stderr
    lines = report.stderr.strip().splitlines()
    assert len(lines) == 1 and "the target could not be loaded" in lines[0] and needle in lines[0], report.stderr


@pytest.mark.parametrize("option, value, needle", [
    ("--kv-connector-extra-config", "{bad json", "is not JSON"),
    ("--kv-connector-extra-config", "[1, 2]", "must be a JSON object"),
    ("--kv-connector-timeout", "0", "must be a positive number"),
    ("--kv-connector-timeout", "-5", "must be a positive number"),
])
def test_bad_connector_options_are_usage_errors(option, value, needle):
    """pytest's usage error (one line); through `kvconform report` exit 2 with one line of its own."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "--pyargs", "suites.connector", "-p", "no:cacheprovider",
                           "-q", option, value], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 4, proc.stdout[-800:] + proc.stderr[-800:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("ERROR:")]
    assert len(errors) == 1 and needle in errors[0] and option in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr
    report = subprocess.run([sys.executable, "-m", "harness.cli", "report", "--suite", "suites.connector",
                             "--output-dir", str(REPO / ".kvconform-unused"), "-n", "0", "--", option, value],
                            cwd=REPO, capture_output=True, text=True, timeout=300)
    assert report.returncode == 2, report.stdout[-800:] + report.stderr[-800:]
    assert len(report.stderr.strip().splitlines()) == 1, report.stderr
