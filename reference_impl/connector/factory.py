"""Connector classes by name or `module:Class`, and `create_connector` with vLLM's HMA gate.

An explicit module path wins over a built-in name (as in vLLM's factory), so a vendor can shadow a
built-in class of the same name. Module loading, the constructor check and the HMA error text are the
config resolver's (`reference_impl.config.factory`, `reference_impl.config.messages`).
"""

from __future__ import annotations

import copy
import inspect

from reference_impl.config.factory import constructor_takes_kv_cache_config, load_module_class
from reference_impl.config.messages import E_F
from reference_impl.config.objects import KVTransferConfig
from reference_impl.connector import BUILTIN_CONNECTORS
from reference_impl.connector.base import KVConnectorRole, supports_hma


def load_connector_class(name: str, module_path: str | None = None) -> type:
    """Resolve a connector class from `module:Class`, (name, module path), or a built-in name.

    Raises ValueError naming what was asked and what is accepted (a module that does not import included).
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"kv_connector must be a non-empty class name, got {name!r}")
    if ":" in name and module_path is None:
        module_path, name = name.split(":", 1)
    if module_path is None:
        target = BUILTIN_CONNECTORS.get(name)
        if target is None:
            raise ValueError(
                f"kv_connector {name!r} is not a built-in connector (accepted: {sorted(BUILTIN_CONNECTORS)}, "
                "or module:Class / kv_connector_module_path)"
            )
        module_path, name = target.split(":", 1)
    return load_module_class(module_path, name)


def check_constructor(cls: type) -> None:
    """ValueError unless the constructor takes (vllm_config, role, kv_cache_config) as vLLM 0.33 calls it."""
    # **kwargs passes kv_cache_config through (wrappers and subclasses forward their arguments).
    if not constructor_takes_kv_cache_config(cls, accept_var_keyword=True):
        raise ValueError(
            f"{cls.__qualname__}.__init__{inspect.signature(cls.__init__)} lacks the kv_cache_config parameter; "
            "accepted: __init__(self, vllm_config, role, kv_cache_config)"
        )
    try:
        params = inspect.signature(cls.__init__).parameters
    except (TypeError, ValueError):
        return
    names = list(params)[1:]
    positional = [n for n in names if params[n].kind in (params[n].POSITIONAL_ONLY, params[n].POSITIONAL_OR_KEYWORD)]
    has_var_pos = any(p.kind is p.VAR_POSITIONAL for p in params.values())
    if len(positional) < 2 and not has_var_pos:
        raise ValueError(
            f"{cls.__qualname__}.__init__ must accept (vllm_config, role, kv_cache_config), "
            f"got {inspect.signature(cls.__init__)}"
        )


def create_connector(vllm_config, role: KVConnectorRole, kv_cache_config, *, hma_enabled: bool | None = None):
    """Build the configured connector for `role`, applying vLLM's creation-time HMA gate.

    `hma_enabled` defaults to "the config has more than one KV cache group".
    """
    ktc = vllm_config.kv_transfer_config
    cls = load_connector_class(ktc.kv_connector, ktc.kv_connector_module_path)
    if hma_enabled is None:
        hma_enabled = len(getattr(kv_cache_config, "kv_cache_groups", ())) > 1
    if hma_enabled and not supports_hma(cls):
        raise ValueError(E_F.format(connector=cls.__name__))
    check_constructor(cls)
    return cls(vllm_config, role, kv_cache_config)


def child_configs(vllm_config) -> list:
    """Copies of `vllm_config`, one per MultiConnector child, each with the child's kv_transfer_config."""
    ktc = vllm_config.kv_transfer_config
    configs = []
    for child in KVTransferConfig.children(ktc):
        if not child.kv_connector:
            raise ValueError("MultiConnector: every entry of kv_connector_extra_config['connectors'] needs kv_connector")
        config = copy.copy(vllm_config)
        config.kv_transfer_config = child
        configs.append(config)
    return configs
