"""The KV connector hooks the engine calls, as typed Protocols a vendor can read in one screen.

vLLM 0.33's engine builds a connector twice per engine: once with `KVConnectorRole.SCHEDULER` (the scheduler
process: lookups, allocation bookkeeping, metadata) and once per worker with `KVConnectorRole.WORKER` (the
data path: register the paged KV tensors, load before the forward, save after each layer). Each instance
only gets the calls of its role. `KVConnector` lists the hooks every connector needs; `HMAKVConnector` adds
the one an HMA-capable connector implements. In vLLM a connector declares HMA by subclassing
`vllm.distributed.kv_transfer.kv_connector.v1.base.SupportsHMA` (next to `KVConnectorBase_V1` in that
module); kvconform recognises any base class named `SupportsHMA` (`reference_impl.connector.base.SupportsHMA`
is its own, for connectors written without vLLM installed).

A class built on vLLM's `KVConnectorBase_V1` has every hook already; the suite checks that a class has them
before it runs anything (`harness.targets.connector.target`), using the names listed here.

    from reference_impl.connector.protocol import HMAKVConnector, KVConnector
    assert isinstance(MyConnector(vllm_config, role, kv_cache_config), HMAKVConnector)

Types are those of vLLM 0.33 (`Request`, `KVCacheBlocks`, `SchedulerOutput`, `ForwardContext`,
`torch.Tensor`); the Protocols name them as strings so that nothing here imports vLLM.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from reference_impl.connector.base import KVConnectorMetadata, KVConnectorOutput, KVConnectorRole


@runtime_checkable
class KVConnector(Protocol):
    """Every hook the engine calls on a connector (vLLM 0.33, `KVConnectorBase_V1`)."""

    def __init__(self, vllm_config: Any, role: KVConnectorRole, kv_cache_config: Any) -> None:
        """`vllm_config.kv_transfer_config.kv_connector_extra_config` is the vendor's own configuration;
        `kv_cache_config.kv_cache_groups` the groups (one per attention type under HMA)."""

    # ---- scheduler role ---------------------------------------------------------------------------------
    def get_num_new_matched_tokens(self, request: "Request", num_computed_tokens: int) -> tuple[int | None, bool]:
        """Lookup: how many tokens beyond `num_computed_tokens` the connector can load, and whether the load
        is asynchronous; `(None, False)` means "ask again next step"."""

    def update_state_after_alloc(self, request: "Request", blocks: "KVCacheBlocks", num_external_tokens: int) -> None:
        """The request's blocks (per group: `blocks.get_block_ids()`) once allocated for the load."""

    def build_connector_meta(self, scheduler_output: "SchedulerOutput") -> KVConnectorMetadata:
        """What the workers must load and save this step (must not mutate `scheduler_output`; pickles)."""

    def update_connector_output(self, connector_output: KVConnectorOutput) -> None:
        """The workers' results of the step (finished sends and receives, failures)."""

    def request_finished(self, request: "Request", block_ids: list[int]) -> tuple[bool, dict[str, Any] | None]:
        """Single-group finish: True delays freeing the blocks until `get_finished` reports the request."""

    # ---- worker role ------------------------------------------------------------------------------------
    def register_kv_caches(self, kv_caches: dict[str, "torch.Tensor"]) -> None:
        """The paged KV tensors, layer name -> `[num_blocks, block_size, num_kv_heads, 2*head_size]` (Mamba: its
        state tensors)."""

    def bind_connector_metadata(self, connector_metadata: KVConnectorMetadata) -> None:
        """The step's metadata, before the forward."""

    def start_load_kv(self, forward_context: "ForwardContext", **kwargs: Any) -> None:
        """Start loading into the paged buffers (before the forward)."""

    def wait_for_layer_load(self, layer_name: str) -> None:
        """Block until the layer's KV is loaded (layerwise connectors)."""

    def save_kv_layer(self, layer_name: str, kv_layer: "torch.Tensor", attn_metadata: Any, **kwargs: Any) -> None:
        """Start saving one layer after its attention ran."""

    def wait_for_save(self) -> None:
        """Block until this step's saves no longer need the paged buffers (end of the forward)."""

    def get_finished(self, finished_req_ids: set[str]) -> tuple[set[str] | None, set[str] | None]:
        """(finished sending, finished receiving) request ids; vLLM 0.33 also accepts `get_transfer_results`."""

    def clear_connector_metadata(self) -> None:
        """The step is over."""


@runtime_checkable
class HMAKVConnector(KVConnector, Protocol):
    """A connector that declares `SupportsHMA`: vLLM then calls the all-groups finish hook instead of
    `request_finished`, with one block-id list per KV cache group."""

    def request_finished_all_groups(self, request: "Request",
                                    block_ids: tuple[list[int], ...]) -> tuple[bool, dict[str, Any] | None]:
        """Called once when the request finished, before any group's blocks are freed (SWA lists may start
        with null block ids, Mamba lists hold nulls); True delays the free until `get_finished` reports it."""


# The hooks a class must have to be run at all (one of each pair in ONE_OF: vLLM 0.33 calls either).
ONE_OF: tuple[tuple[str, str], ...] = (("request_finished", "request_finished_all_groups"),
                                       ("get_transfer_results", "get_finished"))
REQUIRED_HOOKS: tuple[str, ...] = tuple(
    name for name in KVConnector.__dict__
    if not name.startswith("_") and callable(KVConnector.__dict__[name])
    and not any(name in pair for pair in ONE_OF))
