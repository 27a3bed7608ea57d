"""The connector under test: how it is loaded, and a guard that turns its misbehaviour into clear check failures
(which hook raised, which hook was running when a check timed out).

Which targets a run checks (built-in connectors, `--kv-connector` specs, entry points) is chosen by
`harness.targets.connector_selection`; a `vllm:Name` target is `harness.targets.vllm_connector`'s subclass.
"""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass, field

from harness.target_spec import TargetError, import_object, parse_spec
from harness.targets.connector_profile import ConnectorProfile, profile_for
from reference_impl.connector.backdoors import BACKDOOR_PREFIX  # optional white-box methods (a typed Protocol)
from reference_impl.connector.base import supports_hma
from reference_impl.connector.protocol import ONE_OF, REQUIRED_HOOKS as PROTOCOL_HOOKS
from reference_impl.connector.factory import check_constructor

# Hooks the engine calls on every connector (vLLM 0.33's base class has them all): the typed Protocol's.
REQUIRED_HOOKS = PROTOCOL_HOOKS
REQUIRED_ONE_OF = ONE_OF


class ConnectorLoadError(TargetError):
    """The connector class cannot be used at all (import failure, not a class, bad constructor, missing hooks):
    one line `SOURCE SPEC: why`, exit status 4."""


class ConnectorHookError(AssertionError):
    """A connector hook raised; the message names the hook and the original error."""


class HookHung(BaseException):
    """A call of a hook this run has already seen hang twice: the check stops at once (a BaseException, so
    no `except Exception` in a check or in engine code swallows it)."""


# A hook that hangs this often is taken as hung for the rest of the run (per process): later checks that
# call it stop at once instead of each waiting out the per-check time limit.
HANGS_BEFORE_GIVING_UP = 2


class HangLog:
    """Which hook of which target hung in which checks; `hung(target)` names the hooks given up on."""

    def __init__(self) -> None:
        self._hangs: dict[tuple[str, str], list[str]] = {}

    def record(self, target: str, hook: str, check: str) -> None:
        """A check of `target` timed out inside `hook`."""
        self._hangs.setdefault((target, hook), []).append(check)

    def hung(self, target: str) -> dict[str, str]:
        """hook -> the check it first hung in, for the hooks of `target` that hung often enough."""
        return {hook: checks[0] for (name, hook), checks in self._hangs.items()
                if name == target and len(checks) >= HANGS_BEFORE_GIVING_UP}


HANG_LOG = HangLog()


@dataclass
class ConnectorTarget:
    """A connector class to check, with the extra config every instance gets. `source` says where it was
    named (`--kv-connector`, `entry point 'x'`, `built-in`); `spec` is a `module:Class` or a built-in name."""

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
        try:
            spec = parse_spec("connector", self.spec, self.source)
            if spec.vllm_name is not None:
                raise spec.error("a vllm: connector is loaded by harness.targets.vllm_connector")
            cls = import_object(spec)
        except TargetError as exc:
            raise ConnectorLoadError(exc.option, exc.spec, exc.why) from None
        if not isinstance(cls, type):
            raise ConnectorLoadError(self.source, self.spec, f"{spec.path} is not a class")
        try:
            check_constructor(cls)
        except ValueError as exc:
            raise ConnectorLoadError(self.source, self.spec, str(exc)) from None
        missing = [hook for hook in REQUIRED_HOOKS if not callable(getattr(cls, hook, None))]
        missing += [" or ".join(pair) for pair in REQUIRED_ONE_OF if not any(callable(getattr(cls, h, None)) for h in pair)]
        if missing:
            raise ConnectorLoadError(self.source, self.spec,
                                     f"class {cls.__name__} lacks the connector hooks {', '.join(missing)}")
        if not self.builtin:
            probe_constructor(cls, self.source, self.spec, self.extra_config)
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
    def known_store_scope(self) -> str | None:
        """Whose store this connector's is, from reviewed data (vLLM's connectors); None: declared or shared."""
        return None

    @property
    def profile(self) -> ConnectorProfile:
        """What kind of connector this is, for which checks apply (harness.targets.connector_profile)."""
        return profile_for(self.declared, self.is_hma, self.known_kind, known_store_scope=self.known_store_scope)


PROBE_PRESET = "fa_only"


def probe_constructor(cls: type, source: str, spec: str, extra_config: dict) -> None:
    """Build the connector once, as every check will (a scheduler and a worker instance on the one-group
    preset, with the run's extra config): a constructor that raises (an unreachable backend, a bad extra
    config) is one load error naming the exception, instead of the same failure in every check.
    Only the constructor is judged here; what the engine calls afterwards is the checks' business."""
    from reference_impl.config.objects import KVTransferConfig
    from reference_impl.engine.core import EngineConfig, EngineCore, ModelConfig

    built, failure = [], {}

    def factory(vllm_config, role, kv_cache_config):
        try:
            instance = cls(vllm_config, role, kv_cache_config)
        except Exception as exc:  # the vendor's constructor: any exception is the finding
            failure.setdefault("error", (role, exc))
            raise
        built.append(instance)
        return instance

    transfer = KVTransferConfig(kv_connector=cls.__name__, kv_role="kv_both", kv_connector_module_path=cls.__module__,
                                kv_connector_extra_config=dict(extra_config))
    config = EngineConfig(model_config=ModelConfig(f"kvconform/load-probe/{uuid.uuid4().hex[:8]}"),
                          kv_transfer_config=transfer, num_blocks=64)
    try:
        EngineCore(PROBE_PRESET, config, connector_factory=factory)
    except Exception:  # noqa: BLE001 - only a constructor's exception is a load error (below)
        pass
    finally:
        for instance in built:
            shutdown = getattr(instance, "shutdown", None)
            if callable(shutdown):
                try:
                    shutdown()
                except Exception:  # noqa: BLE001 - tidying up after the probe must not decide anything
                    pass
    if failure:
        role, exc = failure["error"]
        raise ConnectorLoadError(source, spec, f"the constructor raised {type(exc).__name__}: {exc} (building the "
                                               f"{role.name.lower()}-role instance, as every check does; nothing was run)")


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
            hung_in = (self._state.get("hung") or {}).get(name)
            if hung_in is not None:
                raise HookHung(f"skipped: hook {inner_name}.{name} hung in {hung_in} (and once more after it); "
                               "the checks that call it are not run again in this session")
            before, after = self.around.get(name, (None, None))
            if before is not None:
                before(self._role, *args)
            self._state["current"] = f"{inner_name}.{name} ({self._role.name.lower()})"
            self._state["hook"] = name
            try:
                result = attr(*args, **kwargs)
            except ConnectorHookError:
                raise
            except Exception as exc:
                raise ConnectorHookError(
                    f"{inner_name}.{name} ({self._role.name.lower()} role) raised {type(exc).__name__}: {exc}"
                ) from exc
            finally:
                self._state["current"] = self._state["hook"] = None
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
        state["timed_out_in"] = state.get("hook")  # the hook running when time ran out (None: engine code)
        raise AssertionError(f"check hung past {timeout_s:g}s (inside {state.get('current') or 'engine code'})")
    if "error" in box:
        raise box["error"]
    return box.get("result")
