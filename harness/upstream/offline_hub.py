"""An offline Hugging Face hub cache holding the model configs vLLM's `tests/v1/core` names.

vLLM's scheduler tests build a `ModelConfig` for a hub model id (`facebook/opt-125m`, a few Qwen and LLaVA
models); `ModelConfig` only reads the model's `config.json`. With `HF_HUB_OFFLINE=1` the hub client
resolves a model id from the cache layout `HF_HUB_CACHE/models--org--name/snapshots/<rev>/config.json`,
`refs/main` naming `<rev>`; this module writes that layout from `model_configs.json` (reviewed data: the
configs as published, no weights), and lists the model ids a test tree names so the job can say which
ones it has no config for.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

__all__ = ["MODEL_CONFIGS_PATH", "load_model_configs", "named_models", "write_offline_hub"]

MODEL_CONFIGS_PATH = Path(__file__).with_name("model_configs.json")

# A quoted hub id ("org/name") assigned to a model argument or constant; a path like "a/b.py" is not one.
_MODEL_ID = re.compile(r"""(?:model(?:_id|_name)?\s*[=:(,]\s*|MODEL\s*=\s*(?:os\.environ\.get\([^,]+,\s*)?)"""
                       r"""["']([A-Za-z0-9][\w.-]*/[\w.-]+)["']""")


def load_model_configs(path: Path = MODEL_CONFIGS_PATH) -> dict[str, dict]:
    """Model id -> its config.json content (the file's keys starting with '_' are comments)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    return {model: config for model, config in data.items() if not model.startswith("_")}


def named_models(test_root: Path) -> set[str]:
    """The hub model ids the Python files under `test_root` pass as a model (sorted set of 'org/name')."""
    found: set[str] = set()
    for path in sorted(test_root.rglob("*.py")):
        found.update(_MODEL_ID.findall(path.read_text(encoding="utf-8")))
    return found


def write_offline_hub(cache_dir: Path, configs: dict[str, dict]) -> list[Path]:
    """Write one snapshot per model under `cache_dir` (an `HF_HUB_CACHE`); returns the config files.

    The revision is the SHA-1 of the config text, so rewriting the same config is a no-op and a changed
    config gets a new snapshot that `refs/main` points at.
    """
    written = []
    for model, config in sorted(configs.items()):
        org, name = model.split("/", 1)
        repo = cache_dir / f"models--{org}--{name}"
        text = json.dumps(config, indent=1, sort_keys=True) + "\n"
        revision = hashlib.sha1(text.encode()).hexdigest()
        snapshot = repo / "snapshots" / revision
        snapshot.mkdir(parents=True, exist_ok=True)
        (snapshot / "config.json").write_text(text, encoding="utf-8")
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / "main").write_text(revision, encoding="utf-8")
        written.append(snapshot / "config.json")
    return written
