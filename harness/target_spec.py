"""Target specs: how the command line and the pytest plugin name an implementation under test.

One grammar for every kind of target (config `--hma-target`, allocator `--kv-allocator`, connector
`--kv-connector`), read by `kvconform report` and by the pytest plugin alike:

    NAME           a built-in name of that kind (`KINDS`: e.g. `vllm`, `reference`, `LMCacheLikeConnector`)
    vllm:NAME      connectors only: a connector the installed vLLM registers (`vllm:MultiConnector[A,B]`)
    module:attr    an object importable from a module (`attr` may be dotted)

Any mistake is a `TargetError`: one line `OPTION SPEC: why; accepted: ...`, exit status 4 (pytest's usage
error status is 4 too), whether it comes from the spec's shape, an import, or the target's own loader.
This module parses and imports; what each kind then does with the object is its own (`load_config_target`
here; the allocator and connector plugins call theirs).
"""

from __future__ import annotations

import difflib
import importlib
import inspect
from dataclasses import dataclass
from typing import Any, Callable

from harness.errors import EXIT_TARGET, UsageError
from harness.standalone import standalone_module

VLLM_PREFIX = "vllm:"


class TargetError(UsageError):
    """A target that cannot be used: one line naming the option, the spec and why; exit status 4."""

    def __init__(self, option: str, spec: str, why: str):
        super().__init__(f"{option} {spec}: {why}", EXIT_TARGET)
        self.option, self.spec, self.why = option, spec, why


@dataclass(frozen=True)
class TargetKind:
    """One kind of target: its option, what `module:attr` must name, and its built-in names.

    `builtins` maps a name to the `module:attr` it stands for; with `call_builtin` that object is a loader
    called with no arguments (`vllm` for the config matrix: it checks the installed release first)."""

    kind: str
    option: str
    form: str
    builtins: dict[str, str]
    call_builtin: bool = False
    vllm_names: bool = False

    def accepted(self) -> str:
        """The accepted forms, for error messages and help texts."""
        forms = [self.form] + ([f"{VLLM_PREFIX}NAME"] if self.vllm_names else [])
        return f"{' or '.join(forms)} or one of {', '.join(self.builtins)}"


#: The prefix that names one of kvconform's own connectors as the report shows it (`kvconform:ExampleConnector`,
#: not vLLM's class of the same name, which is `vllm:ExampleConnector`).
KVCONFORM_PREFIX = "kvconform:"


def _kvconform_connectors() -> dict[str, str]:
    """kvconform's own connectors by name, from their one reader (`reference_impl.connector.builtin_names`), run by
    its path without importing the reference engine: a pytest session of another project never loads it."""
    return standalone_module("connector/builtin_names.py").BUILTIN_CONNECTORS


#: The built-in connectors (kvconform's reference engine) by name.
BUILTIN_CONNECTORS = _kvconform_connectors()

KINDS: dict[str, TargetKind] = {
    "config": TargetKind("config", "--hma-target", "module:callable",
                         {"vllm": "harness.targets.config.vllm_target:load_target"}, call_builtin=True),
    "allocator": TargetKind("allocator", "--kv-allocator", "module:factory",
                            {"reference": "harness.targets.allocator.target:make_reference_target",
                             "vllm": "harness.targets.allocator.target:make_vllm_target"}),
    "connector": TargetKind("connector", "--kv-connector", "module:Class", BUILTIN_CONNECTORS, vllm_names=True),
}


@dataclass(frozen=True)
class TargetSpec:
    """A parsed spec: exactly one of `builtin`, `vllm_name`, or `module` + `attribute` is set."""

    kind: TargetKind
    text: str
    option: str
    builtin: str | None = None
    vllm_name: str | None = None
    module: str | None = None
    attribute: str | None = None

    def error(self, why: str) -> TargetError:
        """The one-line error for this spec."""
        return TargetError(self.option, self.text, why)

    @property
    def path(self) -> str | None:
        """`module:attr` this spec imports (a built-in's path for a built-in name; None for `vllm:`)."""
        if self.builtin is not None:
            return self.kind.builtins[self.builtin]
        return None if self.module is None else f"{self.module}:{self.attribute}"


