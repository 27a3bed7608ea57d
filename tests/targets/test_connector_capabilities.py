"""The connector target's capability table (`harness.targets.connector.capabilities`): each installed release's
probed table against the reviewed one (`RELEASES`, read by hand from each release's source), kvconform's
connector protocol with every capability, and a check on a release without the API it needs reported as
"N/A on X.Y.Z: reason", never as a failure."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from harness.outcomes import record_of
from harness.report.connector_section import _is_not_applicable
from harness.targets.connector.capabilities import (CAPABILITIES, FORMS, REFERENCE_MODULES, PROBED_MODULES,
                                                    ReleaseTable, reference_table)
from harness.targets.connector.target import ConnectorTarget
from harness.connector_checks import CHECKS
from suites.connector.catalogue import needs_of
from suites.connector.context import CheckContext
from tests.vllm_venvs import release_python

REPO = Path(__file__).resolve().parents[2]

# Reviewed data: what each release lacks, read by hand from its source (docs/connector-releases.md says where:
# the `def` lines of vllm/distributed/kv_transfer/kv_connector/v1/base.py, the fields of vllm/v1/outputs.py's
# KVConnectorOutput and vllm/v1/core/sched/output.py's dataclasses, vllm/v1/kv_cache_interface.py,
# vllm/config/cache.py, vllm/forward_context.py). Every row not listed is present.
# The layout forms (FlashAttention's get_kv_cache_shape, the model runner's Mamba registration) read in each venv
# (2026-12-05): K and V planes outermost through 0.22.0, blocks outermost from 0.24.0, K and V packed and Mamba
# page views in 0.27.0 and 0.28.0; from 0.30.0 the standardized layout replaces all three (FlashAttention has no
# get_kv_cache_shape there).
_SPLIT = {"kv_blocks_outermost", "kv_packed_content", "mamba_page_view"}
# 0.31.0+ hash blocks as kvconform's engine does (`cache_salt_keys` tagged `("cache_salt", salt)` in
# v1/core/kv_cache_utils.py; 0.13.0-0.30.0 untagged `[request.cache_salt]`).
_SAME_HASHING = {"release_block_hashing"}
RELEASES: dict[str, set[str]] = {
    "0.13.0": _SPLIT | {"loaded_group_ids", "on_new_request", "bind_kv_cache_manager", "handle_preemptions",
               "failed_recving", "transfer_results", "worker_meta",
               "block_state", "standardized_layout", "cache_config_layout", "gpu_block_pool_binding", "scratch_groups"},
    # 0.14.0-0.17.0: handle_preemptions arrives (base.py), nothing else of 0.20.0's; 0.18.0 adds
    # build_connector_worker_meta / KVConnectorOutput.kv_connector_worker_meta; 0.19.0 the Scheduler's
    # bind_gpu_block_pool; 0.22.0 on_new_request (each read in that release's venv, 2026-12-05).
    **{release: _SPLIT | {"loaded_group_ids", "on_new_request", "bind_kv_cache_manager", "failed_recving",
                          "transfer_results", "worker_meta", "block_state", "standardized_layout",
                          "cache_config_layout", "gpu_block_pool_binding", "scratch_groups"}
       for release in ("0.14.0", "0.15.0", "0.16.0", "0.17.0")},
    "0.18.0": _SPLIT | {"loaded_group_ids", "on_new_request", "bind_kv_cache_manager", "failed_recving",
                        "transfer_results", "block_state", "standardized_layout", "cache_config_layout",
                        "gpu_block_pool_binding", "scratch_groups"},
    "0.19.0": _SPLIT | {"loaded_group_ids", "on_new_request", "bind_kv_cache_manager", "failed_recving",
                        "transfer_results", "block_state", "standardized_layout", "cache_config_layout",
                        "scratch_groups"},
    **{release: _SPLIT | {"loaded_group_ids", "on_new_request", "bind_kv_cache_manager", "failed_recving",
                                   "transfer_results", "block_state", "standardized_layout", "cache_config_layout",
                                   "scratch_groups"}
       for release in ("0.20.0", "0.21.0")},
    "0.22.0": _SPLIT | {"loaded_group_ids", "bind_kv_cache_manager", "failed_recving", "transfer_results",
                                 "block_state", "standardized_layout", "cache_config_layout", "scratch_groups"},
    # 0.24.0-0.32.0: probed on their venvs and checked against base.py's `def` lines and scheduler.py's
    # bind_gpu_block_pool (2026-12-05); 0.24.0 and 0.27.0 lack the same rows. 0.23.0 (branch conn, 2026-12-05): as
    # 0.24.0 (base.py's `def` lines the same but 0.24's new has_pending_push_work, no row; scheduler.py:248
    # bind_gpu_block_pool; FlashAttention's (num_blocks, 2, block_size, heads, head_size), flash_attn.py:149).
    **{release: {"kv_packed_content", "mamba_page_view", "loaded_group_ids", "bind_kv_cache_manager",
                        "failed_recving", "transfer_results", "block_state", "standardized_layout",
                        "cache_config_layout", "scratch_groups"}
       for release in ("0.23.0", "0.24.0")},
    "0.27.0": {"loaded_group_ids", "bind_kv_cache_manager", "failed_recving", "transfer_results",
                        "block_state", "standardized_layout", "cache_config_layout", "scratch_groups"},
    "0.28.0": {"loaded_group_ids", "bind_kv_cache_manager", "failed_recving", "transfer_results",
               "block_state", "standardized_layout", "cache_config_layout", "scratch_groups"},
    # 0.29.0 (probed in its venv, 2026-12-05, and read: kv_cache_interface.py has prefix_cacheable,
    # sched/output.py:209 KVConnectorBlockState, config/cache.py:88 kv_cache_layout, scheduler.py:306 still calls
    # bind_gpu_block_pool; base.py has no bind_kv_cache_manager / get_transfer_results / get_loaded_kv_cache_group_ids,
    # outputs.py no failed_recving; FlashAttention has no get_kv_cache_shape, so none of the split layout forms): the
    # block state, standardized layout and scratch groups of 0.30 with 0.27's pool binding.
    "0.29.0": _SPLIT | {"loaded_group_ids", "bind_kv_cache_manager", "failed_recving", "transfer_results"},
    "0.30.0": _SPLIT | {"loaded_group_ids", "gpu_block_pool_binding"},
    "0.31.0": _SPLIT | _SAME_HASHING | {"loaded_group_ids", "gpu_block_pool_binding"},
    "0.32.0": _SPLIT | _SAME_HASHING | {"gpu_block_pool_binding"},
    "0.33.0": _SPLIT | _SAME_HASHING | {"gpu_block_pool_binding"},
    "0.34.0": _SPLIT | _SAME_HASHING | {"resumed_req_ids", "gpu_block_pool_binding"},
}
# 0.13.0-0.27.0: resolve_kv_cache_block_sizes (kv_cache_utils.py, from 0.20.0; 0.13.0-0.19.0 have none) takes a Mamba
# group whose block is not cache_config.block_size for one outside 'align' mode (0.28.0 reads the spec's
# mamba_cache_mode instead), read in each release's venv, 2026-12-05.
for _release in ("0.13.0", "0.14.0", "0.15.0", "0.16.0", "0.17.0", "0.18.0", "0.19.0", "0.20.0", "0.21.0", "0.22.0",
                 "0.23.0", "0.24.0", "0.27.0"):
    RELEASES[_release] |= {"mamba_align_block"}
# 0.29.0+ describe the KV memory as one KVCacheTensor per group with its `layers` (kv_cache_interface.py); 0.13.0-0.28.0
# as one per layer slot (`size, shared_by`), the form slot_tensors.
for _release in ("0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0"):
    RELEASES[_release] |= {"slot_tensors"}


def _probed(release: str) -> dict:
    python = release_python(release)
    done = subprocess.run([str(python), "-m", "harness.targets.connector.capabilities"], cwd=REPO,
                          env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # vLLM may log to stdout first


@pytest.mark.parametrize("release", sorted(RELEASES))
def test_each_installed_release_probes_as_reviewed(release):
    table = _probed(release)
    assert table.pop("version") == release
    lacking = {name for name, present in table.items() if not present}
    assert lacking == RELEASES[release]
    assert set(table) == set(CAPABILITIES) | set(FORMS)


def test_the_protocol_has_every_capability_and_no_vllm_form():
    table = reference_table()
    assert table.capabilities == set(CAPABILITIES) and table.lacks == {}
    assert table.forms == set(), "the adapter's forms are vLLM internals, which kvconform's protocol does not have"


def test_a_reference_or_vendor_target_is_driven_through_the_protocol():
    target = ConnectorTarget("LMCacheLikeConnector", "LMCacheLikeConnector", "built-in", builtin=True)
    assert target.release_table is reference_table()


def test_every_lacks_text_is_one_line_completing_the_na_line():
    for cap in [*CAPABILITIES.values(), *FORMS.values()]:
        assert cap.lacks.strip() == cap.lacks and "\n" not in cap.lacks and not cap.lacks.endswith("."), cap.name


def test_needs_name_capabilities_of_checks_of_the_catalogue():
    for check in CHECKS.values():
        assert set(check.needs) <= set(CAPABILITIES), check.id
    assert needs_of("C22", multi_group=True) == ("hma", "failed_recving")
    assert needs_of("C14", multi_group=False) == ()
    assert needs_of("C03", multi_group=True, scratch=True) == ("hma", "scratch_groups")
    assert needs_of("C14", multi_group=True, mamba_own_block=True) == ("hma", "mamba_align_block")
    assert all(needs_of(c, multi_group=False) == ("hma",) for c in CHECKS if CHECKS[c].multi_group)


def test_an_unknown_capability_is_one_line_naming_it():
    with pytest.raises(ValueError, match=r"^capability: 'events' is not one of hma, loaded_group_ids, "):
        reference_table().require("events")
    with pytest.raises(ValueError, match=r"^capability: 'block_state' is not one of hma, "):
        reference_table().require("block_state")  # a form: no check can need one


# ---- a release shaped like 0.13.0, hand-written from its source ------------------------------------------
def _release_013(monkeypatch) -> ReleaseTable:
    """Modules shaped like vLLM 0.13.0's connector API (the members the probes read), registered under a fake
    package, and their table."""
    from dataclasses import dataclass

    class SupportsHMA:
        def request_finished_all_groups(self, request, block_ids):
            pass

    class KVConnectorBase_V1:  # noqa: N801 - vLLM's class name
        def get_block_ids_with_load_errors(self):
            pass

        def get_finished(self, finished_req_ids):
            pass

    @dataclass
    class KVConnectorOutput:
        finished_sending: set
        finished_recving: set
        invalid_block_ids: set

    @dataclass
    class CachedRequestData:
        req_ids: list
        resumed_req_ids: set

    base = types.ModuleType("fake013.base")
    base.SupportsHMA, base.KVConnectorBase_V1 = SupportsHMA, KVConnectorBase_V1
    base.supports_hma = lambda cls: issubclass(cls, SupportsHMA)
    outputs = types.ModuleType("fake013.outputs")
    outputs.KVConnectorOutput = KVConnectorOutput
    sched = types.ModuleType("fake013.sched")
    sched.CachedRequestData = CachedRequestData
    for module in (base, outputs, sched):
        monkeypatch.setitem(sys.modules, module.__name__, module)
    names = {v: k for k, v in PROBED_MODULES.items()}
    return ReleaseTable("0.13.0", {vllm_name: f"fake013.{names[vllm_name]}" for vllm_name in REFERENCE_MODULES})


def test_a_release_without_failed_recving_lacks_it_with_the_reviewed_reason(monkeypatch):
    table = _release_013(monkeypatch)
    assert table.capabilities == {"hma", "load_error_blocks", "resumed_req_ids"}
    assert table.lacks["failed_recving"] == ("KVConnectorOutput has no failed_recving (a failed load can be reported "
                                             "only as block ids, never per request)")
    with pytest.raises(pytest.skip.Exception) as info:
        table.require("failed_recving")
    assert str(info.value) == ("N/A on 0.13.0: KVConnectorOutput has no failed_recving (a failed load can be reported "
                               "only as block ids, never per request)")


class _OnRelease(ConnectorTarget):
    """A connector target driven through a given release's table (the vLLM target's, without vLLM)."""

    table: ReleaseTable | None = None

    @property
    def release_table(self) -> ReleaseTable:
        return self.table


def _context_on(table: ReleaseTable, check_id: str, preset: str | None) -> CheckContext:
    target = _OnRelease("RecordingHMAConnector", "suites.connector.stub:RecordingHMAConnector", "--kv-connector",
                        extra_config={"log": "connector-capabilities-test"})
    target.table = table
    return CheckContext(target, preset, check_id=check_id)


@pytest.mark.parametrize("check_id, preset, lacking", [
    ("C22", "fa+swa", "KVConnectorOutput has no failed_recving"),
    ("C32", "fa_only", "KVConnectorBase_V1 has no take_events"),
])
def test_a_check_needing_what_the_release_lacks_is_na_not_a_failure(monkeypatch, check_id, preset, lacking):
    table = _release_013(monkeypatch)
    with pytest.raises(pytest.skip.Exception) as info:
        _context_on(table, check_id, preset)
    message = str(info.value)
    assert message.startswith(f"N/A on 0.13.0: {lacking}")
    record = record_of(info.value)
    assert (record["kind"], record["release"]) == ("release", "0.13.0") and record["reason"].startswith(lacking)
    entry = {"status": "skipped", "message": message, "not_applicable": record,
             "cell": {"tier": "MUST"}}
    assert _is_not_applicable(entry), "the report counts it as N/A, not as a check that was not run"


def _resolve_027(kv_cache_config, vllm_config):
    """vLLM 0.27.0's resolve_kv_cache_block_sizes (v1/core/kv_cache_utils.py:626-688), hand-copied without its
    DCP scaling and prefix_match_unit: a Mamba group whose block is not the cache block is taken for one outside
    'align' mode, and the hash block falls back to the scheduler block."""
    import math

    from reference_impl.kv_cache.kv_cache_interface import MambaSpec

    sizes = [g.kv_cache_spec.block_size for g in kv_cache_config.kv_cache_groups]
    scheduler_block_size = math.lcm(*sizes)
    if any(isinstance(g.kv_cache_spec, MambaSpec) and g.kv_cache_spec.block_size != vllm_config.cache_config.block_size
           for g in kv_cache_config.kv_cache_groups):
        return scheduler_block_size, scheduler_block_size
    return scheduler_block_size, math.gcd(*sizes)


def _release_027_hashing(monkeypatch) -> ReleaseTable:
    """kvconform's protocol with 0.27.0's block-size resolution in place of 0.33's."""
    utils = types.ModuleType("fake027.kv_utils")
    utils.resolve_kv_cache_block_sizes = _resolve_027
    monkeypatch.setitem(sys.modules, utils.__name__, utils)
    return ReleaseTable("0.27.0", {**REFERENCE_MODULES, "v1.core.kv_cache_utils": utils.__name__})


def test_a_mamba_align_preset_is_na_where_the_release_hashes_it_at_the_scheduler_block(monkeypatch):
    table = _release_027_hashing(monkeypatch)
    assert table.lacks.keys() == {"mamba_align_block"}
    for preset in ("fa+mamba_align", "fa+swa+mamba"):
        with pytest.raises(pytest.skip.Exception) as info:
            _context_on(table, "C14", preset)
        assert str(info.value).startswith("N/A on 0.27.0: an 'align' Mamba group's block is the cache block size")
    _context_on(table, "C14", "fa16+swa32").close()  # two block sizes without Mamba: hashed at the GCD there too
    _context_on(reference_table(), "C14", "fa+swa+mamba").close()


def test_a_check_with_what_it_needs_runs(monkeypatch):
    table = _release_013(monkeypatch)
    ctx = _context_on(table, "C14", "fa+swa")  # needs SupportsHMA only, which 0.13.0 has
    ctx.close()

