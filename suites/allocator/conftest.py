"""Allocator suite glue: every test records its cell (target, scenario, spec section)."""

import os

import pytest

from harness import outcomes


def pytest_configure(config):
    config.addinivalue_line("markers", "needs(*capabilities): the allocator capabilities a scenario needs; "
                                       "on a target without one it is N/A (skipped with the reason)")


@pytest.fixture(autouse=True)
def _record_allocator_cell(request, kvconform_record, kv_allocator):
    section = getattr(request.module, "SECTION", "?")
    kvconform_record(suite="allocator", cell={"target": kv_allocator.name, "scenario": request.node.name,
                                              "section": section})


@pytest.fixture(autouse=True)
def _allocator_needs(request, kv_allocator, _record_allocator_cell):
    """Apply the scenario's `needs` marks (module and test level) to the target under test. The cell is
    recorded first, so a scenario N/A on a release is the same cell as on a release where it runs (`kvconform
    diff` of two releases' runs lines them up)."""
    for mark in request.node.iter_markers("needs"):
        for capability in mark.args:
            require(kv_allocator, capability)


@pytest.fixture
def target(kv_allocator):
    """The allocator target under test."""
    return kv_allocator


def require(target, capability: str) -> None:
    """Skip unless the target has `capability`: one the target declares (`strict_input_validation`, ...),
    or one of vLLM's allocator API (`harness.targets.allocator.capabilities`), probed from the target's
    modules, where an implementation without it is "N/A on X.Y.Z: reason" (the reference has them all). A
    third-party target without `require` is taken to have every API capability."""
    from harness.targets.allocator.capabilities import CAPABILITIES as RELEASE_CAPABILITIES

    if capability == "default_none_hash_seed" and os.environ.get("PYTHONHASHSEED"):
        return  # every release derives NONE_HASH from PYTHONHASHSEED when it is set
    if capability in RELEASE_CAPABILITIES:
        release_require = getattr(target, "require", None)
        if release_require is not None:
            release_require(capability)
        return
    if capability not in target.capabilities:
        outcomes.not_applicable("feature", f"target {target.name} lacks capability {capability!r}")
