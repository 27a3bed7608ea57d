"""The connector under test: how it is named and loaded, and a guard that turns its misbehaviour into
clear check failures (which hook raised, which hook was running when a check timed out).

A target is a built-in kvconform connector, a `--kv-connector module:Class`, or an entry point of the
group `kvconform.connectors` (its value is `module:Class`).
"""

from __future__ import annotations

import importlib
import threading
from dataclasses import dataclass, field
from importlib import metadata

from harness.targets.connector_profile import ConnectorProfile, profile_for
from reference_impl.connector.base import supports_hma
from reference_impl.connector.factory import check_constructor

ENTRY_POINT_GROUP = "kvconform.connectors"
BACKDOOR_PREFIX = "kvconform_"  # optional white-box accessors a connector may offer the suite


# Hooks the engine calls on every connector (vLLM 0.33's base class has them all).
REQUIRED_HOOKS = ("get_num_new_matched_tokens", "update_state_after_alloc", "build_connector_meta",
                  "update_connector_output", "register_kv_caches", "bind_connector_metadata", "start_load_kv",
                  "wait_for_layer_load", "save_kv_layer", "wait_for_save", "clear_connector_metadata")
REQUIRED_ONE_OF = (("request_finished", "request_finished_all_groups"), ("get_transfer_results", "get_finished"))


class ConnectorLoadError(Exception):
    """The connector class cannot be used at all (import failure, not a class, bad constructor)."""


class ConnectorHookError(AssertionError):
    """A connector hook raised; the message names the hook and the original error."""


@dataclass
class ConnectorTarget:
    """A connector class to check, with the extra config every instance gets."""

    name: str
    spec: str
    source: str
    extra_config: dict = field(default_factory=dict)
    builtin: bool = False
    _cls: type | None = None
    declared: dict = field(default_factory=dict)  # the vendor's "kvconform" declaration (connector_profile)

    def load(self) -> type:
        """The connector class; ConnectorLoadError with a one-line reason when it is unusable."""
        if self._cls is not None:
            return self._cls
        module_name, sep, class_name = self.spec.partition(":")
        if not sep or not module_name or not class_name:
            raise ConnectorLoadError(f"{self.source}: expected 'module:Class', got {self.spec!r}")
        try:
            module = importlib.import_module(module_name)
        except Exception as exc:  # any import failure of a vendor module is reported, not raised
            raise ConnectorLoadError(f"{self.spec}: module does not import ({type(exc).__name__}: {exc})") from None
        cls = getattr(module, class_name, None)
        if not isinstance(cls, type):
            raise ConnectorLoadError(f"{self.spec}: module {module_name!r} has no class {class_name!r}")
        try:
            check_constructor(cls)
        except ValueError as exc:
            raise ConnectorLoadError(str(exc)) from None
        missing = [hook for hook in REQUIRED_HOOKS if not callable(getattr(cls, hook, None))]
        missing += [" or ".join(pair) for pair in REQUIRED_ONE_OF if not any(callable(getattr(cls, h, None)) for h in pair)]
        if missing:
            raise ConnectorLoadError(f"{self.spec}: class {class_name} lacks the connector hooks {', '.join(missing)}")
        self._cls = cls
        return cls

    def __repr__(self) -> str:
        return f"{self.name} ({self.spec})"

    @property
    def is_hma(self) -> bool:
        """True when the class declares SupportsHMA (False when it does not load)."""
        try:
            return supports_hma(self.load())
        except ConnectorLoadError:
            return False

    @property
    def known_kind(self) -> str | None:
        """The kind reviewed data gives this connector (vLLM's connectors); None: declared or inferred."""
        return None

    @property
    def profile(self) -> ConnectorProfile:
        """What kind of connector this is, for which checks apply (harness.targets.connector_profile)."""
        return profile_for(self.declared, self.is_hma, self.known_kind)


BUILTIN_TARGETS = (
    ConnectorTarget("LMCacheLikeConnector", "reference_impl.connector.lmcache_like:LMCacheLikeConnector",
                    "built-in", builtin=True),
    ConnectorTarget("ExampleConnector", "reference_impl.connector.lmcache_like:ExampleConnector",
                    "built-in", builtin=True),
    ConnectorTarget(
        "MultiConnector", "reference_impl.connector.multi:MultiConnector", "built-in", builtin=True,
        extra_config={"connectors": [
            {"kv_connector": "LMCacheLikeConnector", "kv_connector_extra_config": {}},
            {"kv_connector": "LMCacheLikeConnector", "kv_connector_extra_config": {}},
        ]},
    ),
)


def _vllm_target(spec: str) -> ConnectorTarget:
    """`vllm:Name`: a connector of the installed vLLM (harness.targets.vllm_connector)."""
    from harness.targets.vllm_connector import vllm_target

    return vllm_target(spec)


