"""The connector suite catches each deliberately buggy connector with the check named for its bug, with the
connector's optional `kvconform_*` backdoors and black-box, without them (`--kv-connector-backdoors off`), run as a
vendor runs a connector: `--kv-connector module:Class` with the extra config docs/vendor.md recommends (a small
CPU store, a disk tier, async loads declared), while the correct reference connector, run the same way, passes
those checks. The pairing bug class -> catching check is reviewed data (`CAUGHT`, `CAUGHT_TWINS`), and every
buggy connector must be in it. A connector that
raises or hangs in a hook fails with a message naming the hook. Unusable connectors are one collection
error, not a failure per check.

The suite runs behind these tests happen once per test session (`tests.once`), started together."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from harness.cli import main
from harness.failure_causes import CAUSES
from tests.connector.suite_process import REPO, results_by_test, run_together, suite_command, vacuous_cells
from tests.once import once_per_session

BUGGY = "tests.connector.buggy"
LEGAL = "tests.connector.legal_variants"
REFERENCE = "reference_impl.connector.lmcache_like:LMCacheLikeConnector"


def vendor_extra_config(disk_path: str) -> str:
    """The extra config docs/vendor.md recommends for the LMCache-like connector and classes built on it, run as a
    vendor runs them: a CPU store small enough that the capacity probes fill it, a disk tier (a store that outlives
    its process, so C36 compares keys across processes black-box), and how the connector loads asynchronously
    (merged into its extra config by the checks that exercise async loads)."""
    return json.dumps({"cpu_bytes": 400_000, "disk_path": disk_path, "disk_bytes": 800_000,
                       "kvconform": {"async_load_config": {"load_async": True}, "block_size_option": "chunk_size"}})


# A fixed folder for the figures of tests.connector.catch_table (this module's runs get one of their own).
EXTRA_CONFIG = vendor_extra_config(os.path.join(tempfile.gettempdir(), "kvconform-catch-table-disk"))

# The pairing, bug class -> catching check, as reviewed data: (buggy class of tests/connector/buggy.py, the check
# named for its bug, the test function that runs that check). Each runs black-box (backdoors off) and with its
# backdoors, under the vendor config; a change that makes a check stop catching its class fails
# test_named_check_catches_buggy_connector.
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
    ("ProcessRandomKeysConnector", "C36", "test_c36_determinism_across_processes"),
    ("SaltBlindConnector", "C30", "test_c30_key_isolation"),
    ("LoRABlindConnector", "C30", "test_c30_key_isolation"),
    ("HMAStubFinishConnector", "C01", "test_c01_declares_hma"),
    ("ScratchServingConnector", "C03", "test_c03_group_discovery_scratch"),
    ("NoneAsZeroConnector", "C05", "test_c05_lookup_none_then_value"),
    ("KernelRatioIgnoringConnector", "C18", "test_c18_kernel_block_ratio"),
    # issue 19's blind spots: KV dtypes, sliding-window geometry, completion reports, shared stores, async loads
    ("HalfPrecisionStoreConnector", "C14", "test_c14_round_trip_bytes"),
    ("BFloat16StoreConnector", "C14", "test_c14_round_trip_bytes"),
    ("WindowWithinOneChunkConnector", "C14", "test_c14_round_trip_bytes"),
    ("WindowInWholeBlocksConnector", "C14", "test_c14_round_trip_bytes"),
    ("DoubleFinishedRecvConnector", "C21", "test_c21_async_completion_liveness"),
    ("SyncLoadFinishedRecvConnector", "C14", "test_c14_round_trip_bytes"),
    ("PhantomFinishedSendingConnector", "C21", "test_c21_async_completion_liveness"),
    ("ModelBlindKeysConnector", "C30", "test_c30_store_shared_across_deployments"),
    ("DtypeBlindKeysConnector", "C30", "test_c30_store_shared_across_deployments"),
    ("TPSizeBlindKeysConnector", "C30", "test_c30_store_shared_across_deployments"),
    ("TPBlindKeysConnector", "C34", "test_c34_tp_rank_shards"),
    ("AsyncEarlyReportConnector", "C20", "test_c20_loaded_groups_complete"),
    # issue 31's inputs: a MultiConnector child, lookups beyond a local hit, an exact-multiple prompt
    ("AllocTableOnlyConnector", "C37", "test_c37_multiconnector_stores_every_child"),
    ("LocalHitBlindConnector", "C38", "test_c38_lookup_at_local_hits"),
    ("LastPromptTokenUnstoredConnector", "C39", "test_c39_exact_multiple_reload"),
    ("DefaultChunkHitConnector", "C40", "test_c40_offloaded_block_multiple"),
    ("ChunkedLocalBlindConnector", "C14", "test_c14_round_trip_bytes"),  # on the chunked-local preset
    ("EagleBlindConnector", "C41", "test_c41_eagle_drops_last_block"),
    ("EagleLoadPastHitConnector", "C41", "test_c41_eagle_drops_last_block"),
]
# The buggy twins of tests/connector/legal_variants.py (each beside a correct connector with legal behaviour the
# suite once judged a bug): (class, the profile it declares, the check named for its bug, the test function).
# Run black-box only, under the vendor config with that declaration.
CAUGHT_TWINS = [
    ("OneTokenShortHitConnector", {}, "C06", "test_c06_hit_alignment"),
    ("EngineOwnedFullAttentionHitConnector", {"store_scope": "engine"}, "C07", "test_c07_hit_min_over_groups"),
]
MISBEHAVING = [  # load fine, then misbehave in every check: the check names the hook
    ("RaisingConnector", "build_connector_meta"),
    ("HangingConnector", "hung past"),
]
NAMED_TESTS = sorted({test for _, _, test in CAUGHT})


# The misbehaving connectors run apart, under a short per-check time limit: the hanging one then costs
# seconds, not the minute the other checks are allowed (a loaded CI machine must not make those time out).
MISBEHAVING_TIMEOUT_S = 5
BACKDOOR_MODES = ("on", "off")


def suite_runs(folder: Path) -> dict[str, dict]:
    """Every suite run this module judges, started together (they share the cores; the hang waits), each under
    the vendor config with a disk folder of its own: with backdoors on and off, every buggy connector on the check
    named for its bug and the reference connector on all of those checks; the legal variants' buggy twins
    black-box, in the black-box named run when they declare nothing more than it, else one run per declared
    profile; the misbehaving connectors on one check, also on and off.

    Returns run name -> {"results": test id -> entry, "stdout": pytest's output}."""
    named = [f"({test} and {cls})" for cls, _, test in CAUGHT]
    named.append(f"(LMCacheLikeConnector and ({' or '.join(NAMED_TESTS)}))")
    misbehaving = [f"(test_c14 and fa_only and {cls})" for cls, _ in MISBEHAVING]
    plain_twins = [(cls, test) for cls, declared, _, test in CAUGHT_TWINS if not declared]
    commands = {}
    for backdoors in BACKDOOR_MODES:
        connectors = [REFERENCE] + [f"{BUGGY}:{c}" for c, _, _ in CAUGHT]
        selection = list(named)
        if backdoors == "off":  # a run of its own would pay a process, torch's import and collection again
            connectors += [f"{LEGAL}:{cls}" for cls, _ in plain_twins]
            selection += [f"({test} and {cls})" for cls, test in plain_twins]
        commands[f"named-{backdoors}"] = suite_command(
            folder / f"named-{backdoors}.json", connectors,
            extra_config=vendor_extra_config(str(folder / f"disk-named-{backdoors}")), backdoors=backdoors,
            selection=selection)
        commands[f"misbehaving-{backdoors}"] = suite_command(
            folder / f"misbehaving-{backdoors}.json", [f"{BUGGY}:{c}" for c, _ in MISBEHAVING],
            extra_config=vendor_extra_config(str(folder / f"disk-misbehaving-{backdoors}")), backdoors=backdoors,
            selection=misbehaving, timeout=MISBEHAVING_TIMEOUT_S)
    declared_profiles = sorted({json.dumps(d, sort_keys=True) for _, d, _, _ in CAUGHT_TWINS if d})
    for index, declared in enumerate(declared_profiles):
        twins = [(cls, test) for cls, d, _, test in CAUGHT_TWINS if json.dumps(d, sort_keys=True) == declared]
        extra = json.loads(vendor_extra_config(str(folder / f"disk-twins-{index}")))
        extra["kvconform"].update(json.loads(declared))
        commands[f"twins-{index}"] = suite_command(
            folder / f"twins-{index}.json", [f"{LEGAL}:{cls}" for cls, _ in twins], extra_config=json.dumps(extra),
            backdoors="off", selection=[f"({test} and {cls})" for cls, test in twins])
    runs = {}
    for name, (_status, stdout) in run_together(commands).items():
        results = folder / f"{name}.json"
        assert results.exists(), f"{name}: no results written; pytest said:\n{stdout[-3000:]}"
        runs[name] = {"results": results_by_test(results), "stdout": stdout}
    return runs


@pytest.fixture(scope="module")
def all_runs(request) -> dict[str, dict]:
    """The suite runs, once per test session however xdist spreads this module's tests."""
    return once_per_session(request, "buggy-connector-runs", suite_runs)


@pytest.fixture(params=BACKDOOR_MODES, ids=["with-backdoors", "without-backdoors"])
def suite_run(request, all_runs):
    """The named-check run with backdoors on, then off."""
    run = all_runs[f"named-{request.param}"]
    return request.param, run["results"], run["stdout"]


@pytest.fixture(params=BACKDOOR_MODES, ids=["with-backdoors", "without-backdoors"])
def misbehaving_run(request, all_runs):
    """The misbehaving connectors' run with backdoors on, then off."""
    run = all_runs[f"misbehaving-{request.param}"]
    return request.param, run["results"], run["stdout"]


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
    for name in failed:  # every failure carries its structured cause key (what the findings classify by)
        cause = results[name]["extra"].get("cause") or {}
        assert cause.get("tag") in CAUSES, f"{name}: no cause key recorded: {results[name]['extra']}"


# Reviewed (issue 32): each key-blind connector's failure names the key component its keys ignore, with what was
# stored and what was asked; the cell's record keeps the components (the findings page classifies by them).
KEY_MESSAGES = {  # buggy class -> (its failing test, the words its message starts with, recorded components)
    "SaltBlindConnector": ("test_c30_key_isolation", "keys ignore the cache salt: ", ["cache_salt"]),
    "LoRABlindConnector": ("test_c30_key_isolation", "keys ignore the LoRA adapter: ", ["lora"]),
    "TPBlindKeysConnector": ("test_c34_tp_rank_shards", "keys ignore the TP rank: ", ["tp_rank"]),
    "ModelBlindKeysConnector": ("test_c30_store_shared_across_deployments", "keys ignore the model name: ", ["model"]),
    "DtypeBlindKeysConnector": ("test_c30_store_shared_across_deployments", "keys ignore the KV dtype: ", ["dtype"]),
    "TPSizeBlindKeysConnector": ("test_c30_store_shared_across_deployments", "keys ignore the TP size: ",
                                 ["tp_size"]),
}


@pytest.mark.parametrize("cls", list(KEY_MESSAGES))
def test_a_key_blind_connector_reads_the_component_its_keys_ignore(suite_run, cls):
    """A LoRA-blind, a salt-blind and a TP-blind key (and model-, dtype- and TP-size-blind ones) read different
    messages, each naming its component and what was stored and asked (issue 32 item 4)."""
    backdoors, results, stdout = suite_run
    test_name, words, components = KEY_MESSAGES[cls]
    failed = {k: v for k, v in results.items() if k.startswith(f"{test_name}[{cls}") and v["status"] == "failed"}
    assert failed, f"{test_name} did not fail for {cls} with backdoors {backdoors}:\n{stdout[-1500:]}"
    for name, entry in failed.items():
        evidence = entry["extra"].get("evidence") or ""
        cause = evidence.split("]: ", 1)[-1]
        assert cause.startswith(words), f"{name}: {evidence!r}"
        assert "stored under {cache salt " in cause and ", asked with " in cause, f"{name}: {evidence!r}"
        assert entry["extra"]["key_leak"]["components"] == components, entry["extra"]
        assert entry["extra"]["cause"] == {"tag": "key-leak", "components": components}, entry["extra"]


@pytest.mark.parametrize("cls, check_id, test_name", [(c, k, t) for c, _, k, t in CAUGHT_TWINS],
                         ids=[c[0] for c in CAUGHT_TWINS])
def test_named_check_catches_a_legal_variants_buggy_twin_black_box(all_runs, cls, check_id, test_name):
    results = {k: v for run, found in all_runs.items() if run.startswith("twins-") or run == "named-off"
               for k, v in found["results"].items()}
    mine = {k: v for k, v in results.items() if k.startswith(f"{test_name}[{cls}")}
    assert mine, f"{test_name} did not run for {cls}"
    failed = [k for k, v in mine.items() if v["status"] == "failed"]
    assert failed, f"{check_id} ({test_name}) passed for the buggy {cls} black-box: " \
                   f"{[(k, v['status'], v.get('message')) for k, v in mine.items()]}"
    assert (results[failed[0]]["extra"].get("evidence") or "").startswith(f"{check_id} [")


def test_every_buggy_connector_is_paired_with_its_catching_check():
    """Every connector class of tests/connector/buggy.py is in the pairing (or is one that misbehaves in every check,
    or cannot be built): a buggy connector added without the check that must catch it fails here."""
    from tests.connector import buggy

    classes = {name for name, obj in vars(buggy).items() if inspect.isclass(obj) and obj.__module__ == buggy.__name__
               and not name.startswith("_") and name.endswith("Connector")}
    paired = {c for c, _, _ in CAUGHT} | {c for c, _ in MISBEHAVING} | {u[0].rpartition(":")[2] for u in UNUSABLE}
    assert classes - paired == set(), f"buggy connectors without a catching check: {sorted(classes - paired)}"
    pairs = [(c, k, t) for c, k, t in CAUGHT] + [(c, k, t) for c, _, k, t in CAUGHT_TWINS]
    assert all(test.startswith(f"test_{check.lower()}_") for _, check, test in pairs), "a test function of another check"


@pytest.mark.parametrize("test_name", NAMED_TESTS)
def test_reference_connector_passes_as_a_vendor(suite_run, test_name):
    """No false alarm: the correct connector, loaded with --kv-connector like a vendor's, passes."""
    backdoors, results, stdout = suite_run
    mine = {k: v for k, v in results.items() if k.startswith(f"{test_name}[LMCacheLikeConnector")}
    assert mine, f"{test_name} did not run for the reference connector:\n{stdout[-1500:]}"
    bad = {k: v.get("message") for k, v in mine.items() if v["status"] not in ("passed", "skipped")}
    assert not bad, f"the reference connector failed with backdoors {backdoors}: {bad}"
    # A check that skips on the correct connector would pass its buggy twins unnoticed too (C36 black-box skipped
    # with a disk tier configured: issue 35).
    assert not vacuous_cells(mine), f"MUST checks that decided nothing, backdoors {backdoors}: {vacuous_cells(mine)}"


@pytest.mark.parametrize("cls, needle", MISBEHAVING, ids=[c[0] for c in MISBEHAVING])
def test_misbehaving_connector_is_a_clear_failure(misbehaving_run, cls, needle):
    _, results, stdout = misbehaving_run
    entry = results.get(f"test_c14_round_trip_bytes[{cls}-fa_only]")
    assert entry is not None, stdout[-1500:]
    assert entry["status"] == "failed", entry
    assert needle in (entry.get("message") or ""), entry


UNUSABLE = [
    ("tests.connector.buggy:OldConstructorConnector", "kv_cache_config"),
    ("tests.connector.buggy:MissingHooksConnector", "lacks the connector hooks"),
    ("tests.connector.buggy:NoSuchClass", "has no attribute 'NoSuchClass'"),
    ("no_such_vendor_pkg.mod:MissingVendorConnector", "does not import"),
    ("tests.connector.buggy:UnreachableBackendConnector",
     "the constructor raised ConnectionError: cannot reach the cache server at 10.0.0.7:65432"),
    ("tests.connector.buggy:ExtraArgumentConnector", "the constructor raised TypeError"),
]


@pytest.mark.parametrize("spec, needle", UNUSABLE, ids=[u[0].rpartition(":")[2] for u in UNUSABLE])
def test_unusable_connector_is_a_target_error(spec, needle, tmp_path, capsys):
    """pytest and `kvconform report` alike: exit 4, one line naming the option, the spec and why; nothing runs.

    pytest runs in a fresh process, as a vendor would run it; `kvconform report` stops in its own argument
    checks before it starts anything, so its `main` runs here (tests/config/test_commands.py holds the
    console script's exit status in a fresh process)."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "--pyargs", "suites.connector", "-p", "no:cacheprovider",
                           "-p", "no:xdist", "-q", "--kv-connector", spec], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 4, proc.stdout[-1500:] + proc.stderr[-1500:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"ERROR: --kv-connector {spec}: ") and needle in lines[0], proc.stderr
    assert " passed" not in proc.stdout and " failed" not in proc.stdout, proc.stdout[-1500:]
    status = main(["report", "--kv-connector", spec, "--output-dir", str(tmp_path / "unused")])
    err = capsys.readouterr().err
    assert status == 4, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"kvconform report: --kv-connector {spec}: ") and needle in lines[0], err
    assert not (tmp_path / "unused").exists(), "no report is written"


@pytest.mark.parametrize("option, value, needle", [
    ("--kv-connector-extra-config", "{bad json", "is not JSON"),
    ("--kv-connector-extra-config", "[1, 2]", "must be a JSON object"),
    ("--kv-connector-timeout", "0", "must be a positive number"),
    ("--kv-connector-timeout", "-5", "must be a positive number"),
])
def test_bad_connector_options_are_usage_errors(option, value, needle, tmp_path, capsys):
    """pytest's usage error (one line); through `kvconform report` exit 2 with one line of its own (its `main`
    runs here: it stops in its argument checks, before it starts pytest)."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "--pyargs", "suites.connector", "-p", "no:cacheprovider",
                           "-p", "no:xdist", "-q", option, value], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 4, proc.stdout[-800:] + proc.stderr[-800:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("ERROR:")]
    assert len(errors) == 1 and needle in errors[0] and option in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr
    status = main(["report", "--suite", "suites.connector", "--output-dir", str(tmp_path / "unused"), "-n", "0",
                   "--", option, value])
    captured = capsys.readouterr()
    assert status == 2, captured.out[-800:] + captured.err[-800:]
    assert len(captured.err.strip().splitlines()) == 1 and option in captured.err, captured.err
