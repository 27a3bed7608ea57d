"""KVConnectorFactory of the reference engine: connector class lookup and HMA capability, per era.

vLLM's built-in connectors are modelled by name (`VllmRegisteredConnector`, capability from `eras`); classes
loaded from `kv_connector_module_path`, and kvconform's own connectors registered with
`KVConnectorFactory.register_connector`, are real Python classes checked with `supports_hma`.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Callable, Iterator, Mapping

from reference_impl.config import messages
from reference_impl.config.eras import VLLM_REGISTERED_CONNECTORS
from reference_impl.config.errors import UnknownOutcome
from reference_impl.config.objects import KV_ROLES, KVTransferConfig
from reference_impl.connector import BUILTIN_CONNECTORS
from reference_impl.connector.base import is_multi_connector_class, supports_hma


@dataclass(frozen=True, slots=True)
class VllmRegisteredConnector:
    """A connector vLLM registers in this era, standing in for its class (not one of kvconform's own connectors,
    `reference_impl.connector.BUILTIN_CONNECTORS`, which are real classes)."""

    name: str
    hma: bool

    @property
    def __name__(self) -> str:  # the factory's messages use the class name
        return self.name




# Packages a resolution assumes installed (name -> version, None: not given), as `kvconform explain --installed`
# asks; a package not named is looked for with importlib, as vLLM's import does.
_ASSUMED_INSTALLED: ContextVar[Mapping[str, str | None]] = ContextVar("assumed_installed", default={})


@contextmanager
def packages_assumed_installed(packages: Mapping[str, str | None]) -> Iterator[None]:
    """Resolve inside the block as if each package (name -> version or None) were importable."""
    token = _ASSUMED_INSTALLED.set(dict(packages))
    try:
        yield
    finally:
        _ASSUMED_INSTALLED.reset(token)


def class_is_multi(cls) -> bool:
    """MultiConnector or a subclass of it."""
    if isinstance(cls, VllmRegisteredConnector):
        return cls.name == "MultiConnector"
    return is_multi_connector_class(cls)


def load_module_class(module_path: str, name: str, *, field_name: str = "kv_connector_module_path") -> type:
    """Import `module_path` and return its attribute `name`; a clear ValueError when either is missing."""
    try:
        module = importlib.import_module(module_path)
    except Exception as exc:  # any import failure is bad input: name the field and the cause
        raise ValueError(f"{field_name}: {module_path!r} does not import ({type(exc).__name__}: {exc})") from None
    cls = getattr(module, name, None)
    if not isinstance(cls, type):
        raise ValueError(f"kv_connector: module {module_path!r} has no class {name!r}")
    return cls


def constructor_takes_kv_cache_config(cls: type, *, accept_var_keyword: bool = False) -> bool:
    """vLLM's constructor check: `cls.__init__` names a `kv_cache_config` parameter (else it is the deprecated
    2-argument form). With `accept_var_keyword`, a `**kwargs` parameter also counts. True when the signature
    cannot be read."""
    try:
        params = inspect.signature(cls.__init__).parameters
    except (TypeError, ValueError):
        return True
    if "kv_cache_config" in params:
        return True
    return accept_var_keyword and any(p.kind is p.VAR_KEYWORD for p in params.values())


def package_installed(package: str) -> bool:
    """Whether `package` can be imported here (`importlib.util.find_spec`), asked once per process:
    the resolver asks for every case whose connector's module imports an optional package (about 3% of the
    config matrix pass went to the import system's path search), and what is installed does not change within a
    run. The answer is kept per finder, so a test that swaps `importlib.util.find_spec` gets its finder's."""
    return _found(importlib.util.find_spec, package)


@functools.lru_cache(maxsize=None)
def _found(find_spec: Callable[[str], object], package: str) -> bool:
    return find_spec(package) is not None


