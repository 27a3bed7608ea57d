"""Connector profiles (issue 19, item 1): a vendor declares what kind of connector it checks under the
`"kvconform"` key of its extra config (taken out before the connector sees it); a check that does not apply to
that kind is "N/A: reason", never a failure; the header prints every connector's profile."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.plugins.connector import parse_extra_config
from harness.outcomes import MULTI_GROUP, decided_nothing, legacy_record, record_of
from harness.targets.connector.profile import ConnectorProfile, profile_for, split_declaration
from harness.connector_checks import CHECKS
from suites.connector.catalogue import not_applicable_reason

REPO = Path(__file__).resolve().parents[2]


def test_the_declaration_is_taken_out_of_the_connectors_extra_config():
    extra, declared = split_declaration({"chunk_size": 64, "kvconform": {"kind": "dummy",
                                                                         "async_load_config": {"load_async": True}}})
    assert extra == {"chunk_size": 64}
    profile = profile_for(declared, declares_hma=True)
    assert (profile.kind, profile.source, profile.async_load_config) == ("dummy", "declared", {"load_async": True})
    assert profile.describe() == "fills dummy KV, declares HMA, async loads configured (declared)"
    assert profile_for({}, False).describe() == "stores and loads KV, does not declare HMA (inferred)"
    assert profile_for({}, True, known_kind="transfer").describe() == \
        "transfers KV between instances only, declares HMA (reviewed data)"


def test_the_store_scope_is_declared_or_from_reviewed_data_and_shared_by_default():
    extra, declared = split_declaration({"kvconform": {"store_scope": "engine"}})
    assert extra == {}
    assert profile_for(declared, True).store_scope == "engine"
    assert profile_for(declared, True).describe() == ("stores and loads KV, declares HMA, a store owned by the engine "
                                                      "(a second engine starts empty) (inferred, options declared)")
    assert profile_for({}, True, known_store_scope="engine").engine_owned_store
    assert not profile_for({}, True).engine_owned_store
    process = profile_for({"store_scope": "process"}, True)
    assert not process.engine_owned_store and process.describe().endswith(
        "a store that lives and dies with its process (a new process starts empty) (inferred, options declared)")
    # A vendor's declaration wins over reviewed data.
    assert not profile_for({"store_scope": "shared"}, True, known_store_scope="engine").engine_owned_store


def test_the_block_size_option_is_declared_or_from_reviewed_data():
    """C40 sets the connector's stored block through its profile's block_size_option: declared by a vendor,
    `chunk_size` for built-ins, `block_size` for vLLM's OffloadingConnector (reviewed data), else none (C40 N/A)."""
    from harness.targets.connector.selection import BUILTIN_TARGETS
    from harness.targets.connector.vllm_facts import BLOCK_SIZE_OPTIONS

    extra, declared = split_declaration({"chunk": 8, "kvconform": {"block_size_option": "chunk"}})
    assert extra == {"chunk": 8} and profile_for(declared, True).block_size_option == "chunk"
    assert profile_for({}, True).block_size_option is None
    assert profile_for({}, True, known_block_size_option="block_size").block_size_option == "block_size"
    assert profile_for(declared, True, known_block_size_option="block_size").block_size_option == "chunk"
    assert {t.profile.block_size_option for t in BUILTIN_TARGETS} == {"chunk_size"}
    assert BLOCK_SIZE_OPTIONS["OffloadingConnector"] == "block_size"


@pytest.mark.parametrize("declared, needle", [
    ("cache", '"kvconform" must be a JSON object, got \'cache\'; accepted keys: kind, multi_group, async_load_config, '
              'store_scope, block_size_option'),
    ({"kind": "cache"}, '"kvconform".kind is \'cache\'; accepted: stores (stores and loads KV), dummy (fills dummy '
                        'KV), transfer (transfers KV between instances only)'),
    ({"knd": "dummy"}, '"kvconform" has an unknown key \'knd\'; accepted: kind, multi_group, async_load_config, '
                       'store_scope, block_size_option'),
    ({"store_scope": "host"}, '"kvconform".store_scope is \'host\'; accepted: shared (a store shared by the '
                              'engines of one process), process (a store that lives and dies with its process (a '
                              'new process starts empty)), engine (a store owned by the engine (a second engine '
                              'starts empty))'),
    ({"async_load_config": True}, '"kvconform".async_load_config is True; accepted: a JSON object (a mapping)'),
    ({"block_size_option": 64}, '"kvconform".block_size_option is 64; accepted: a string'),
])
def test_a_bad_declaration_is_a_usage_error_naming_the_field(declared, needle):
    with pytest.raises(ValueError) as info:
        parse_extra_config(json.dumps({"kvconform": declared}))
    assert str(info.value) == "--kv-connector-extra-config: " + needle


