"""Loading a config target from its spec (`module:callable` or a short name) and checking its shape.

A config target takes one case dict and returns one outcome dict (the `kvconform resolve` schema).
Every way this can go wrong becomes a `UsageError` with exit code 4 and one line naming the spec.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any, Callable

from harness.errors import EXIT_TARGET, UsageError
from harness.targets import TARGET_ALIASES, load_named_target

ACCEPTED = "module:callable (a function taking one case dict) or one of: " + ", ".join(sorted(TARGET_ALIASES))


def _fail(spec: str, why: str) -> UsageError:
    return UsageError(f"target {spec!r}: {why}", EXIT_TARGET)


def check_target_shape(spec: str, target: Any) -> Callable[[dict], dict]:
    """`target` itself if it can be called with exactly one positional argument (the case)."""
    if not callable(target):
        raise _fail(spec, f"{type(target).__name__} object is not callable; expected {ACCEPTED}")
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):
        return target  # builtins without a signature: trust the call
    try:
        signature.bind({})
    except TypeError:
        raise _fail(spec, f"callable has signature {signature}; expected one positional parameter (the case dict)") from None
    return target


def load_target(spec: str) -> Callable[[dict], dict]:
    """Import and check the target a spec names; raise UsageError (exit 4) with one line on failure."""
    spec = spec.strip()
    if spec in TARGET_ALIASES:
        return check_target_shape(spec, load_named_target(spec))
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise _fail(spec, f"not of the form {ACCEPTED}")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise _fail(spec, f"module {module_name!r} does not import (no module named {exc.name!r})") from None
    except Exception as exc:  # any import-time failure of someone else's module is a target error
        raise _fail(spec, f"module {module_name!r} does not import ({type(exc).__name__}: {exc})") from None
    target: Any = module
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise _fail(spec, f"module {module_name!r} has no attribute {attribute!r}") from None
    return check_target_shape(spec, target)