class KVConnectorFactory:
    """Connector lookup and the HMA checks of one era.

    kvconform's own connectors register process-wide with `register_connector` (as in vLLM); they are
    resolved after the era's built-in names and before `kv_connector_module_path` fallbacks.
    """

    _extra_registry: dict[str, Callable[[], type]] = {}

    def __init__(self, era, trace):
        """`trace` records the rules that fire and raises failures (a `resolution.Resolution`)."""
        self.era = era
        self._builtins = _builtins_for(era)
        self._trace = trace

    @classmethod
    def register_connector(cls, name: str, module_path: str, class_name: str) -> None:
        """Register a connector class by name, imported lazily on first use."""
        if name in cls._extra_registry:
            raise ValueError(f"Connector '{name}' is already registered.")

        def loader() -> type:
            return getattr(importlib.import_module(module_path), class_name)

        cls._extra_registry[name] = loader

    @classmethod
    def known_names(cls, era) -> frozenset[str]:
        """Every connector name a case may use in `era`: its built-ins and kvconform's registered names."""
        key = (era.id, len(cls._extra_registry))  # the registry only grows
        names = _KNOWN_NAMES_CACHE.get(key)
        if names is None:
            names = _KNOWN_NAMES_CACHE[key] = frozenset(_builtins_for(era)) | frozenset(cls._extra_registry)
        return names

    @classmethod
    def registered_names(cls) -> list[str]:
        """Names registered with `register_connector` (kvconform's reference connectors)."""
        return sorted(cls._extra_registry)

    # -- class lookup ---------------------------------------------------------------------------
    def get_connector_class(self, ktc: KVTransferConfig, stage: str):
        """The class for `ktc`, with the era's lookup priority and errors."""
        name = ktc.kv_connector
        if name is None:
            self._trace.fail(messages.E_CONNECTOR_NAME_NOT_SET, stage, "connector_name_not_set")
        module_path = ktc.kv_connector_module_path
        if module_path and self.era.module_path_first:
            cls = self._from_module(module_path, name, stage)
        elif name in self._builtins:
            self._trace.rules.append("connector_from_registry")
            if name == "NixlConnector" and self.era.nixl_transfer_mode:
                name = self._nixl_by_transfer_mode(ktc, stage)
            cls = self._check_package(name, stage, self._builtins[name])
        elif name in self._extra_registry:
            self._trace.rules.append("connector_from_reference")
            cls = self._extra_registry[name]()
        elif module_path:
            cls = self._from_module(module_path, name, stage)
        else:
            self._trace.fail(messages.E_UNSUPPORTED_CONNECTOR.format(connector=name), stage, "unsupported_connector")
        return cls

    def _nixl_by_transfer_mode(self, ktc: KVTransferConfig, stage: str) -> str:
        """0.34: the registry's NixlConnector is NixlPullConnector or NixlPushConnector, by the extra config's
        `transfer_mode` (default "pull"); anything else is refused with its repr."""
        mode = ktc.kv_connector_extra_config.get("transfer_mode", "pull")
        if mode not in ("pull", "push"):
            self._trace.fail(messages.E_NIXL_TRANSFER_MODE.format(mode=repr(mode)), stage, "nixl_transfer_mode")
        self._trace.rules.append("nixl_transfer_mode")
        return f"Nixl{mode.capitalize()}Connector"

    def lookup_tree(self, ktc: KVTransferConfig, stage: str) -> None:
        """0.34's `kv_cache_access` walk: the class of `ktc`, then, for a MultiConnector class, each child's
        KVTransferConfig (its role check) and its tree, depth first, every child whatever the others answer."""
        cls = self.get_connector_class(ktc, stage)
        if class_is_multi(cls):
            for child in ktc.children():
                self.check_role(child, stage)
                self.lookup_tree(child, stage)

    def class_supports_hma(self, cls) -> bool:
        """Class-level SupportsHMA (vLLM's `supports_hma(cls)`) in this era.

        A subclass of MultiConnector is as capable as the era's MultiConnector (vLLM's class gained
        SupportsHMA in 0.21, so before that a renamed subclass is rejected by the factory).
        """
        if isinstance(cls, VllmRegisteredConnector):
            return cls.hma
        if is_multi_connector_class(cls):
            return self._builtins["MultiConnector"].hma
        return supports_hma(cls)

    def _from_module(self, module_path: str, name: str, stage: str) -> type:
        self._trace.rules.append("connector_from_module_path")
        try:
            module = importlib.import_module(module_path)
        except Exception as exc:  # vLLM's factory imports the module as is: its exception is the answer
            self._trace.fail(_one_line(exc), stage, "connector_module_import_failed", vllm_type=type(exc).__name__)
        cls = getattr(module, name, None)
        if not isinstance(cls, type):
            # e.g. the offloading shortcut renamed kv_connector but kept the module path (0.33)
            self._trace.fail(messages.E_CLASS_NOT_FOUND.format(connector=name, module=module_path), stage,
                       "connector_class_not_found", vllm_type="AttributeError")
        if self.era.deprecated_constructor_error and not constructor_takes_kv_cache_config(cls):
            self._trace.fail(messages.E_TWO_ARG.format(connector=cls.__name__), stage, "deprecated_constructor")
        return cls

    def _check_package(self, name: str, stage: str, cls: VllmRegisteredConnector) -> VllmRegisteredConnector:
        """`cls`, or the class an installed package supplies in its place; fails when the package its module
        imports is missing (e.g. LMCacheMPConnector's module imports lmcache when the class is looked up, spec 3.3)."""
        needed = self.era.package_imported_by(name)
        if needed is None:
            return cls
        assumed = _ASSUMED_INSTALLED.get()
        if needed.package in assumed:
            self._trace.rules.append("package_assumed_installed")
        elif not package_installed(needed.package):
            self._trace.fail(needed.message, stage, "package_missing", vllm_type=needed.vllm_type)
        if self.era.installed_package_is_unknown(needed):
            version = assumed.get(needed.package)
            hma = needed.hma_of(version)
            if hma is not None:
                self._trace.rules.append("package_version_known")
                return VllmRegisteredConnector(name, hma)
            self._trace.rules.append("package_installed")
            unknown = f" ({needed.package} {version} is not a version kvconform has facts on)" if version else ""
            raise UnknownOutcome(
                f"{name} comes from the installed {needed.package} package; its HMA support depends on that "
                f"package's version{unknown}",
                "package_installed",
            )
        return cls

    # -- capability -----------------------------------------------------------------------------
    def supports_hma_config(self, ktc: KVTransferConfig, stage: str) -> bool:
        """0.23+: class SupportsHMA, or for the literal name MultiConnector, every child recursively."""
        cls = self.get_connector_class(ktc, stage)
        if ktc.kv_connector != "MultiConnector":
            return self.class_supports_hma(cls)
        children = ktc.children()
        if not children:
            self._trace.rules.append("multi_children_empty")
            return False
        self._trace.rules.append("multi_children_checked")
        for child in children:
            self.check_role(child, stage)
            if not self.supports_hma_config(child, stage):
                return False
        return True

    def non_hma_class_name(self, ktc: KVTransferConfig, stage: str) -> str | None:
        """0.22: the configured class's name when it, or for a class named MultiConnector one of its
        children, is not SupportsHMA; None when HMA can stay on. A child's kv_role is validated when the check
        reaches that child."""
        cls = self.get_connector_class(ktc, stage)
        if not self.class_supports_hma(cls):
            return cls.__name__
        if cls.__name__ == "MultiConnector":
            self._trace.rules.append("multi_children_checked")
            # vLLM 0.22.0 config/vllm.py:1458-1468 builds each child's KVTransferConfig (which validates its
            # kv_role) inside all(...): child by child, stopping at the first that lacks SupportsHMA.
            for child in ktc.children():
                self.check_role(child, stage)
                if not self.class_supports_hma(self.get_connector_class(child, stage)):
                    return cls.__name__
        return None

    def check_role(self, ktc: KVTransferConfig, stage: str) -> None:
        """KVTransferConfig's own validation: pydantic rejects a role outside the three, and a connector
        needs one of them."""
        if ktc.kv_role is not None and ktc.kv_role not in KV_ROLES:
            self._trace.fail(messages.E_KV_ROLE_INVALID, stage, "kv_role_invalid", vllm_type="ValidationError")
        if ktc.kv_connector is not None and ktc.kv_role is None:
            self._trace.fail(self.era.missing_kv_role_error, stage, "kv_role_missing")



def _one_line(exc: BaseException) -> str:
    """An exception's text on one line (an import error of a user module can span several)."""
    return " ".join(str(exc).split())


_BUILTINS_CACHE: dict[str, dict[str, VllmRegisteredConnector]] = {}
_KNOWN_NAMES_CACHE: dict[tuple[str, int], frozenset[str]] = {}


def _builtins_for(era) -> dict[str, VllmRegisteredConnector]:
    cached = _BUILTINS_CACHE.get(era.id)
    if cached is None:
        cached = {name: VllmRegisteredConnector(name, hma) for name, hma in era.connectors().items()}
        _BUILTINS_CACHE[era.id] = cached
    return cached


def _register_kvconform_connectors() -> None:
    """Register kvconform's own connectors (`reference_impl.connector.BUILTIN_CONNECTORS`), those whose name is
    no connector of any vLLM release (which the eras model by name)."""
    vllm_names = {info.name for info in VLLM_REGISTERED_CONNECTORS}
    for name, target in BUILTIN_CONNECTORS.items():
        if name not in vllm_names and name not in KVConnectorFactory.registered_names():
            module_path, class_name = target.split(":", 1)
            KVConnectorFactory.register_connector(name, module_path, class_name)


_register_kvconform_connectors()
