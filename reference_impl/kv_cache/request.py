"""The request as the allocator sees it (the subset of vLLM's `v1.request.Request` it reads)."""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["Request", "RequestStatus", "LoRARequest", "MultiModalFeature"]


class RequestStatus(enum.Enum):
    """Scheduling state; only WAITING/PREEMPTED vs RUNNING matters to the allocator (watermark)."""

    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"
    FINISHED = "finished"


@dataclass(frozen=True)
class LoRARequest:
    """A LoRA adapter: its name and path are part of every block's extra keys."""

    lora_name: str
    lora_int_id: int
    lora_path: str = ""


@dataclass(frozen=True)
class MultiModalFeature:
    """A multimodal item occupying prompt tokens [offset, offset + length), identified by a content hash."""

    identifier: str
    offset: int
    length: int


class Request:
    """Token ids, computed-token count and the eagerly maintained prefix `block_hashes` of one request."""

    __slots__ = (
        "request_id", "prompt_token_ids", "num_prompt_tokens", "_all_token_ids", "_output_token_ids",
        "num_computed_tokens", "block_hashes", "_block_hasher", "lora_request", "cache_salt", "mm_features",
        "prompt_embeds", "has_no_extra_keys", "status", "shared_prefix_boundary",
        "skip_reading_prefix_cache", "num_in_flight_tokens",
    )

    def __init__(self, request_id: str, prompt_token_ids: Sequence[int], *,
                 block_hasher: Callable | None = None, lora_request: LoRARequest | None = None,
                 cache_salt: str | None = None, mm_features: Sequence[MultiModalFeature] | None = None,
                 prompt_embeds: bytes | None = None):
        if not isinstance(request_id, str) or not request_id:
            raise ValueError(f"Request.request_id must be a non-empty string, got {request_id!r}")
        self.request_id = request_id
        self.prompt_token_ids = list(prompt_token_ids)
        self.num_prompt_tokens = len(self.prompt_token_ids)
        self._all_token_ids = list(self.prompt_token_ids)
        self._output_token_ids: list[int] = []
        self.num_computed_tokens = 0
        self.block_hashes: list[bytes] = []
        self._block_hasher = block_hasher
        self.lora_request = lora_request
        self.cache_salt = cache_salt
        self.mm_features = list(mm_features or ())
        self.prompt_embeds = prompt_embeds
        self.has_no_extra_keys = lora_request is None and cache_salt is None and not self.mm_features \
            and prompt_embeds is None
        self.status = RequestStatus.WAITING
        self.shared_prefix_boundary = 0
        self.skip_reading_prefix_cache = False
        self.num_in_flight_tokens = 0
        if block_hasher is not None:
            self.block_hashes.extend(block_hasher(self))

    @property
    def all_token_ids(self) -> list[int]:
        """Prompt followed by output tokens."""
        return self._all_token_ids

    @property
    def output_token_ids(self) -> list[int]:
        """Generated tokens so far."""
        return self._output_token_ids

    @property
    def num_tokens(self) -> int:
        """Prompt plus output tokens."""
        return len(self._all_token_ids)

    def append_output_token_ids(self, token_ids: int | Sequence[int]) -> None:
        """Append generated token(s) and extend `block_hashes` with any newly completed block."""
        if isinstance(token_ids, int):
            self._output_token_ids.append(token_ids)
            self._all_token_ids.append(token_ids)
        else:
            self._output_token_ids.extend(token_ids)
            self._all_token_ids.extend(token_ids)
        if self._block_hasher is not None:
            self.block_hashes.extend(self._block_hasher(self))
