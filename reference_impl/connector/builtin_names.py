"""kvconform's own connectors by name: the one reader of `builtin_connectors.json` beside this file.

`BUILTIN_CONNECTORS` maps each name (what `--kv-connector NAME` and a case's `kv_connector` accept) to the
"module:Class" it stands for. The module needs nothing but the standard library and imports nothing of its
package, so that `harness.target_spec` runs this file by its path (`load_by_path`) and gets the names without
importing `reference_impl`: a pytest session of another project, where the plugin lies dormant, never loads it.
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["BUILTIN_CONNECTORS", "BUILTIN_CONNECTORS_FILE", "read_builtin_connectors"]

#: The data file that names the connectors.
BUILTIN_CONNECTORS_FILE = Path(__file__).with_name("builtin_connectors.json")


def read_builtin_connectors(path: Path = BUILTIN_CONNECTORS_FILE) -> dict[str, str]:
    """Name -> "module:Class", as the file at `path` lists them."""
    return json.loads(path.read_text(encoding="utf-8"))


BUILTIN_CONNECTORS: dict[str, str] = read_builtin_connectors()