def parse_spec(kind: str, text: str, option: str | None = None) -> TargetSpec:
    """Parse `text` as a spec of `kind` ("config", "allocator" or "connector"); TargetError if malformed.
    `option` names where it came from in messages (default: the kind's pytest option)."""
    target_kind = KINDS[kind]
    option = option or target_kind.option
    text = text.strip()
    if text in target_kind.builtins:
        return TargetSpec(target_kind, text, option, builtin=text)
    if target_kind.vllm_names and text.startswith(KVCONFORM_PREFIX):
        name = text[len(KVCONFORM_PREFIX):]
        if name not in target_kind.builtins:
            raise TargetError(option, repr(text), f"names none of kvconform's connectors ({', '.join(target_kind.builtins)})")
        return TargetSpec(target_kind, text, option, builtin=name)
    if target_kind.vllm_names and text.startswith(VLLM_PREFIX):
        if not text[len(VLLM_PREFIX):]:
            raise TargetError(option, repr(text), f"names no connector; accepted: {target_kind.accepted()}")
        return TargetSpec(target_kind, text, option, vllm_name=text[len(VLLM_PREFIX):])
    module, sep, attribute = text.partition(":")
    if not sep or not module or not attribute:
        close = difflib.get_close_matches(text, target_kind.builtins, n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]}?" if close else ""
        raise TargetError(option, repr(text) if not text else text,
                          f"not of the form {target_kind.accepted()}{hint}")
    return TargetSpec(target_kind, text, option, module=module, attribute=attribute)


def _one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"


def import_object(spec: TargetSpec) -> Any:
    """The object `spec.path` names (a built-in's path for a built-in name); TargetError on failure."""
    module_name, _, attribute = spec.path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise spec.error(f"module {module_name!r} does not import (no module named {exc.name!r})") from None
    except Exception as exc:  # any import-time failure of someone else's module is a target error
        raise spec.error(f"module {module_name!r} does not import ({_one_line(exc)})") from None
    target: Any = module
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise spec.error(f"module {module_name!r} has no attribute {attribute!r}"
                             f"{_attribute_hint(target, part, module_name)}") from None
    return target


# Names a "has no attribute" message lists at most.
_MAX_NAMES = 8


def _attribute_hint(owner: Any, name: str, module_name: str) -> str:
    """What `owner` does offer: the public name closest to a misspelt `name`, else the classes and functions the
    module defines itself (not what it imports), so a typo'd `mod:MyConector` says what to write instead."""
    public = [n for n in dir(owner) if not n.startswith("_")]
    close = difflib.get_close_matches(name, public, n=1, cutoff=0.75)
    if close:
        return f"; did you mean {close[0]}?"
    own = [n for n in public if getattr(getattr(owner, n, None), "__module__", None) == module_name
           and callable(getattr(owner, n, None))]
    if not own:
        return ""
    return f"; it defines {', '.join(own[:_MAX_NAMES])}{', …' if len(own) > _MAX_NAMES else ''}"


def call_loader(spec: TargetSpec, loader: Any) -> Any:
    """`loader()`: a built-in's loader or an allocator factory. A UsageError it raises keeps its reason
    (e.g. which vLLM is installed); any other exception says the target cannot be built here."""
    if not callable(loader):
        raise spec.error(f"{type(loader).__name__} object is not callable; expected {spec.kind.accepted()}")
    try:
        return loader()
    except TargetError:
        raise
    except UsageError as exc:
        raise spec.error(str(exc)) from None
    except Exception as exc:
        raise spec.error(f"the target cannot be built here ({_one_line(exc)})") from None


def check_config_shape(spec: TargetSpec, target: Any) -> Callable[[dict], dict]:
    """`target` itself if it can be called with exactly one positional argument (the case)."""
    if not callable(target):
        raise spec.error(f"{type(target).__name__} object is not callable; expected {spec.kind.accepted()}")
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):
        return target  # builtins without a signature: trust the call
    try:
        signature.bind({})
    except TypeError:
        raise spec.error(f"callable has signature {signature}; expected one positional parameter (the case dict)") from None
    return target


def load_config_target(text: str, option: str | None = None) -> Callable[[dict], dict]:
    """The config target a spec names (a built-in's loader is called); TargetError (exit 4) on failure."""
    spec = parse_spec("config", text, option)
    target = import_object(spec)
    if spec.builtin is not None and spec.kind.call_builtin:
        target = call_loader(spec, target)
    return check_config_shape(spec, target)


def load_allocator_target(text: str, option: str | None = None) -> Any:
    """The allocator target a spec names: its factory, called; TargetError (exit 4) on failure."""
    spec = parse_spec("allocator", text, option)
    return call_loader(spec, import_object(spec))
