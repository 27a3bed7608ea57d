"""The KV connector API (vLLM v1 shape), HMA capability, and the reference connectors.

`BUILTIN_CONNECTORS` maps each built-in connector name to "module:Class" for `factory.load_connector_class`.
Importing this package registers the names that are kvconform's own (not a connector name of any vLLM
release, which the config resolver models per era) with the config resolver's `KVConnectorFactory`.
"""

from reference_impl.config.eras import VLLM_REGISTERED_CONNECTORS as _VLLM_CONNECTORS
from reference_impl.config.factory import KVConnectorFactory
from reference_impl.connector.base import SupportsHMA, is_multi_connector_class, supports_hma
from reference_impl.connector.factory import BUILTIN_CONNECTORS

__all__ = ["SupportsHMA", "supports_hma", "is_multi_connector_class", "BUILTIN_CONNECTORS"]


def _register_with_config_resolver() -> None:
    vllm_names = {info.name for info in _VLLM_CONNECTORS}
    registered = set(KVConnectorFactory.registered_names())
    for name, target in BUILTIN_CONNECTORS.items():
        if name not in vllm_names and name not in registered:
            module_path, class_name = target.split(":", 1)
            KVConnectorFactory.register_connector(name, module_path, class_name)


_register_with_config_resolver()
