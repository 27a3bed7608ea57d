"""Scenarios reach an allocator's optional APIs through the target's module map, never through its name
(`harness.targets.allocator.target.target_module`): a third-party target that maps vLLM's modules runs the
HiSparse scenarios, one that maps none is N/A for lacking HiSparse, one that maps part of it is skipped with
the modules it lacks; and what a target offers is probed from the modules its map names."""

from __future__ import annotations

import pytest

from harness.outcomes import record_of
from harness.targets.allocator.capabilities import CAPABILITIES as RELEASE_CAPABILITIES
from harness.targets.allocator.target import REFERENCE_MODULES, ModuleMapAllocatorTarget, make_reference_target
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
    assert str(info.value) == "not applicable: target 'acme-allocator' maps no module for v1.hisparse.coordinator"
    assert record_of(info.value)["kind"] == "feature", "a typed N/A: the report reads the record, not the wording"


def test_the_reference_has_every_api_capability():
    target = make_reference_target()
    assert target.lacks == {} and target.release_capabilities == set(RELEASE_CAPABILITIES)


def test_a_map_without_a_required_module_is_refused_naming_it():
    with pytest.raises(ValueError, match=r"^modules: no entry for vLLM's 'v1.request'; an allocator target maps "
                                         r"at least v1.kv_cache_interface, "):
        ModuleMapAllocatorTarget("acme", {k: v for k, v in REFERENCE_MODULES.items() if k != "v1.request"})


def test_an_undeclared_capability_is_refused():
    with pytest.raises(ValueError, match=r"^capabilities: 'fast' is not one of strict_input_validation$"):
        ModuleMapAllocatorTarget("acme", dict(REFERENCE_MODULES), frozenset({"fast"}))


def test_the_vllm_map_keeps_every_module_under_its_own_name():
    vllm = pytest.importorskip("vllm")
    from harness.targets.allocator.target import vllm_modules

    modules = vllm_modules()
    assert set(REFERENCE_MODULES) <= set(modules)
    assert modules["v1.core.block_pool"] == "vllm.v1.core.block_pool"
    moved = {"utils.hashing", "v1.core.kv_cache_planning"}  # where a release before the move keeps them
    assert all(path == f"vllm.{name}" for name, path in modules.items() if name not in moved), vllm.__version__
    assert modules["v1.core.kv_cache_planning"] in ("vllm.v1.core.kv_cache_planning", "vllm.v1.core.kv_cache_utils")


def test_a_renamed_target_with_a_module_map_plans_with_its_own_spec_classes():
    from suites.allocator.helpers import planning_api

    api = planning_api(ModuleMapAllocatorTarget("acme-allocator", dict(REFERENCE_MODULES)))
    assert api.planner.__name__ == "reference_impl.kv_cache.kv_cache_planning"
    spec = api.spec("sliding_window", sliding_window=64, head_size=64, dtype="float32")
    assert type(spec) is api.iface.SlidingWindowSpec and spec.page_size_bytes == 16384, "2 x 16 x 2 x 64 x 4 bytes"


def test_reference_extensions_are_not_applicable_by_capability_not_by_name():
    """vLLM's modules under another name run the planning scenarios; kvconform's extensions (tensors from a
    plan, the era-styled grouping stage) are N/A for lacking them, whatever the target is called."""
    from suites.allocator.helpers import extension

    target = ModuleMapAllocatorTarget("reference", dict(REFERENCE_MODULES))
    assert {"kv_tensors", "era_grouping"} <= set(target.lacks) and "grouping" not in target.lacks
    with pytest.raises(pytest.skip.Exception) as info:
        extension(target, "kv_tensors", "kvconform.kv_cache_tensors")
    assert str(info.value).startswith("N/A on reference: allocates no KV cache tensors from a planned config")


def test_a_map_without_a_planner_is_not_applicable_for_grouping():
    from suites.allocator.helpers import planning_api

    target = ModuleMapAllocatorTarget("acme", {k: v for k, v in REFERENCE_MODULES.items()
                                               if k != "v1.core.kv_cache_planning"})
    assert {"grouping", "extensible_kv_cache", "page_padding"} <= set(target.lacks)
    with pytest.raises(pytest.skip.Exception, match=r"^N/A on acme: no KV cache planner \(get_kv_cache_groups"):
        planning_api(target)


def test_planning_input_errors_name_the_field():
    from harness.targets.allocator.target import GroupDesc

    target = make_reference_target()
    with pytest.raises(ValueError, match=r"^kv_cache_layout: 'XYZ' is not one of LBHNC, "):
        target.planning_config(kv_cache_layout="XYZ")
    with pytest.raises(ValueError, match=r"^GroupDesc.dtype must name a torch dtype \(e.g. 'float16', 'float32'\), "
                                         r"got 'float99'$"):
        target.make_spec(GroupDesc("full", dtype="float99"))
    with pytest.raises(ValueError, match=r"^GroupDesc.head_size must be an integer, got '64'$"):
        GroupDesc("full", head_size="64")
