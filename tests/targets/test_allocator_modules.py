"""Scenarios reach an allocator's optional APIs through the target's module map, never through its name
(`harness.targets.allocator_target.target_module`): a third-party target that maps vLLM's modules runs the
HiSparse scenarios, one that maps none is N/A for lacking HiSparse, one that maps part of it is skipped with
the modules it lacks; and what a target offers is probed from the modules its map names."""

from __future__ import annotations

import pytest

from harness.targets.allocator_capabilities import CAPABILITIES as RELEASE_CAPABILITIES
from harness.targets.allocator_target import REFERENCE_MODULES, ModuleMapAllocatorTarget, make_reference_target
from suites.allocator.helpers import hisparse_api as _api


def test_a_renamed_target_with_a_module_map_gets_the_hisparse_api():
    api = _api(ModuleMapAllocatorTarget("acme-allocator", dict(REFERENCE_MODULES)))
    assert api.layout.__name__ == "reference_impl.kv_cache.hisparse_layout"
    assert api.bind.__module__ == "reference_impl.kv_cache.hisparse_coordinator"


def test_a_target_without_hisparse_modules_is_not_applicable():
    target = ModuleMapAllocatorTarget("acme-allocator", {
        k: v for k, v in REFERENCE_MODULES.items() if not k.startswith("v1.hisparse.")})
    assert {"hisparse", "hisparse_write_back"} <= set(target.lacks), "probed from the map, not from the name"
    with pytest.raises(pytest.skip.Exception) as info:
        _api(target)
    assert str(info.value) == "N/A on acme-allocator: no HiSparse (vllm.v1.hisparse)"


def test_a_target_missing_one_hisparse_module_is_skipped_naming_it():
    target = ModuleMapAllocatorTarget("acme-allocator", {
        k: v for k, v in REFERENCE_MODULES.items() if k != "v1.hisparse.coordinator"})
    with pytest.raises(pytest.skip.Exception) as info:
        _api(target)
    assert "maps no module for vLLM's v1.hisparse.coordinator" in str(info.value)


def test_the_reference_has_every_api_capability():
    target = make_reference_target()
    assert target.lacks == {} and target.release_capabilities == set(RELEASE_CAPABILITIES)


def test_a_map_without_a_required_module_is_refused_naming_it():
    with pytest.raises(ValueError, match=r"^modules: no entry for vLLM's 'v1.request'; an allocator target maps "
                                         r"at least v1.kv_cache_interface, "):
        ModuleMapAllocatorTarget("acme", {k: v for k, v in REFERENCE_MODULES.items() if k != "v1.request"})


def test_an_undeclared_capability_is_refused():
    with pytest.raises(ValueError, match=r"^capabilities: 'fast' is not one of strict_input_validation, "):
        ModuleMapAllocatorTarget("acme", dict(REFERENCE_MODULES), frozenset({"fast"}))


def test_the_vllm_map_keeps_every_module_under_its_own_name():
    vllm = pytest.importorskip("vllm")
    from harness.targets.allocator_target import vllm_modules

    modules = vllm_modules()
    assert set(REFERENCE_MODULES) <= set(modules)
    assert modules["v1.core.block_pool"] == "vllm.v1.core.block_pool"
    assert all(path == f"vllm.{name}" for name, path in modules.items() if name != "utils.hashing"), vllm.__version__
