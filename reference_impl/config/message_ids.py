"""Which declared message a warning or error text is: the id a target assigns where it meets the text.

A config outcome carries its messages' ids (each warning's `id` and the error's, None for a text that is none of
the declared messages): the reference resolver and the vLLM target assign them once, where they meet the text
(`reference_impl.config.outcome.Message.met`, `OutcomeError.met`), so the report, `diff` and `explain` read ids and
never message text. The ids are those `reference_impl.vocabulary.MESSAGES` declares (config-rules.md names them:
§1.3, §2.4, §3.4 and the errors of §3.3/§10). Each pattern is a short distinctive fragment of its text, so a
release that rewords the rest of a message keeps its id (reviewed against the texts of every release in
`reference_impl.config.messages`).
"""

from __future__ import annotations

import re
from functools import lru_cache

# (id, pattern) in the order they are tried; the first match wins.
_MESSAGE_PATTERNS: tuple[tuple[str, re.Pattern], ...] = tuple((ident, re.compile(pattern, re.S)) for ident, pattern in (
    ("W-B1", r"because `--kv-transfer-config` is set\..*--no-disable-hybrid-kv-cache-manager to start"),
    ("W-A1", r"because `--kv-transfer-config` is set\."),
    ("W-22", r"because connector \S+ does not subclass `SupportsHMA`"),
    ("W-C1", r"because `--kv-transfer-config` selects a KV connector that does not support it"),
    ("W-C", r"latency regression when using chunked local attention"),
    ("W-U", r"Hybrid KV cache manager is disabled for this hybrid model"),
    ("E-B", r"explicitly enabled but is not supported.*--no-disable-hybrid-kv-cache-manager"),
    ("E-C", r"explicitly enabled but is not supported.*--enable-hybrid-kv-cache-manager"),
    ("E-F", r"does not support HMA but HMA is enabled"),
    ("E-H", r"HiSparse requires the hybrid KV cache manager"),
    ("E-HISPARSE-CUDA", r"HiSparse currently requires NVIDIA CUDA"),
    ("E-HISPARSE-PLATFORM", r"The current platform does not support HiSparse"),
    ("E-HISPARSE-NEEDS-CONNECTOR", r"HiSparse requires a KV transfer config with HiSparseConnector and host_pool_gib"),
    ("E-HISPARSE-TWO", r"Only one HiSparseConnector may be configured"),
    ("E-HISPARSE-NO-HOST-POOL", r"HiSparseConnector requires host_pool_gib"),
    ("E-HISPARSE-HOST-POOL-NOT-POSITIVE", r"HiSparseConnector host_pool_gib must be positive"),
    ("E-NIXL-TRANSFER-MODE", r"Invalid NixlConnector transfer_mode: "),
    ("E-UNKNOWN-SPECULATIVE-METHOD", r"Unknown speculative method .*registered custom methods"),
    ("E-MULTI-ASSERT", r"HMA should not be enabled unless all sub-connectors support it"),
    ("E-KV-ROLE", r"Please specify kv_role when kv_connector is set"),
    ("E-KV-DISAGG-ROLE", r"Please specify kv_disagg_role when kv_connector is set"),
    ("E-V1-CONNECTOR-UNDER-V0", r"Attempting to initialize a V1 Connector, but found envs\.VLLM_USE_V1=False"),
    ("E-TWO-ARG", r"uses deprecated 2-argument constructor signature"),
    ("E-HIDDEN-STATES-CHUNKED-PREFILL", r"ExampleHiddenStatesConnector does not support chunked prefill"),
    ("E-OFFLOAD-NO-SIZE", r"You must set kv_offloading_size when kv_offloading_backend is set"),
    ("E-NO-LMCACHE", r"No module named 'lmcache'"),
    ("E-NO-MOONCAKE", r"Please install mooncake"),
    ("E-UNSUPPORTED-CONNECTOR", r"Unsupported connector type: "),
    ("E-CLASS-NOT-FOUND", r"Class \S+ not found in \S+"),
))
#: MultiConnector's bare `assert` raises an AssertionError without a message: the one id of an empty text.
EMPTY_ASSERTION_ID = "E-MULTI-NO-CONNECTORS"
#: Every id a text can be given (each declared in `reference_impl.vocabulary.MESSAGES`).
IDENTIFIED = frozenset(ident for ident, _ in _MESSAGE_PATTERNS) | {EMPTY_ASSERTION_ID}


@lru_cache(maxsize=4096)  # the same few texts recur across a matrix's cells: each is matched once
def identify(text: str, error_type: str | None = None) -> str | None:
    """The id of a warning or error text (`error_type`: the exception's class name), or None when it is none of
    the declared messages."""
    if not text.strip():
        return EMPTY_ASSERTION_ID if error_type == "AssertionError" else None
    for ident, pattern in _MESSAGE_PATTERNS:
        if pattern.search(text):
            return ident
    return None
