"""Legal connector behaviour the suite once reported as a finding on vLLM's connectors (issue of the CPU
offloading connectors): each check must pass a correct connector that behaves so, and still fail its buggy twin.

* A store owned by the engine (profile `store_scope` "engine", as vLLM's OffloadingConnector and
  SimpleCPUOffloadConnector keep their CPU tier): C07 read back on a fresh engine, which starts empty by design,
  and reported "no hit for any prefix"; C36 looked up on a fresh engine and in other processes.
* Hits that end inside a block (LMCache lowers a full-prompt hit by one token; OffloadingConnector's partial
  tails): C06 required every group's block size, which vLLM 0.33's scheduler does not.
* Stores deferred to the next step's `handle_preemptions` (OffloadingConnector): C24's and C25's forced reuse
  races overwrote every block the schedule freed before the workers ran, re-allocated or not; vLLM overwrites
  only a block it re-allocated, and only after that hook.
* vLLM's CPU-offloading connectors refuse a Mamba group in mamba_cache_mode 'none' by design (C03): N/A with
  vLLM's reason, not a failure.

The checks run in this process through the suite's own `CheckContext`, as the suite runs them; the vLLM cases
need the installed vLLM (skipped without one: run with the vLLM venv and `PYTHONPATH` of this tree).
"""

from __future__ import annotations

import importlib.util

import pytest
from _pytest.outcomes import Failed

from harness.targets.connector.profile import split_declaration
from harness.targets.connector.target import ConnectorTarget
from reference_impl.engine.presets import CORE_PRESETS
from suites.connector import test_api, test_isolation, test_lookup, test_races
from suites.connector.context import CheckContext, prompt
from tests.vllm_venvs import needs_vllm as needs_vllm_reason

LEGAL = "tests.connector.legal_variants"
BUGGY = "tests.connector.buggy"
HAS_VLLM = importlib.util.find_spec("vllm") is not None
needs_vllm = pytest.mark.skipif(not HAS_VLLM, reason=needs_vllm_reason())
ENGINE_OWNED = {"kvconform": {"store_scope": "engine"}}


def _context(cls: str, preset: str | None, check_id: str, extra: dict | None = None,
             module: str = LEGAL) -> CheckContext:
    extra, declared = split_declaration(extra or {})  # as the plugin splits --kv-connector-extra-config
    target = ConnectorTarget(cls, f"{module}:{cls}", "--kv-connector", extra_config=extra, declared=declared)
    return CheckContext(target, preset, check_id=check_id)


def _run(ctx: CheckContext, check, *args):
    try:
        check(ctx, *args)
    finally:
        ctx.close()


@pytest.mark.parametrize("preset", ["fa+swa", "fa+swa+mamba"])
def test_c07_reads_back_an_engine_owned_store_on_the_engine_that_stored(preset):
    _run(_context("EngineOwnedStoreConnector", preset, "C07", ENGINE_OWNED), test_lookup.test_c07_hit_min_over_groups,
         preset)


def test_c07_without_the_declaration_reads_on_a_fresh_engine_and_finds_nothing():
    """What the suite reported for vLLM's offloading connectors: without the store scope, a fresh engine reads."""
    ctx = _context("EngineOwnedStoreConnector", "fa+swa", "C07")
    with pytest.raises(Failed, match="the connector offered no hit for any prefix of a prompt it had seen"):
        _run(ctx, test_lookup.test_c07_hit_min_over_groups, "fa+swa")


def test_c07_still_catches_a_wrong_hit_on_an_engine_owned_store():
    ctx = _context("EngineOwnedFullAttentionHitConnector", "fa+swa", "C07", ENGINE_OWNED)
    with pytest.raises(Failed, match="after a hole in what the connector saw"):
        _run(ctx, test_lookup.test_c07_hit_min_over_groups, "fa+swa")


def test_c36_on_an_engine_owned_store_judges_this_engine_then_is_not_applicable(tmp_path):
    ctx = _context("EngineOwnedStoreConnector", None, "C36", ENGINE_OWNED)
    with pytest.raises(pytest.skip.Exception, match="N/A: the connector's store is owned by its engine .*no other "
                                                    "process can read it"):
        _run(ctx, test_isolation.test_c36_determinism_across_processes, tmp_path)


def _disk_config(tmp_path) -> dict:
    """docs/vendor.md's configuration for the LMCache-like connector: a small CPU store and a disk tier."""
    return {"cpu_bytes": 400_000, "disk_path": str(tmp_path / "disk"), "disk_bytes": 800_000}


def test_c36_passes_a_backdoorless_connector_with_a_disk_tier_black_box(tmp_path):
    """The vendor's reproduction of issue 35: no backdoors, a disk tier configured. C36 skipped ("the store does not
    outlive its process"): its processes built the connector without the run's extra config, so the store of the
    first construction had no disk tier. Now the disk tier's objects are found again by a new process."""
    ctx = _context("BackdoorlessConnector", None, "C36", _disk_config(tmp_path))
    assert ctx.optional_backdoor(ctx.cls, "kvconform_object_keys") is None
    _run(ctx, test_isolation.test_c36_determinism_across_processes, tmp_path)


def test_c36_catches_salted_keys_with_a_disk_tier_black_box(tmp_path):
    ctx = _context("BackdoorlessSaltedKeysConnector", None, "C36", _disk_config(tmp_path))
    with pytest.raises(Failed, match="keys depend on the process"):
        _run(ctx, test_isolation.test_c36_determinism_across_processes, tmp_path)


