"""Named targets: short names for implementations the suites can run against.

`--hma-target NAME` (and `kvconform report --target NAME`) accept either `module:callable` or one of the
names below. A name maps to a zero-argument loader that returns the target callable; a loader that
cannot provide its target raises `harness.errors.UsageError` with exit code 4 and one line saying why.
"""

from __future__ import annotations

import importlib
from typing import Callable

# Target name -> "module:loader". The loader is called with no arguments and returns the target.
TARGET_ALIASES: dict[str, str] = {
    "vllm": "harness.targets.vllm_config:load_target",
}


def load_named_target(name: str) -> Callable[[dict], dict] | None:
    """The target callable a short name stands for, or None when `name` is not an alias."""
    spec = TARGET_ALIASES.get(name)
    if spec is None:
        return None
    module_name, _, attr = spec.partition(":")
    loader = getattr(importlib.import_module(module_name), attr)
    return loader()
