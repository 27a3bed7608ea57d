"""Which single-type manager serves a KV cache group: the lookup `kv_cache_utils` asks, as vLLM's
`v1/kv_cache_spec_registry.KVCacheSpecRegistry.get_manager_class` is asked in vLLM 0.33.

The managers register their lookup when `single_type_kv_cache_manager` is imported (the package imports it
first); `kv_cache_utils` asks here, so it needs no import of the managers, which import it.
"""

from __future__ import annotations

from typing import Any, Callable

__all__ = ["KVCacheSpecRegistry"]


class KVCacheSpecRegistry:
    """The spec (and group role) -> manager class lookup."""

    _lookup: Callable[[Any, str | None], type] | None = None

    @classmethod
    def register_manager_lookup(cls, lookup: Callable[[Any, str | None], type]) -> None:
        """Install `lookup(spec, role) -> manager class` (single_type_kv_cache_manager's)."""
        cls._lookup = lookup

    @classmethod
    def get_manager_class(cls, kv_cache_spec: Any, role: str | None = None) -> type:
        """The manager class for a group's spec and role."""
        if cls._lookup is None:
            raise LookupError("no KV cache manager is registered; import reference_impl.kv_cache first")
        return cls._lookup(kv_cache_spec, role)
