"""The v1 KV connector API (vLLM 0.33 shape): roles, metadata, transfer results and the connector base class.

Also the capability markers the config resolver and the factory use: `SupportsHMA`, `supports_hma` and
`is_multi_connector_class`. Names and signatures follow vLLM's
`vllm/distributed/kv_transfer/kv_connector/v1/base.py` so a vendor connector needs at most a thin adapter.
"""

from __future__ import annotations

import abc
import enum
from dataclasses import dataclass, field
from typing import Any, Iterable


class SupportsHMA(abc.ABC):
    """Marks a connector that works with the hybrid KV cache manager (several KV cache groups).

    A subclass must implement `request_finished_all_groups`, the HMA form of `request_finished` that
    receives one block-id list per KV cache group.
    """

    @abc.abstractmethod
    def request_finished_all_groups(self, request, block_ids: tuple[list[int], ...]):
        """Called once when a request finishes; returns (delay_free_blocks, kv_transfer_params)."""
        raise NotImplementedError


def _mro_names(cls: type) -> set[str]:
    return {klass.__name__ for klass in getattr(cls, "__mro__", ())}


def supports_hma(cls: type) -> bool:
    """True when `cls` declares HMA support.

    Matching by the marker's name (anywhere in the MRO) lets connectors built on vLLM's own
    `SupportsHMA` count too, so a vendor's class needs no kvconform-specific base.
    """
    return isinstance(cls, type) and "SupportsHMA" in _mro_names(cls)


def is_multi_connector_class(cls: type) -> bool:
    """True when `cls` is MultiConnector or a (possibly renamed) subclass of it."""
    return isinstance(cls, type) and "MultiConnector" in _mro_names(cls)


class KVConnectorRole(enum.Enum):
    """Which side of the engine an instance serves: the scheduler process or one GPU worker."""

    SCHEDULER = 0
    WORKER = 1


class KVConnectorMetadata:
    """Opaque scheduler-to-worker payload built once per step; it must pickle (it crosses processes)."""


class KVConnectorWorkerMetadata:
    """Worker-to-scheduler payload; the engine reduces the workers' objects pairwise with `aggregate`."""

    def aggregate(self, other: "KVConnectorWorkerMetadata") -> "KVConnectorWorkerMetadata":
        """Combine with another worker's metadata; must be associative."""
        raise NotImplementedError


class KVConnectorHandshakeMetadata:
    """Out-of-band P/D handshake data; must serialise."""


@dataclass
class KVConnectorTransferResults:
    """One worker's snapshot of finished sends, finished receives and failed receives.

    A failed receive is also a finished receive (`failed_recving` is a subset of `finished_recving`).
    """

    finished_sending: set[str] = field(default_factory=set)
    finished_recving: set[str] = field(default_factory=set)
    failed_recving: set[str] = field(default_factory=set)


@dataclass
class KVConnectorOutput:
    """What a worker returns each step (vLLM `vllm/v1/outputs.py`), and the aggregate the scheduler sees."""

    finished_sending: set[str] = field(default_factory=set)
    finished_recving: set[str] = field(default_factory=set)
    failed_recving: set[str] = field(default_factory=set)
    invalid_block_ids: set[int] = field(default_factory=set)
    kv_connector_stats: "KVConnectorStats | None" = None
    kv_cache_events: Any = None
    kv_connector_worker_meta: KVConnectorWorkerMetadata | None = None
    expected_finished_count: int = 0


@dataclass
class KVConnectorStats:
    """Counters a connector reports; `aggregate` sums counters of the same name."""

    data: dict[str, float] = field(default_factory=dict)

    def aggregate(self, other: "KVConnectorStats") -> "KVConnectorStats":
        """Sum another stats object into this one and return self."""
        for key, value in other.data.items():
            self.data[key] = self.data.get(key, 0) + value
        return self

    def is_empty(self) -> bool:
        """True when no counter was recorded."""
        return not self.data


