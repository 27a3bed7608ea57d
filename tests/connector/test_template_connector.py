"""The template connector a vendor copies (`reference_impl/connector/template.py`, docs/vendor.md "Your first
hour") passes the whole connector suite, run on it as on a vendor's class (`--kv-connector module:Class`):

* twice, started together: with its `kvconform_*` backdoors, and with them hidden (`--kv-connector-backdoors
  off`), as a vendor who deletes them runs it; both with the async-load profile declared, so the checks that
  exercise asynchronous loads (C10, C20, C21, C27, C29) load asynchronously;
* every check of the catalogue runs, none fails or errors, and only the reviewed skips below happen (a check
  that turned inconclusive, e.g. C11 or C26 without their preemption, fails this test);
* every multi-group preset ran and passed: the template declares `SupportsHMA`, so none is skipped as "not
  HMA-capable".

Bad options are one ValueError naming the option, its value and what is accepted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reference_impl.config.objects import KVTransferConfig
from reference_impl.engine.core import EngineConfig, EngineCore
from reference_impl.engine.presets import PRESETS
from suites.connector.catalogue import CHECKS
from tests.connector.suite_process import results_by_test, run_together, suite_command
from tests.once import once_per_session

TEMPLATE = "reference_impl.connector.template:TemplateConnector"
EXTRA_CONFIG = json.dumps({"kvconform": {"async_load_config": {"load_async": True}, "block_size_option": "chunk_size"}})
BACKDOOR_MODES = ("on", "off")

# Reviewed: the tests the template may skip, per backdoor mode, with the start of the reason.
_NO_EVENTS = "not applicable: the connector emits no KV cache events"  # C32 is a SHOULD about events, if emitted
_C08_NEEDS_BACKDOOR = "not applicable: backdoors are off"  # C08 (SHOULD) decides only through kvconform_evict
EXPECTED_SKIPS = {
    "on": {"test_c32_events_group_aware[TemplateConnector-fa+swa]": _NO_EVENTS},
    "off": {
        "test_c32_events_group_aware[TemplateConnector-fa+swa]": _NO_EVENTS,
        **{f"test_c08_swa_needs_only_window[TemplateConnector-{p}]": _C08_NEEDS_BACKDOOR
           for p in ("fa+swa", "fa16+swa32", "fa+swa+mamba", "fa+swa600")},
        # The template's store lives in its process: C36 tells salted keys from that only through the keys backdoor.
        "test_c36_determinism_across_processes[TemplateConnector]":
            "not applicable: the store does not outlive its process",
    },
}
MULTI_GROUP_PRESETS = sorted(name for name, preset in PRESETS.items() if len(preset.groups) > 1)


def suite_runs(folder: Path) -> dict[str, dict]:
    """The whole connector suite on the template, backdoors on and off (two pytest processes, one core each).

    Returns mode -> {"returncode", "stdout" (its tail), "results": test name -> results.json entry}."""
    commands = {mode: suite_command(folder / f"{mode}.json", [TEMPLATE], extra_config=EXTRA_CONFIG, backdoors=mode)
                for mode in BACKDOOR_MODES}
    return {mode: {"returncode": status, "stdout": stdout[-3000:], "results": results_by_test(folder / f"{mode}.json")}
            for mode, (status, stdout) in run_together(commands).items()}


@pytest.fixture(scope="module")
def all_runs(request) -> dict[str, dict]:
    """The two suite runs, once per test session however xdist spreads this module's tests."""
    return once_per_session(request, "template-connector-runs", suite_runs)


@pytest.fixture(params=BACKDOOR_MODES, ids=["with-backdoors", "without-backdoors"])
def run(request, all_runs):
    """(backdoor mode, that run)."""
    return request.param, all_runs[request.param]


def test_the_template_passes_the_connector_suite(run):
    mode, result = run
    entries = result["results"]
    assert result["returncode"] == 0 and entries, f"pytest exited {result['returncode']}:\n{result['stdout']}"
    bad = {name: (e["status"], e.get("message")) for name, e in entries.items() if e["status"] not in ("passed", "skipped")}
    assert not bad, f"backdoors {mode}: {bad}"
    skipped = {name: e.get("message") or "" for name, e in entries.items() if e["status"] == "skipped"}
    unexpected = {name: why for name, why in skipped.items()
                  if not why.startswith(EXPECTED_SKIPS[mode].get(name, "\0"))}
    assert not unexpected, f"backdoors {mode}: skipped beyond the reviewed list: {unexpected}"
    assert set(skipped) == set(EXPECTED_SKIPS[mode]), \
        f"backdoors {mode}: a reviewed skip did not happen (update EXPECTED_SKIPS): {set(EXPECTED_SKIPS[mode]) - set(skipped)}"


def test_every_check_ran(run):
    """Every check of the catalogue has cells (which of them may skip: EXPECTED_SKIPS, above)."""
    mode, result = run
    ran = {e["cell"]["check"].split()[0] for e in result["results"].values()}
    assert ran == set(CHECKS), f"backdoors {mode}: checks with no cell: {sorted(set(CHECKS) - ran)}"


@pytest.mark.parametrize("preset", MULTI_GROUP_PRESETS)
def test_every_multi_group_preset_ran(run, preset):
    mode, result = run
    cells = [e for e in result["results"].values() if e["cell"]["preset"] == preset]
    assert cells, f"backdoors {mode}: no check ran on {preset}"
    not_passed = {e["id"]: e.get("message") for e in cells if e["status"] != "passed"
                  and e["id"].split("::")[-1] not in EXPECTED_SKIPS[mode]}
    assert not not_passed, f"backdoors {mode}: on {preset}: {not_passed}"


@pytest.mark.parametrize("extra, message", [
    ({"chunk_size": 100}, "kv_connector_extra_config.chunk_size is 100; accepted: a multiple of every attention "
                          "block size (group 0: 16)"),
    ({"chunk_size": "256"}, "kv_connector_extra_config.chunk_size is '256'; accepted: a positive integer"),
    ({"chunk_size": 0}, "kv_connector_extra_config.chunk_size is 0; accepted: a positive integer"),
    ({"chunk_sise": 256}, "kv_connector_extra_config has unknown keys ['chunk_sise']; accepted: ['chunk_size', "
                          "'load_async']"),
])
def test_bad_options_are_one_line_errors(extra, message):
    config = EngineConfig(kv_transfer_config=KVTransferConfig(
        kv_connector="TemplateConnector", kv_role="kv_both", kv_connector_module_path="reference_impl.connector.template",
        kv_connector_extra_config=extra))
    with pytest.raises(ValueError) as info:
        EngineCore("fa_only", config)
    assert str(info.value) == message
