"""reference_impl's standard-library-only modules, run by their path: what a pytest plugin needs to read while a
session of another project must not import the reference engine (tests/test_plugin_dormant.py).

`reference_impl.connector.builtin_names` (kvconform's connectors by name) and `reference_impl.releases` (the
release registry) need nothing but the standard library, so each can run on its own, outside `sys.modules`;
importing them by name would import the `reference_impl` package first.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def standalone_module(relative: str) -> ModuleType:
    """The module at `relative` (a path under the reference_impl package, e.g. "releases.py"), run by its path
    and left out of `sys.modules` once it has run: nothing of reference_impl is imported."""
    spec = importlib.util.find_spec("reference_impl")  # a top-level package: found, not imported
    path = Path(next(iter(spec.submodule_search_locations))) / relative
    name = "_kvconform_" + relative.removesuffix(".py").replace("/", "_")
    module_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module  # while it runs only: a dataclass looks its module up there
    try:
        module_spec.loader.exec_module(module)
    finally:
        del sys.modules[name]
    return module