class KVConnectorBase_V1(abc.ABC):  # noqa: N801 - vLLM's class name
    """Base class of v1 KV connectors.

    One class is instantiated once with role SCHEDULER (in the scheduler) and once per worker with role
    WORKER. The two sides talk only through `KVConnectorMetadata` (scheduler -> worker) and the worker's
    `KVConnectorOutput` (worker -> scheduler).
    """

    def __init__(self, vllm_config, role: KVConnectorRole, kv_cache_config=None):
        self._vllm_config = vllm_config
        self._role = role
        self._kv_cache_config = kv_cache_config
        self._connector_metadata: KVConnectorMetadata | None = None
        self._kv_transfer_config = getattr(vllm_config, "kv_transfer_config", None)

    @property
    def role(self) -> KVConnectorRole:
        """The side this instance serves."""
        return self._role

    # ---- worker side -------------------------------------------------------------------------
    def bind_connector_metadata(self, connector_metadata: KVConnectorMetadata) -> None:
        """Set this step's scheduler metadata (called before the forward)."""
        self._connector_metadata = connector_metadata

    def clear_connector_metadata(self) -> None:
        """Drop this step's metadata (called at the end of the step)."""
        self._connector_metadata = None

    def _get_connector_metadata(self) -> KVConnectorMetadata:
        assert self._connector_metadata is not None, "connector metadata is not bound"
        return self._connector_metadata

    def has_connector_metadata(self) -> bool:
        """True while metadata is bound."""
        return self._connector_metadata is not None

    def register_kv_caches(self, kv_caches: dict[str, Any]) -> None:
        """Receive the per-layer KV tensors (views into the shared backing buffer)."""

    def unregister_kv_caches(self) -> None:
        """Forget the KV tensors (sleep); idempotent."""

    def restore_kv_caches(self) -> None:
        """Re-acquire the KV tensors (wake); idempotent."""

    def handle_preemptions(self, connector_metadata: KVConnectorMetadata) -> None:
        """Flush pending saves whose sources may be overwritten this step; called every step."""

    @abc.abstractmethod
    def start_load_kv(self, forward_context, **kwargs) -> None:
        """Start loading KV for this step's requests (before the forward for sync loads)."""

    @abc.abstractmethod
    def wait_for_layer_load(self, layer_name: str) -> None:
        """Block until `layer_name`'s KV is loaded; called inside attention layers only."""

    @abc.abstractmethod
    def save_kv_layer(self, layer_name: str, kv_layer, attn_metadata, **kwargs) -> None:
        """Start saving one attention layer's KV after its compute."""

    @abc.abstractmethod
    def wait_for_save(self) -> None:
        """Finish (or hand off safely) this step's saves; called every step, including empty ones."""

    def get_finished(self, finished_req_ids: set[str]) -> tuple[set[str] | None, set[str] | None]:
        """(finished sending, finished receiving) request ids since the last call."""
        return None, None

    def get_transfer_results(self, finished_req_ids: set[str]) -> KVConnectorTransferResults:
        """Finished sends, finished receives and failed receives; defaults to wrapping `get_finished`."""
        sending, recving = self.get_finished(finished_req_ids)
        return KVConnectorTransferResults(finished_sending=set(sending or ()), finished_recving=set(recving or ()))

    def get_block_ids_with_load_errors(self) -> set[int]:
        """Block ids whose load failed (single-group models only; HMA reports per request)."""
        return set()

    def get_kv_connector_stats(self) -> KVConnectorStats | None:
        """Counters since the last call, or None."""
        return None

    def get_kv_connector_kv_cache_events(self):
        """KV cache events produced on the worker, or None."""
        return None

    def build_connector_worker_meta(self) -> KVConnectorWorkerMetadata | None:
        """This step's worker-to-scheduler metadata, or None."""
        return None

    def get_handshake_metadata(self) -> KVConnectorHandshakeMetadata | None:
        """P/D handshake data, or None."""
        return None

    def shutdown(self) -> None:
        """Release resources."""

    # ---- scheduler side ----------------------------------------------------------------------
    def bind_kv_cache_manager(self, kv_cache_manager) -> None:
        """Called once at scheduler start with the KV cache manager."""

    def on_new_request(self, request) -> None:
        """Called from `add_request`; an optional eager lookup."""

    @abc.abstractmethod
    def get_num_new_matched_tokens(self, request, num_computed_tokens: int) -> tuple[int | None, bool]:
        """(external tokens loadable beyond `num_computed_tokens` or None = ask later, load asynchronously)."""

    @abc.abstractmethod
    def update_state_after_alloc(self, request, blocks, num_external_tokens: int) -> None:
        """Called after `allocate_slots` with ALL of the request's blocks in all groups."""

    def get_loaded_kv_cache_group_ids(self, request) -> tuple[int, ...]:
        """Groups the connector writes on a load (not zeroed before an async load)."""
        groups = getattr(self._kv_cache_config, "kv_cache_groups", ())
        return tuple(
            gid for gid, g in enumerate(groups)
            if getattr(g, "enable_kv_transfer", True) and getattr(g.kv_cache_spec, "prefix_cacheable", True)
        )

    def get_external_cache_hit_sources(self, request, num_external_tokens: int) -> dict[str, int]:
        """Where the external hit comes from, for stats; counts sum to `num_external_tokens`."""
        return {"external": num_external_tokens} if num_external_tokens else {}

    @abc.abstractmethod
    def build_connector_meta(self, scheduler_output) -> KVConnectorMetadata:
        """This step's metadata; must not mutate `scheduler_output`."""

    def update_connector_output(self, connector_output: KVConnectorOutput) -> None:
        """Receive the aggregated worker output of the step."""

    def request_finished(self, request, block_ids: list[int]) -> tuple[bool, dict | None]:
        """Single-group finish hook (non-HMA connectors): (delay_free_blocks, kv_transfer_params)."""
        return False, None

    def take_events(self) -> Iterable[Any]:
        """KV cache events since the last call."""
        return ()

    def has_pending_push_work(self) -> bool:
        """True while stores must still drain on idle steps."""
        return False

    def has_pending_block_frees(self) -> bool:
        """True while delayed block frees are outstanding."""
        return False

    def reset_cache(self) -> bool | None:
        """Clear the external cache; None when unsupported."""
        return None

    # ---- class-level hooks and properties ----------------------------------------------------
    @classmethod
    def get_required_kvcache_layout(cls, vllm_config) -> str | None:
        """A KV layout the connector needs, or None."""
        return None

    @classmethod
    def requires_piecewise_for_cudagraph(cls, extra_config) -> bool:
        """True when the layer hooks do real work."""
        return False

    @classmethod
    def build_kv_connector_stats(cls, data: dict | None = None) -> KVConnectorStats | None:
        """Rebuild stats from serialised data."""
        return KVConnectorStats(data=dict(data)) if data is not None else None

    @classmethod
    def get_finished_count(cls) -> int | None:
        """How many workers must report each finished id; None means the world size."""
        return None

    @property
    def supports_divergent_local_hybrid_hits(self) -> bool:
        """True when the connector can restore lagging Mamba state."""
        return False

    @property
    def requires_kv_delivery(self) -> bool:
        """True when a pending hand-off must complete (producers); best-effort caches return False."""
        role = getattr(self._kv_transfer_config, "kv_role", None)
        return role in ("kv_producer", "kv_both")


# The hooks the engine calls on each side; the suite uses these to report missing methods by name.
SCHEDULER_HOOKS = (
    "get_num_new_matched_tokens",
    "update_state_after_alloc",
    "build_connector_meta",
    "update_connector_output",
    "request_finished",
    "take_events",
    "get_loaded_kv_cache_group_ids",
)
WORKER_HOOKS = (
    "register_kv_caches",
    "handle_preemptions",
    "bind_connector_metadata",
    "start_load_kv",
    "wait_for_layer_load",
    "save_kv_layer",
    "wait_for_save",
    "get_transfer_results",
    "get_block_ids_with_load_errors",
    "clear_connector_metadata",
)
