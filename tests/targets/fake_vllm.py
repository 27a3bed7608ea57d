"""A fake `vllm` distribution written into a temporary folder: package files plus its dist-info.

The vLLM adapters find the release with `importlib.metadata` and then import modules; a folder put
first on `sys.path` (or PYTHONPATH) shadows any real install for both, so the tests below can stage
every broken install the adapters must report (unsupported release, a module failing halfway) in the
main venv, without vLLM.
"""

from __future__ import annotations

import textwrap
from pathlib import Path


def write_fake_vllm(root: Path, version: str, modules: dict[str, str] | None = None) -> Path:
    """Write `vllm` (version `version`) under `root`; `modules` maps dotted names to module source."""
    dist_info = root / f"vllm-{version}.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n")
    (dist_info / "top_level.txt").write_text("vllm\n")
    files = {"vllm": f"__version__ = {version!r}\n", **(modules or {})}
    for dotted, source in files.items():
        parts = dotted.split(".")
        for depth in range(1, len(parts)):  # every parent is a package
            init = root.joinpath(*parts[:depth], "__init__.py")
            init.parent.mkdir(parents=True, exist_ok=True)
            init.touch()
        path = root / "vllm" / "__init__.py" if dotted == "vllm" else root.joinpath(*parts[:-1], f"{parts[-1]}.py")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))
    return root


# Modules a working install provides (as far as the adapters' import check goes).
IMPORTABLE = {
    "vllm.config": "class VllmConfig:\n    pass\n",
    "vllm.distributed.kv_transfer.kv_connector.factory": "class KVConnectorFactory:\n    _registry = {}\n",
}
