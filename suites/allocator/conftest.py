"""Allocator suite glue: every test records its cell (target, scenario, spec section)."""

import pytest


@pytest.fixture(autouse=True)
def _record_allocator_cell(request, kvconform_record, kv_allocator):
    section = getattr(request.module, "SECTION", "?")
    kvconform_record(suite="allocator", cell={"target": kv_allocator.name, "scenario": request.node.name,
                                              "section": section})


@pytest.fixture
def target(kv_allocator):
    """The allocator target under test."""
    return kv_allocator


def require(target, capability: str) -> None:
    """Skip unless the target declares `capability`."""
    if capability not in target.capabilities:
        pytest.skip(f"not applicable: target {target.name} lacks capability {capability!r}")
