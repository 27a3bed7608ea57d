"""`--kv-allocator module:factory`: which allocator implementation the allocator suite and benchmarks drive.

Default: the reference (`harness.targets.allocator_target:make_reference_target`). Alias `vllm`:
`harness.targets.vllm_allocator:make_target` (needs vLLM importable).
"""

from __future__ import annotations

import importlib

import pytest

ALIASES = {
    "reference": "harness.targets.allocator_target:make_reference_target",
    "vllm": "harness.targets.vllm_allocator:make_target",
}


def load_allocator_target(spec: str):
    """Resolve `module:factory` (or an alias) and call the factory; ValueError naming the option if bad."""
    path = ALIASES.get(spec, spec)
    module_name, sep, factory_name = path.partition(":")
    if not sep or not module_name or not factory_name:
        raise ValueError(f"--kv-allocator must be 'module:factory' or one of {', '.join(ALIASES)}, got {spec!r}")
    module = importlib.import_module(module_name)
    factory = getattr(module, factory_name, None)
    if factory is None:
        raise ValueError(f"--kv-allocator: module {module_name!r} has no attribute {factory_name!r}")
    return factory()


def pytest_addoption(parser):
    group = parser.getgroup("kvconform")
    group.addoption(
        "--kv-allocator",
        dest="kvconform_kv_allocator",
        default="reference",
        metavar="MODULE:FACTORY",
        help="allocator implementation under test: module:factory or one of " + ", ".join(ALIASES),
    )


def pytest_report_header(config):
    return [f"kv-allocator: {config.getoption('kvconform_kv_allocator')}"]


@pytest.fixture(scope="session")
def kv_allocator(pytestconfig):
    """The allocator target selected by --kv-allocator (skips the test if it cannot be imported)."""
    spec = pytestconfig.getoption("kvconform_kv_allocator")
    try:
        return load_allocator_target(spec)
    except ImportError as exc:
        pytest.skip(f"not applicable: allocator target {spec!r} is not importable ({exc})")


@pytest.fixture(scope="session")
def reference_allocator():
    """The reference allocator target, whatever --kv-allocator says (benchmarks compare against it)."""
    return load_allocator_target("reference")