def test_c36_without_a_persistent_store_decides_nothing_unless_the_profile_declares_it(tmp_path):
    """A store that lives and dies with its process, no backdoor: "inconclusive" (a MUST check that decided
    nothing) unless the profile says so, then N/A."""
    with pytest.raises(pytest.skip.Exception, match="^inconclusive: the store did not outlive its process"):
        _run(_context("BackdoorlessConnector", None, "C36", {"cpu_bytes": 400_000}),
             test_isolation.test_c36_determinism_across_processes, tmp_path)
    declared = {"cpu_bytes": 400_000, "kvconform": {"store_scope": "process"}}
    with pytest.raises(pytest.skip.Exception, match="^N/A: the connector's store lives and dies with its process"):
        _run(_context("BackdoorlessConnector", None, "C36", declared),
             test_isolation.test_c36_determinism_across_processes, tmp_path)


@pytest.mark.parametrize("preset", ["fa_only", "fa16+swa32"])
def test_c06_takes_a_hit_that_ends_inside_a_block(preset):
    _run(_context("OneTokenShortHitConnector", preset, "C06"), test_lookup.test_c06_hit_alignment, preset)


def test_c06_still_catches_a_hit_between_two_mamba_states():
    ctx = _context("OneTokenShortHitConnector", "fa+mamba_align", "C06")
    with pytest.raises(Failed, match="is not on a Mamba state boundary"):
        _run(ctx, test_lookup.test_c06_hit_alignment, "fa+mamba_align")


@pytest.mark.parametrize("preset", test_races.SWA_PRESETS)
def test_c24_takes_stores_deferred_to_the_next_steps_handle_preemptions(preset):
    _run(_context("DeferredStoreConnector", preset, "C24"), test_races.test_c24_swa_reuse_race_forced, preset)


@pytest.mark.parametrize("preset", CORE_PRESETS)
def test_c25_takes_a_finished_requests_stores_deferred_to_the_next_steps_handle_preemptions(preset):
    _run(_context("DeferredStoreConnector", preset, "C25"), test_races.test_c25_finish_reuse_race_forced, preset)


@pytest.mark.parametrize("preset", ["fa+swa", "fa+swa8"])
def test_c24_still_catches_stores_copied_after_the_next_forward(preset):
    ctx = _context("OutOfWindowStoreConnector", preset, "C24", module=BUGGY)
    with pytest.raises(Failed, match="the model read wrong KV — while: reloading prefixes of a request whose "
                                     "out-of-window blocks were reused"):
        _run(ctx, test_races.test_c24_swa_reuse_race_forced, preset)


@pytest.mark.parametrize("preset", CORE_PRESETS)
def test_c25_still_catches_a_finished_requests_store_copied_after_the_next_forward(preset):
    ctx = _context("FinishNoDelayConnector", preset, "C25", module=BUGGY)
    with pytest.raises(Failed, match="the model read wrong KV"):
        _run(ctx, test_races.test_c25_finish_reuse_race_forced, preset)


@needs_vllm
@pytest.mark.parametrize("name", ["OffloadingConnector", "SimpleCPUOffloadConnector"])
def test_vllm_cpu_offloading_connectors_own_their_store_by_reviewed_data(name):
    from harness.targets.connector.selection import connector_target

    assert connector_target(f"vllm:{name}").profile.store_scope == "engine"
    assert connector_target(f"vllm:MultiConnector[ExampleConnector,{name}]").profile.store_scope == "engine"
    assert connector_target("vllm:ExampleConnector").profile.store_scope == "shared"


@needs_vllm
@pytest.mark.parametrize("name, reason", [
    ("OffloadingConnector", "need --enable-prefix-caching to align block sizes"),
    # 0.33+: its MambaManager asserts 'align'; 0.32.0: its coordinator asserts the block sizes a multiple of the
    # scheduler block, where resolve_kv_cache_block_sizes hashes with a Mamba group outside 'align' mode
    ("SimpleCPUOffloadConnector", "(Mamba prefix caching requires mamba_cache_mode='align'|real block_size must be "
                                  "divisible by hash_block_size)"),
])
def test_c03_reads_vllms_refusal_of_a_mamba_none_group_as_not_applicable(name, reason):
    from harness.targets.connector.selection import connector_target

    # The layout a vLLM release builds for fa+swa+mamba (every block 256: harness.targets.connector.vllm_layouts).
    ctx = CheckContext(connector_target(f"vllm:{name}"), "fa+swa+mamba@block256", check_id="C03")
    with pytest.raises(pytest.skip.Exception, match=f"N/A: {name} refuses a Mamba group in mamba_cache_mode 'none' "
                                                    f"by design: .*{reason}"):
        _run(ctx, test_api.test_c03_group_discovery_rejects, "fa+swa+mamba@block256")



@pytest.mark.parametrize("preset, end, why", [
    ("fa16+swa32", 255, None),  # inside a block of both groups: served from the whole blocks ending at 256
    ("fa16+swa32", 256, None),
    ("fa16+swa32", 300, "never exposed tokens 288-303"),  # its block was never computed in full
    ("fa+mamba_align", 255, "Mamba group 1 has no state boundary at 255"),
])
def test_c07_exposure_serves_a_hit_inside_a_block_from_the_whole_block(preset, end, why):
    """C07's servable-hit oracle: an attention hit may end inside a block (vLLM's scheduler takes it; LMCache and
    OffloadingConnector answer such hits), a Mamba hit only where a state was kept."""
    ctx = _context("EngineOwnedStoreConnector", preset, "C07")
    try:
        engine = ctx.engine()
        tokens = prompt(5, 300)
        ctx.run(engine, tokens)
        got = ctx.exposure.unservable(engine, tokens + prompt(6, 100), end)  # a longer prompt of the same prefix
        assert (got is None) if why is None else (why in (got or "")), got
    finally:
        ctx.close()
