"""`--kv-engine`: which engine drives the connector under test (a light module: read at start-up, before torch)."""

from __future__ import annotations

import importlib.util
import sys

#: The engine names, each written here only: kvconform's own engine, and the installed vLLM's Scheduler.
KVCONFORM_ENGINE = "kvconform"
VLLM_ENGINE = "vllm"
KV_ENGINES = (KVCONFORM_ENGINE, VLLM_ENGINE)
DEFAULT_KV_ENGINE = KVCONFORM_ENGINE
#: How a check vLLM's scheduler cannot express begins its N/A reason (the report counts them by it).
VLLM_ENGINE_NA_PREFIX = f"under --kv-engine {VLLM_ENGINE}: "


class KVEngineError(ValueError):
    """A bad `--kv-engine` value, or `vllm` where vLLM is not installed: one usage line."""


def check_kv_engine(value: str | None) -> str:
    """The engine name `value` selects (None: the default); KVEngineError naming the option, the value and what
    is accepted otherwise, or when `vllm` is asked for and vLLM does not import."""
    value = DEFAULT_KV_ENGINE if value is None else value
    if value not in KV_ENGINES:
        raise KVEngineError(f"--kv-engine: {value!r} is not an engine; accepted: {', '.join(KV_ENGINES)}")
    if value == VLLM_ENGINE:
        if importlib.util.find_spec("vllm") is None:
            raise KVEngineError(f"--kv-engine: {VLLM_ENGINE!r} needs vLLM installed in this Python "
                                f"({sys.executable}); accepted here: {DEFAULT_KV_ENGINE}")
    return value