def check_loadable(spec: str) -> None:
    """Fail fast for `kvconform report --kv-connector SPEC`: UsageError (exit 4, one line) unless SPEC is a
    built-in connector's name or a `module:Class` that loads."""
    from harness.errors import EXIT_TARGET, UsageError

    if ":" not in spec and spec in {t.name for t in BUILTIN_TARGETS}:
        return
    if spec.startswith("vllm:"):
        from harness.targets.vllm_connector import validate_spec

        validate_spec(spec)  # exit 4 with the registered names, or how to install vLLM
        return
    try:
        ConnectorTarget(spec.rpartition(":")[2] or spec, spec, "--kv-connector").load()
    except ConnectorLoadError as exc:
        raise UsageError(f"kvconform report: the target could not be loaded: {exc}", EXIT_TARGET) from None


def entry_point_targets() -> list[ConnectorTarget]:
    """Targets registered by installed packages under the `kvconform.connectors` entry-point group."""
    targets = []
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        targets.append(ConnectorTarget(ep.name, ep.value, f"entry point {ep.name!r}"))
    return targets


def target_for(spec: str, source: str = "--kv-connector") -> ConnectorTarget:
    """The target a `--kv-connector` value names: `vllm:Name` (the installed vLLM's connector) or `module:Class`
    (also how a check's child process rebuilds the target under test)."""
    if spec.startswith("vllm:"):
        return _vllm_target(spec)
    return ConnectorTarget(spec.rpartition(":")[2] or spec, spec, source)


def select_targets(cli_specs: list[str], include_builtins: bool) -> list[ConnectorTarget]:
    """`--kv-connector` targets, then entry points; the built-ins too when asked or nothing else is given."""
    targets = [target_for(spec) for spec in cli_specs]
    targets += entry_point_targets()
    if include_builtins or not targets:
        targets = list(BUILTIN_TARGETS) + targets
    return targets


class _HMAName:
    """Stand-in so a guard of an HMA connector still passes name-based `supports_hma`."""


class ConnectorGuard:
    """Forwards every attribute to the wrapped connector; a raising hook becomes ConnectorHookError.

    `calls` logs (role, hook, args, result); `around[hook] = (before, after)` instruments one hook;
    `current` is the hook running now (named when a check times out). With `backdoors=False` the optional
    `kvconform_*` methods are hidden, as if the connector had none.
    """

    def __init__(self, inner, role, calls: list, around: dict, state: dict, backdoors: bool = True):
        object.__setattr__(self, "_backdoors", backdoors)
        object.__setattr__(self, "_inner", inner)
        object.__setattr__(self, "_role", role)
        object.__setattr__(self, "calls", calls)
        object.__setattr__(self, "around", around)
        object.__setattr__(self, "_state", state)

    @property
    def inner(self):
        """The wrapped connector."""
        return self._inner

    def __getattr__(self, name):
        if name.startswith(BACKDOOR_PREFIX) and not self._backdoors:
            raise AttributeError(f"{name} (backdoors are off)")
        attr = getattr(self._inner, name)
        if not callable(attr) or name.startswith("_"):
            return attr
        inner_name = type(self._inner).__name__

        def call(*args, **kwargs):
            before, after = self.around.get(name, (None, None))
            if before is not None:
                before(self._role, *args)
            self._state["current"] = f"{inner_name}.{name} ({self._role.name.lower()})"
            try:
                result = attr(*args, **kwargs)
            except ConnectorHookError:
                raise
            except Exception as exc:
                raise ConnectorHookError(
                    f"{inner_name}.{name} ({self._role.name.lower()} role) raised {type(exc).__name__}: {exc}"
                ) from exc
            finally:
                self._state["current"] = None
            self.calls.append((self._role, name, args, result))
            if after is not None:
                after(self._role, result, *args)
            return result

        return call

    def __setattr__(self, name, value):
        setattr(self._inner, name, value)


def guard_class(inner_cls: type) -> type:
    """A ConnectorGuard subclass that is HMA-capable exactly when `inner_cls` is."""
    if supports_hma(inner_cls):
        marker = type("SupportsHMA", (_HMAName,), {})
        return type(f"Guarded{inner_cls.__name__}", (ConnectorGuard, marker), {})
    return type(f"Guarded{inner_cls.__name__}", (ConnectorGuard,), {})


def run_with_timeout(fn, timeout_s: float, state: dict):
    """Run `fn()` in a daemon thread; AssertionError naming the running hook if it exceeds `timeout_s`."""
    box: dict = {}

    def target():
        try:
            box["result"] = fn()
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise AssertionError(f"check hung past {timeout_s:g}s (inside {state.get('current') or 'engine code'})")
    if "error" in box:
        raise box["error"]
    return box.get("result")
