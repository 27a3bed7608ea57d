"""`--kv-allocator module:factory`: which allocator implementation the allocator suite and benchmarks drive.

Default: the reference (`reference`). Built-in names and the spec's grammar: `harness.target_spec`
(`vllm`: vLLM's own `v1/core`, needs vLLM importable).

A target named explicitly is loaded when pytest starts: one that cannot be loaded (a module that does not
import, a missing factory, vLLM absent for `vllm`, a misspelled alias) stops the run before anything runs,
with one line and pytest's usage-error status 4, so a CI gate never goes green with nothing tested.
"""

from __future__ import annotations

import pytest

from harness.plugins.activation import is_active
from harness.target_spec import KINDS, TargetError, load_allocator_target

_LOADED = pytest.StashKey[object]()


def pytest_addoption(parser):
    group = parser.getgroup("kvconform")
    group.addoption(
        "--kv-allocator",
        dest="kvconform_kv_allocator",
        default="reference",
        metavar="MODULE:FACTORY",
        help="allocator implementation under test: " + KINDS["allocator"].accepted(),
    )


def pytest_configure(config):
    """Load an explicitly named allocator target at start-up; a failure is a usage error (exit 4)."""
    spec = config.getoption("kvconform_kv_allocator", default="reference")
    if spec == "reference":  # the default loads lazily: runs that never touch the allocator skip torch
        return
    try:
        config.stash[_LOADED] = load_allocator_target(spec)
    except TargetError as exc:
        raise pytest.UsageError(str(exc)) from None


def loaded_allocator_name(config) -> str | None:
    """The name of the allocator target named on the command line (e.g. `vllm-0.13.0`), None for the default."""
    return getattr(config.stash.get(_LOADED, None), "name", None)


def pytest_report_header(config):
    if not is_active(config):
        return []
    return [f"kv-allocator: {config.getoption('kvconform_kv_allocator')}"]


@pytest.fixture(scope="session")
def kv_allocator(pytestconfig):
    """The allocator target selected by --kv-allocator (skips the test if it cannot be imported)."""
    if _LOADED in pytestconfig.stash:
        return pytestconfig.stash[_LOADED]
    return load_allocator_target(pytestconfig.getoption("kvconform_kv_allocator"))


@pytest.fixture(scope="session")
def reference_allocator():
    """The reference allocator target, whatever --kv-allocator says (benchmarks compare against it)."""
    return load_allocator_target("reference")