def test_checks_that_judge_stored_kv_do_not_apply_to_a_dummy_kv_connector():
    dummy = ConnectorProfile(kind="dummy", declares_hma=True)
    stores = ConnectorProfile(kind="stores", declares_hma=True)
    raised = not_applicable_reason("C14", dummy, False)
    na = record_of(raised)
    assert na["kind"] == "profile" and na["check"] == "C14" and na["reason"] == (
        "does not apply: it judges loaded KV bytes against what was stored, and a 'fills dummy KV' connector "
        "loads no stored KV"), "the reason reads the same for every check it holds for; the check id apart"
    assert raised.msg == "N/A: C14 " + na["reason"], "the message names the check, as the console always showed"
    for check in ("C02", "C12", "C13", "C15", "C16", "C19", "C21", "C27", "C29", "C31"):
        assert not_applicable_reason(check, dummy, True) is None, f"{check} applies to a dummy-KV connector"
    assert all(not_applicable_reason(check, stores, True) is None for check in CHECKS)
    not_for = {kind: {c.id for c in CHECKS.values() if kind in c.not_for} for kind in ("dummy", "transfer")}
    # a transfer connector is spared every check a dummy one is, except C42: its prompts are prefilled step by step
    # (no hit of its own), while a dummy connector claims every prompt and leaves no prefill to watch
    assert not_for["dummy"] - not_for["transfer"] == {"C42"}
    assert not_for["dummy"] & not_for["transfer"] < not_for["transfer"]


def test_a_declared_multi_group_refusal_makes_multi_group_checks_not_applicable():
    refusing = ConnectorProfile(kind="stores", declares_hma=True, multi_group="engine-driven mode: one group only")
    want = "N/A: declares SupportsHMA, refuses multi-group models on this configuration: engine-driven mode: one group only"
    for na in (not_applicable_reason("C14", refusing, multi_group=True),
               not_applicable_reason("C01", refusing, multi_group=False)):  # C01 always runs two groups
        record = record_of(na)
        assert (record["kind"], record["reason"], record["refuses"], na.msg) == (
            "profile", "engine-driven mode: one group only", MULTI_GROUP, want)
    assert not_applicable_reason("C14", refusing, multi_group=False) is None


def test_a_declared_dummy_connector_gets_na_cells_and_its_profile_in_the_header(tmp_path):
    """The reference connector declared as a dummy-KV connector: C14 is N/A with the reason, C16 runs and passes;
    the header prints the declared profile."""
    results = tmp_path / "results.json"
    extra = json.dumps({"kvconform": {"kind": "dummy"}})
    proc = subprocess.run([sys.executable, "-m", "pytest", "--pyargs", "suites.connector", "-p", "no:cacheprovider",
                           "-p", "no:xdist", "-q", "-k", "(test_c14 or test_c16) and fa_only",
                           "--kv-connector", "reference_impl.connector.lmcache_like:LMCacheLikeConnector",
                           "--kv-connector-extra-config", extra, "--kvconform-results", str(results)],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert ("kv-connector profile: LMCacheLikeConnector: fills dummy KV, declares HMA (declared)"
            in proc.stdout), proc.stdout[:2000]
    document = json.loads(results.read_text())
    assert document["run_info"]["target"] == "connectors reference_impl.connector.lmcache_like:LMCacheLikeConnector", \
        "the results (and the report's header) name the connector that ran, not 'reference'"
    entries = {e["id"].split("::")[-1]: e for e in document["results"]}
    c14 = entries["test_c14_round_trip_bytes[LMCacheLikeConnector-fa_only]"]
    assert c14["status"] == "skipped" and c14["message"].startswith("N/A: C14 does not apply: it judges loaded KV"), c14
    assert c14["not_applicable"] == {"kind": "profile", "reason": c14["message"].removeprefix("N/A: C14 "),
                                     "release": None, "refuses": None, "check": "C14", "preset": None}, \
        "the results record the typed N/A"
    assert entries["test_c16_ownership_fence[LMCacheLikeConnector-fa_only]"]["not_applicable"] is None
    assert entries["test_c16_ownership_fence[LMCacheLikeConnector-fa_only]"]["status"] == "passed"


@pytest.mark.parametrize("tier, status, message, vacuous", [
    ("MUST", "skipped", "inconclusive: the preemption scenario did not occur", True),
    ("MUST", "skipped", "not applicable: backdoors are off", True),  # a MUST check never needs a backdoor
    ("MUST", "skipped", "hook wait_for_save hung past 60 s in C14: skipped", True),
    ("MUST", "skipped", None, True),
    ("MUST", "skipped", "N/A: C05 does not apply: ...", False),
    ("MUST", "skipped", "N/A on 0.13.0: the release has no failed_recving", False),
    ("MUST", "skipped", "not HMA-capable: X does not declare SupportsHMA", False),
    ("SHOULD", "skipped", "not applicable: backdoors are off", False),  # a SHOULD may need a backdoor
    ("MUST", "passed", None, False),
    ("MUST", "failed", "C07 [fa+swa]: ...", False),
])
def test_a_must_check_that_skipped_for_a_reason_the_profile_does_not_imply_decided_nothing(tier, status, message,
                                                                                            vacuous):
    """Messages as the suite words them; their typed record as a schema-1 results file's skip is read back."""
    record = legacy_record(message, "connector") if status == "skipped" else None
    assert decided_nothing(tier, status, record) is vacuous
