"""`--kv-allocator module:factory`: which allocator implementation the allocator suite and benchmarks drive.

Default: the reference (`harness.targets.allocator_target:make_reference_target`). Alias `vllm`:
`harness.targets.vllm_allocator:make_target` (needs vLLM importable).

A target named explicitly is loaded when pytest starts: one that cannot be loaded (a module that does not
import, a missing factory, vLLM absent for `vllm`, a misspelled alias) stops the run before anything runs,
with one line and pytest's usage-error status 4, so a CI gate never goes green with nothing tested.
"""

from __future__ import annotations

import difflib
import importlib

import pytest

from harness.plugins.activation import is_active

ALIASES = {
    "reference": "harness.targets.allocator_target:make_reference_target",
    "vllm": "harness.targets.vllm_allocator:make_target",
}


class AllocatorTargetError(ValueError):
    """An allocator target that cannot be loaded; the message is one line naming the option and the cause."""


def _one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"


def load_allocator_target(spec: str):
    """Resolve `module:factory` (or an alias) and call the factory; AllocatorTargetError (one line, naming
    the option, the value and what is accepted) when that fails."""
    path = ALIASES.get(spec, spec)
    module_name, sep, factory_name = path.partition(":")
    if not sep or not module_name or not factory_name:
        close = difflib.get_close_matches(spec, ALIASES, n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]}?" if close else ""
        raise AllocatorTargetError(f"--kv-allocator: {spec!r} is neither module:factory nor one of "
                                   f"{', '.join(ALIASES)}{hint}")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # the module itself is broken or absent: say so, once
        raise AllocatorTargetError(f"--kv-allocator {spec}: module {module_name!r} does not import ({_one_line(exc)})") from None
    factory = getattr(module, factory_name, None)
    if not callable(factory):
        raise AllocatorTargetError(f"--kv-allocator {spec}: module {module_name!r} has no factory {factory_name!r}")
    try:
        return factory()
    except Exception as exc:  # e.g. the vllm alias without vLLM installed
        raise AllocatorTargetError(f"--kv-allocator {spec}: the target cannot be built here ({_one_line(exc)})") from None


_LOADED = pytest.StashKey[object]()


def pytest_addoption(parser):
    group = parser.getgroup("kvconform")
    group.addoption(
        "--kv-allocator",
        dest="kvconform_kv_allocator",
        default="reference",
        metavar="MODULE:FACTORY",
        help="allocator implementation under test: module:factory or one of " + ", ".join(ALIASES),
    )


def pytest_configure(config):
    """Load an explicitly named allocator target at start-up; a failure is a usage error (exit 4)."""
    spec = config.getoption("kvconform_kv_allocator", default="reference")
    if spec == "reference":  # the default loads lazily: runs that never touch the allocator skip torch
        return
    try:
        config.stash[_LOADED] = load_allocator_target(spec)
    except AllocatorTargetError as exc:
        raise pytest.UsageError(str(exc)) from None


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
