"""The request as the allocator sees it (the subset of vLLM's `v1.request.Request` it reads, with
vLLM's constructor, so scenario code builds either the same way)."""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from reference_impl.kv_cache.release import PROMPT_LOGPROB_START_HITS, follows

__all__ = ["Request", "RequestStatus", "LoRARequest", "MultiModalFeature", "PlaceholderRange",
           "prefix_cache_hit_limit", "max_cache_hit_length"]


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
class PlaceholderRange:
    """Prompt tokens [offset, offset + length) taken by one multimodal item (vLLM's name)."""

    offset: int
    length: int


@dataclass(frozen=True)
class MultiModalFeature:
    """A multimodal item occupying prompt tokens [offset, offset + length), identified by a content hash."""

    identifier: str
    offset: int
    length: int

    @property
    def mm_position(self) -> PlaceholderRange:
        """The item's placeholder range, as vLLM's `MultiModalFeatureSpec` carries it."""
        return PlaceholderRange(self.offset, self.length)


class Request:
    """Token ids, computed-token count and the eagerly maintained prefix `block_hashes` of one request."""

    __slots__ = (
        "request_id", "prompt_token_ids", "num_prompt_tokens", "_all_token_ids", "_output_token_ids",
        "num_computed_tokens", "block_hashes", "_block_hasher", "lora_request", "cache_salt", "mm_features",
        "prompt_embeds", "has_no_extra_keys", "status", "shared_prefix_boundary",
        "skip_reading_prefix_cache", "prefix_cache_hit_limit", "num_in_flight_tokens", "sampling_params", "pooling_params",
        "client_index", "arrival_time", "priority", "session_id", "spec_token_ids", "num_preemptions",
        "kv_transfer_params", "resumable",
        "_prompt_embeds_per_block_hashes",  # set lazily by kv_cache_utils: block range -> embeds digest
    )

    def __init__(self, request_id: str, prompt_token_ids: Sequence[int] | None, sampling_params=None,
                 pooling_params=None, client_index: int = 0, arrival_time: float | None = None,
                 prompt_embeds=None, prompt_is_token_ids=None,
                 mm_features: Sequence[MultiModalFeature] | None = None, lora_request: LoRARequest | None = None,
                 cache_salt: str | None = None, priority: int = 0, trace_headers=None,
                 block_hasher: Callable | None = None, resumable: bool = False, session_id: str | None = None,
                 **_engine_only):
        # `_engine_only`: vLLM's serving-side arguments (reasoning, KV hints, ...) the allocator never reads.
        if not isinstance(request_id, str) or not request_id:
            raise ValueError(f"Request.request_id must be a non-empty string, got {request_id!r}")
        self.request_id = request_id
        self.sampling_params = sampling_params
        self.pooling_params = pooling_params
        self.client_index = client_index
        self.arrival_time = arrival_time
        self.priority = priority
        self.session_id = session_id
        # A connector's per-request parameters (P/D: `do_remote_prefill`, ...), from the sampling
        # parameters' `extra_args` as in vLLM; connectors and HiSparse's admission read and set it.
        self.kv_transfer_params = _kv_transfer_params(sampling_params)
        # A streaming request that may be resumed with more input: HiSparse's async admission asks.
        self.resumable = resumable
        self.spec_token_ids: list[int] = []
        self.num_preemptions = 0
        if prompt_token_ids is None:
            if prompt_embeds is None:
                raise ValueError("Request needs prompt_token_ids or prompt_embeds")
            prompt_token_ids = [0] * len(prompt_embeds)
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
        # Prompt logprobs (or all-token pooling) need every prompt token recomputed: no prefix-cache read.
        self.skip_reading_prefix_cache = _skip_reading_prefix_cache(sampling_params, pooling_params)
        #: Leading tokens the prefix cache may serve: 0 (no read), the first scored prompt row under prompt
        #: scoring (vLLM 0.34), or None (unbounded).
        self.prefix_cache_hit_limit = _prefix_cache_hit_limit(sampling_params, pooling_params,
                                                              self.skip_reading_prefix_cache)
        self.num_in_flight_tokens = 0
        if block_hasher is not None:
            self.block_hashes.extend(block_hasher(self))

    def get_max_cache_hit_length(self, bound: int | None = None) -> int:
        """Longest prefix-cache hit allowed: the last token is always recomputed, and the hit limit and
        `bound` (when given) can only lower it."""
        return max_cache_hit_length(self, bound)

    @property
    def skip_reading_external_kv(self) -> bool:
        """Whether KV connector hits are refused (they cannot honour a bounded local hit limit)."""
        return self.prefix_cache_hit_limit is not None

    def is_finished(self) -> bool:
        """Whether the request reached a terminal state (vLLM's FINISHED_* statuses are accepted too)."""
        return self.status.name.startswith("FINISHED")

    @property
    def num_tokens_with_spec(self) -> int:
        """Tokens including the speculative (draft) ones."""
        return len(self._all_token_ids) + len(self.spec_token_ids)

    @property
    def num_output_tokens(self) -> int:
        """Generated tokens so far."""
        return len(self._output_token_ids)

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


def _kv_transfer_params(sampling_params) -> dict | None:
    extra_args = getattr(sampling_params, "extra_args", None)
    return extra_args.get("kv_transfer_params") if extra_args is not None else None


def _skip_reading_prefix_cache(sampling_params, pooling_params) -> bool:
    for params in (sampling_params, pooling_params):
        flag = getattr(params, "skip_reading_prefix_cache", None)
        if flag is not None:
            return bool(flag)
    return getattr(sampling_params, "prompt_logprobs", None) is not None


def _prefix_cache_hit_limit(sampling_params, pooling_params, skip: bool) -> int | None:
    # Before 0.34 a request either skipped the prefix cache or read all of it. From 0.34, prompt scoring
    # with cache reads allowed reads only the rows before the first scored one (`prompt_logprob_start`).
    if skip:
        return 0
    if not follows(PROMPT_LOGPROB_START_HITS):
        return None
    if sampling_params is not None and (getattr(sampling_params, "prompt_logprobs", None) is not None
                                        or getattr(sampling_params, "prompt_logprob_token_ids", None) is not None):
        return getattr(sampling_params, "prompt_logprob_start", None) or 0
    return None


_UNSET = object()


def prefix_cache_hit_limit(request) -> int | None:
    """A request's prefix-cache hit limit, also for request objects of releases before 0.34 (which only
    say `skip_reading_prefix_cache`)."""
    limit = getattr(request, "prefix_cache_hit_limit", _UNSET)
    if limit is _UNSET:
        return 0 if getattr(request, "skip_reading_prefix_cache", False) else None
    return limit


def max_cache_hit_length(request, bound: int | None = None) -> int:
    """min(num_tokens - 1, the request's hit limit, bound), ignoring the ones that are None."""
    length = request.num_tokens - 1
    limit = prefix_cache_hit_limit(request)
    if limit is not None and limit < length:
        length = limit
    if bound is not None and bound < length:
        length = bound
    return length
