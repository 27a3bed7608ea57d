"""The engine's request: the allocator's `Request` plus scheduling fields vLLM connectors read."""

from __future__ import annotations

import enum

from reference_impl.kv_cache.request import Request


class EngineRequestStatus(enum.Enum):
    """vLLM's request states that the mini engine uses."""

    WAITING = "waiting"
    WAITING_FOR_REMOTE_KVS = "waiting_for_remote_kvs"
    RUNNING = "running"
    PREEMPTED = "preempted"
    FINISHED_STOPPED = "finished_stopped"
    FINISHED_ABORTED = "finished_aborted"

    @property
    def is_finished(self) -> bool:
        """True for the terminal states."""
        return self in (EngineRequestStatus.FINISHED_STOPPED, EngineRequestStatus.FINISHED_ABORTED)


class EngineRequest(Request):
    """A request with a token budget (`max_tokens`) and the connector-visible scheduling state."""

    def __init__(self, request_id: str, prompt_token_ids, *, max_tokens: int = 1, stop_token_ids=(), **kwargs):
        super().__init__(request_id, prompt_token_ids, **kwargs)
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise ValueError(f"EngineRequest.max_tokens must be a positive integer, got {max_tokens!r}")
        self.max_tokens = max_tokens
        self.stop_token_ids = frozenset(stop_token_ids)  # sampling one of them stops the request (vLLM's check_stop)
        self.engine_status = EngineRequestStatus.WAITING
        self.num_preemptions = 0
        self.num_local_computed_tokens = 0  # prefix-cache part of the last admission
        self.num_external_computed_tokens = 0  # connector part of the last admission
        self.kv_transfer_params = None
        self.resumable = True
        self.last_sched_seq = 0  # the last non-empty step that scheduled it (async scheduling fences frees by it)

    @property
    def is_finished(self) -> bool:
        """True once stopped or aborted."""
        return self.engine_status.is_finished
