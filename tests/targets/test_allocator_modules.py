"""Scenarios reach an allocator's optional APIs through the target's module map, never through its name
(`harness.targets.allocator_target.target_module`): a third-party target that maps vLLM's modules runs the
HiSparse scenarios, one that maps none is skipped with the modules it lacks."""

from __future__ import annotations

import dataclasses

import pytest

from harness.targets.allocator_target import REFERENCE_MODULES, ReferenceAllocatorTarget
from harness.targets.vllm_allocator import VllmAllocatorTarget
from suites.allocator.helpers import hisparse_api as _api


def test_a_renamed_target_with_a_module_map_gets_the_hisparse_api():
    api = _api(ReferenceAllocatorTarget(name="acme-allocator"))
    assert api.layout.__name__ == "reference_impl.kv_cache.hisparse_layout"
    assert api.bind.__module__ == "reference_impl.kv_cache.hisparse_coordinator"


def test_a_target_without_the_modules_is_skipped_naming_them():
    target = ReferenceAllocatorTarget(name="acme-allocator", modules={
        k: v for k, v in REFERENCE_MODULES.items() if not k.startswith("v1.hisparse.")})
    with pytest.raises(pytest.skip.Exception) as info:
        _api(target)
    assert "v1.hisparse.layout, v1.hisparse.coordinator" in str(info.value)


def test_the_vllm_target_maps_every_module_to_vllms_own():
    default = next(f for f in dataclasses.fields(VllmAllocatorTarget) if f.name == "modules").default_factory()
    assert default == {name: f"vllm.{name}" for name in REFERENCE_MODULES}
    assert default["v1.core.block_pool"] == "vllm.v1.core.block_pool"
