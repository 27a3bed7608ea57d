"""The KV connector API (vLLM v1 shape), HMA capability, and the reference connectors.

`BUILTIN_CONNECTORS` maps each of kvconform's own connectors by name to "module:Class", read from its one home,
`builtin_connectors.json` beside this file (data, so that `harness.target_spec` reads the names without importing
the reference engine). `factory.load_connector_class` and the config resolver's `KVConnectorFactory`, which
registers them, read it here. This package's import reads nothing of the config resolver, which imports it.
"""

import json as _json
from pathlib import Path as _Path

from reference_impl.connector.base import SupportsHMA, is_multi_connector_class, supports_hma

__all__ = ["SupportsHMA", "supports_hma", "is_multi_connector_class", "BUILTIN_CONNECTORS"]

#: The file that names kvconform's own connectors (what `--kv-connector NAME` and a case's `kv_connector` accept).
BUILTIN_CONNECTORS_FILE = "builtin_connectors.json"
BUILTIN_CONNECTORS: dict[str, str] = _json.loads(
    (_Path(__file__).with_name(BUILTIN_CONNECTORS_FILE)).read_text(encoding="utf-8"))
