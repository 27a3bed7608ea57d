"""`--kv-engine`: which engine drives the connector under test (a light module: read at start-up, before torch)."""

from __future__ import annotations

import importlib.util
import sys

KV_ENGINES = ("kvconform", "vllm")
DEFAULT_KV_ENGINE = "kvconform"


class KVEngineError(ValueError):
    """A bad `--kv-engine` value, or `vllm` where vLLM is not installed: one usage line."""


def check_kv_engine(value: str | None) -> str:
    """The engine name `value` selects (None: the default); KVEngineError naming the option, the value and what
    is accepted otherwise, or when `vllm` is asked for and vLLM does not import."""
    value = DEFAULT_KV_ENGINE if value is None else value
    if value not in KV_ENGINES:
        raise KVEngineError(f"--kv-engine: {value!r} is not an engine; accepted: {', '.join(KV_ENGINES)}")
    if value == "vllm":
        if importlib.util.find_spec("vllm") is None:
            raise KVEngineError(f"--kv-engine: 'vllm' needs vLLM installed in this Python ({sys.executable}); "
                                f"accepted here: {DEFAULT_KV_ENGINE}")
    return value
