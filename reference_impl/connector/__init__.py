"""The KV connector API (vLLM v1 shape), HMA capability, and the reference connectors.

`BUILTIN_CONNECTORS` maps each built-in connector name to "module:Class" for the config resolver's
registry and `factory.load_connector_class`.
"""

from reference_impl.connector.base import SupportsHMA, is_multi_connector_class, supports_hma
from reference_impl.connector.factory import BUILTIN_CONNECTORS

__all__ = ["SupportsHMA", "supports_hma", "is_multi_connector_class", "BUILTIN_CONNECTORS"]
