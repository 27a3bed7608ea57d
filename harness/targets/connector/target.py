"""The connector under test: how it is loaded and probed. The guard that turns its misbehaviour into clear check
failures during a check (which hook raised, which hook was running when a check timed out) lives with the
check runner that uses it (`suites.connector.runner`).

Which targets a run checks (built-in connectors, `--kv-connector` specs, entry points) is chosen by
`harness.targets.connector.selection`; a `vllm:Name` target is `harness.targets.connector.vllm_target`'s subclass.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from harness.target_spec import TargetError, TargetSpec, import_object, parse_spec
from harness.targets.connector.capabilities import ReleaseTable, reference_table
from harness.targets.connector.declaration import ConnectorLoadError, ConnectorUnderTest, declaration_of
from harness.targets.connector.profile import ConnectorProfile, profile_for
from reference_impl.connector.base import supports_hma
from reference_impl.connector.protocol import ONE_OF, REQUIRED_HOOKS as PROTOCOL_HOOKS
from reference_impl.connector.factory import check_constructor

# Hooks the engine calls on every connector (vLLM 0.33's base class has them all): the typed Protocol's.
REQUIRED_HOOKS = PROTOCOL_HOOKS
REQUIRED_ONE_OF = ONE_OF


def resolve_declaration(spec: TargetSpec, source: str) -> ConnectorUnderTest:
    """The declaration a parsed `module:attr` (or built-in) spec names, imported once: a `ConnectorUnderTest`
    subclass, or a bare connector class as its default declaration. DeclarationError (exit 2) for a bad field,
    ConnectorLoadError (exit 4) for a module that does not import or an object that is neither."""
    try:
        if spec.vllm_name is not None:
            raise spec.error("a vllm: connector is loaded by harness.targets.connector.vllm_target")
        obj = import_object(spec)
    except TargetError as exc:
        raise ConnectorLoadError(exc.option, exc.spec, exc.why) from None
    return declaration_of(obj, source, spec.text)


@dataclass
class ConnectorTarget:
    """A connector to check: its declaration (`harness.ConnectorUnderTest`: the class, its extra config and profile,
    its backdoors) and the run's options merged over it. `source` says where it was named (`--kv-connector`,
    `entry point 'x'`, `built-in`); `spec` is a `module:attr` or a built-in name. Built without a declaration (a
    built-in, a test's target), the spec is resolved on the first `load()`."""

    name: str
    spec: str
    source: str
    extra_config: dict = field(default_factory=dict)
    builtin: bool = False
    _cls: type | None = None
    declared: dict = field(default_factory=dict)  # the profile fields in effect (connector_profile)
    declaration: ConnectorUnderTest | None = None

    def apply_run_options(self, extra: dict, declared: dict) -> None:
        """The run's `--kv-connector-extra-config` over the declaration: its connector keys merged over the
        declaration's `extra_config`, its `"kvconform"` fields over the declaration's profile fields."""
        base = self.declaration
        self.extra_config = {**(dict(base.extra_config) if base is not None else {}), **extra}
        self.declared = {**(base.profile_fields() if base is not None else {}), **declared}

    def _adopt(self, declaration: ConnectorUnderTest) -> None:
        """Take `declaration` (resolved late): its fields under the values already set on this target."""
        self.declaration = declaration
        self.extra_config = {**dict(declaration.extra_config), **self.extra_config}
        self.declared = {**declaration.profile_fields(), **self.declared}

    def load(self) -> type:
        """The connector class; ConnectorLoadError with a one-line reason when it is unusable."""
        if self._cls is not None:
            return self._cls
        if self.declaration is None:
            try:
                spec = parse_spec("connector", self.spec, self.source)
            except TargetError as exc:
                raise ConnectorLoadError(exc.option, exc.spec, exc.why) from None
            self._adopt(resolve_declaration(spec, self.source))
        cls = self.declaration.connector
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

    def backdoor(self, name: str, instance) -> Callable[..., Any] | None:
        """The backdoor `name` bound to the connector `instance` (unguarded): the declaration's method, else the
        connector's own `kvconform_*` method, else None."""
        cls = self.load()
        if self.declaration is None:  # a class given directly (a vLLM connector's adapter, a test's stand-in)
            self.declaration = ConnectorUnderTest.for_class(cls)
        return self.declaration.backdoor(name, instance)

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
    def known_block_size_option(self) -> str | None:
        """The extra-config key that sets the size of the blocks the connector stores, from reviewed data: a
        built-in's `chunk_size` (reference_impl.connector.lmcache_like); vLLM's connectors have theirs."""
        return "chunk_size" if self.builtin else None

    @property
    def profile(self) -> ConnectorProfile:
        """What kind of connector this is, for which checks apply (harness.targets.connector.profile)."""
        return profile_for(self.declared, self.is_hma, self.known_kind, known_store_scope=self.known_store_scope,
                           known_block_size_option=self.known_block_size_option)

    @property
    def release_table(self) -> ReleaseTable:
        """The connector API this target is driven through (`harness.targets.connector.capabilities`):
        kvconform's connector protocol, which has every capability; a vLLM connector's is its release's."""
        return reference_table()


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
