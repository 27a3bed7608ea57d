"""The KV connector API (vLLM v1 shape), HMA capability, and the reference connectors."""

from reference_impl.connector.base import SupportsHMA, is_multi_connector_class, supports_hma

__all__ = ["SupportsHMA", "supports_hma", "is_multi_connector_class"]
