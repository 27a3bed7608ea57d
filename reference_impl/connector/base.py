"""Connector capability markers: `SupportsHMA` and the class checks the config resolver and factory use."""

from __future__ import annotations

import abc


class SupportsHMA(abc.ABC):
    """Marks a connector that works with the hybrid KV cache manager (several KV cache groups).

    A subclass must implement `request_finished_all_groups`, the HMA form of `request_finished` that
    receives one block-id list per KV cache group.
    """

    @abc.abstractmethod
    def request_finished_all_groups(self, request, block_ids: tuple[list[int], ...]):
        """Called once when a request finishes; returns (delay_free_blocks, kv_transfer_params)."""
        raise NotImplementedError


def _mro_names(cls: type) -> set[str]:
    return {klass.__name__ for klass in getattr(cls, "__mro__", ())}


def supports_hma(cls: type) -> bool:
    """True when `cls` declares HMA support.

    Matching by the marker's name (anywhere in the MRO) lets connectors built on vLLM's own
    `SupportsHMA` count too, so a vendor's class needs no kvconform-specific base.
    """
    return isinstance(cls, type) and "SupportsHMA" in _mro_names(cls)


def is_multi_connector_class(cls: type) -> bool:
    """True when `cls` is MultiConnector or a (possibly renamed) subclass of it."""
    return isinstance(cls, type) and "MultiConnector" in _mro_names(cls)
