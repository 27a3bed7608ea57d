"""Per-step data exchanged between scheduler, workers and connector, with vLLM 0.33 field names."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class NewRequestData:
    """A request scheduled for the first time: its full block table (one list per group)."""

    req_id: str
    prompt_token_ids: list[int]
    block_ids: tuple[list[int], ...]
    num_computed_tokens: int
    lora_request: Any = None
    cache_salt: str | None = None


@dataclass
class CachedRequestData:
    """Requests scheduled before: appended block ids, or the whole new table for resumed requests."""

    req_ids: list[str] = field(default_factory=list)
    resumed_req_ids: set[str] = field(default_factory=set)
    new_token_ids: list[list[int]] = field(default_factory=list)
    all_token_ids: dict[str, list[int]] = field(default_factory=dict)
    new_block_ids: list[tuple[list[int], ...] | None] = field(default_factory=list)
    num_computed_tokens: list[int] = field(default_factory=list)
    num_output_tokens: list[int] = field(default_factory=list)

    @property
    def num_reqs(self) -> int:
        """Number of cached requests scheduled."""
        return len(self.req_ids)


@dataclass
class SchedulerOutput:
    """One step's schedule (what the workers execute)."""

    scheduled_new_reqs: list[NewRequestData] = field(default_factory=list)
    scheduled_cached_reqs: CachedRequestData = field(default_factory=CachedRequestData)
    num_scheduled_tokens: dict[str, int] = field(default_factory=dict)
    total_num_scheduled_tokens: int = 0
    finished_req_ids: set[str] = field(default_factory=set)
    preempted_req_ids: set[str] = field(default_factory=set)
    has_sync_kv_loads: bool = False
    new_block_ids_to_zero: list[int] = field(default_factory=list)
    kv_connector_metadata: Any = None


@dataclass
class ModelRunnerOutput:
    """One worker's result of a step: sampled tokens per request and the connector output."""

    sampled_token_ids: dict[str, int] = field(default_factory=dict)
    kv_connector_output: Any = None
