"""Pluggable KV cache placement (vLLM's `v1/core/kv_cache_config_builder`): the builder interface and its
resolution.

The planning flow (`kv_cache_planning.get_kv_cache_configs`) owns the invariants; a builder only decides
how layers split into groups and how groups become tensors for a given block count.
"""

from __future__ import annotations

import importlib
import sys
from abc import ABC, abstractmethod

__all__ = ["DEFAULT_BUILDER_QUALNAME", "KVCacheConfigBuilder", "get_kv_cache_config_builder",
           "resolve_obj_by_qualname"]

#: The builder a platform selects unless it says otherwise (vLLM's default hook returns its own path).
DEFAULT_BUILDER_QUALNAME = "reference_impl.kv_cache.kv_cache_planning.DefaultKVCacheConfigBuilder"
#: What vLLM's default platform hook returns: the default builder, which for the reference is its own. Where
#: vLLM's `v1/core` is the reference's (the upstream job's process alias) the two name one class; elsewhere
#: (vLLM loaded beside the reference) resolving vLLM's path would plan with vLLM's builder.
_VLLM_DEFAULT_BUILDER_QUALNAME = "vllm.v1.core.kv_cache_planning.DefaultKVCacheConfigBuilder"


class KVCacheConfigBuilder(ABC):
    """Placement decisions: grouping layers, and materializing groups into tensors for `num_blocks`."""

    @abstractmethod
    def get_kv_cache_groups(self, vllm_config, kv_cache_spec: dict) -> list:
        """Split the given layers into KV cache groups (each layer in exactly one group)."""
        raise NotImplementedError

    @abstractmethod
    def get_kv_cache_config_from_groups(self, vllm_config, kv_cache_groups: list, num_blocks: int):
        """The `KVCacheConfig` of these groups for exactly `num_blocks` blocks."""
        raise NotImplementedError

    def _get_pool_bytes_per_block(self, vllm_config, kv_cache_groups: list) -> int | None:
        """Device bytes one block id consumes, or None to let planning probe a one-block placement."""
        return None


def resolve_obj_by_qualname(qualname: str):
    """The object named `module.path.Name`."""
    module_name, _, name = qualname.rpartition(".")
    if not module_name:
        raise ValueError(f"builder qualname must be 'module.Name', got {qualname!r}")
    return getattr(importlib.import_module(module_name), name)


def _platform_builder_qualname(vllm_config) -> str | None:
    """The builder the running vLLM platform selects, when vLLM's platform layer is loaded in this process.

    The reference never imports vLLM itself: without vLLM's platforms there is no platform to ask.
    """
    platforms = sys.modules.get("vllm.platforms")
    if platforms is None:
        return None
    platform = getattr(platforms, "current_platform", None)
    hook = getattr(platform, "get_kv_cache_config_builder_cls", None)
    return hook(vllm_config) if hook is not None else None


def get_kv_cache_config_builder(vllm_config) -> KVCacheConfigBuilder:
    """A fresh instance of the builder the platform selects (the reference's default builder without a
    platform, or when the platform selects vLLM's default one).

    Builders are stateless (every method takes `vllm_config`), so each call returns a new instance.
    """
    qualname = _platform_builder_qualname(vllm_config)
    if not qualname or qualname == _VLLM_DEFAULT_BUILDER_QUALNAME:
        qualname = DEFAULT_BUILDER_QUALNAME
    return resolve_obj_by_qualname(qualname)()
