"""The KV connector API (vLLM v1 shape), HMA capability, and the reference connectors.

`BUILTIN_CONNECTORS` maps each of kvconform's own connectors by name to "module:Class", read from its one home,
`builtin_connectors.json` beside this file (data, so that `harness.target_spec` reads the names without importing
the reference engine). `factory.load_connector_class` and the config resolver's `KVConnectorFactory`, which
registers them, read it here. Importing this package registers the names that are kvconform's own (not a
connector name of any vLLM release, which the config resolver models per era) with the resolver's factory.
"""

import json as _json
from pathlib import Path as _Path

from reference_impl.config.eras import VLLM_REGISTERED_CONNECTORS as _VLLM_CONNECTORS
from reference_impl.config.factory import KVConnectorFactory
from reference_impl.connector.base import SupportsHMA, is_multi_connector_class, supports_hma

__all__ = ["SupportsHMA", "supports_hma", "is_multi_connector_class", "BUILTIN_CONNECTORS"]

#: The file that names kvconform's own connectors (what `--kv-connector NAME` and a case's `kv_connector` accept).
BUILTIN_CONNECTORS_FILE = "builtin_connectors.json"
BUILTIN_CONNECTORS: dict[str, str] = _json.loads(
    (_Path(__file__).with_name(BUILTIN_CONNECTORS_FILE)).read_text(encoding="utf-8"))


def _register_with_config_resolver() -> None:
    vllm_names = {info.name for info in _VLLM_CONNECTORS}
    registered = set(KVConnectorFactory.registered_names())
    for name, target in BUILTIN_CONNECTORS.items():
        if name not in vllm_names and name not in registered:
            module_path, class_name = target.split(":", 1)
            KVConnectorFactory.register_connector(name, module_path, class_name)


_register_with_config_resolver()
