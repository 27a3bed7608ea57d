"""vLLM-shaped configuration objects (the subset that matters to HMA resolution).

Field names follow vLLM so a reader can map a case onto `vllm serve` flags. The aggregate `VllmConfig`, whose
construction runs the era's resolution, lives with that resolution (`reference_impl.config.resolution`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

KV_ROLES = ("kv_producer", "kv_both", "kv_consumer")


@dataclass(slots=True)
class SchedulerConfig:
    """`disable_hybrid_kv_cache_manager`: None lets the engine decide (seed+), True forces HMA off,
    False demands it (seed+) or is the default (before the seed)."""

    disable_hybrid_kv_cache_manager: bool | None = None


@dataclass(slots=True)
class KVTransferConfig:
    """The connector selection; MultiConnector children live in `kv_connector_extra_config["connectors"]`."""

    kv_connector: str | None = None
    kv_role: str | None = None
    kv_connector_module_path: str | None = None
    kv_connector_extra_config: dict[str, Any] = field(default_factory=dict)
    engine_id: str | None = None

    def children(self) -> list["KVTransferConfig"]:
        """MultiConnector children as configs (each dict passed through, as vLLM builds them)."""
        return [
            KVTransferConfig(
                kv_connector=child.get("kv_connector"),
                kv_role=child.get("kv_role"),
                kv_connector_module_path=child.get("kv_connector_module_path"),
                kv_connector_extra_config=dict(child.get("kv_connector_extra_config") or {}),
                engine_id=self.engine_id,
            )
            for child in self.kv_connector_extra_config.get("connectors") or ()
        ]

    def has_connector(self, name: str) -> bool:
        """True when `name` is the connector or a direct child of a connector named MultiConnector (vLLM looks
        one level down only, and only under that literal name: not under a renamed subclass)."""
        if self.kv_connector == name:
            return True
        return self.kv_connector == "MultiConnector" and any(child.get("kv_connector") == name for child in self.kv_connector_extra_config.get("connectors") or ())


@dataclass(slots=True)
class KVEventsConfig:
    """KV cache events publisher; before 0.20 its mere presence disables HMA."""

    enable_kv_cache_events: bool = False


@dataclass(slots=True)
class ModelConfig:
    """The model's attention shape; `attention_chunk_size` set means chunked local attention."""

    attention_chunk_size: int | None = None


@dataclass(slots=True)
class SpeculativeConfig:
    """Speculative decoding; only the method matters (EAGLE-style methods interact with chunked attention).

    A custom method (registered by a plugin, 0.34+) carries its config class's `uses_target_hidden_states`
    in `custom_uses_target_hidden_states`; it is None for a method given by name."""

    method: str | None = None
    custom_uses_target_hidden_states: bool | None = None


@dataclass(slots=True)
class CacheConfig:
    """KV offloading shortcut inputs (`--kv-offloading-backend`, `--kv-offloading-size`)."""

    kv_offloading_backend: str | None = None
    kv_offloading_size: float | None = None


@dataclass(slots=True)
class HiSparseConfig:
    """HiSparse sparse attention (0.30+); needs HMA."""


@dataclass(slots=True)
class AttentionConfig:
    """Attention options; `hisparse_config` set means HiSparse is on."""

    hisparse_config: HiSparseConfig | None = None


@dataclass(slots=True)
class Runtime:
    """What vLLM reads from its surroundings: release era, platform and environment variables."""

    era: Any
    platform: str
    env: dict[str, str] = field(default_factory=dict)
    vllm_version: str = ""
