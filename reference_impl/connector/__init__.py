"""The KV connector API (vLLM v1 shape), HMA capability, and the reference connectors.

`BUILTIN_CONNECTORS` maps each of kvconform's own connectors by name to "module:Class", from its one home,
`builtin_connectors.json` beside this file, and its one reader, `builtin_names` (which `harness.target_spec` runs
by path, without importing the reference engine). `factory.load_connector_class` and the config resolver's
`KVConnectorFactory`, which registers them, read it here. This package's import reads nothing of the config
resolver, which imports it.
"""

from reference_impl.connector.base import SupportsHMA, is_multi_connector_class, supports_hma
from reference_impl.connector.builtin_names import BUILTIN_CONNECTORS

__all__ = ["SupportsHMA", "supports_hma", "is_multi_connector_class", "BUILTIN_CONNECTORS"]
