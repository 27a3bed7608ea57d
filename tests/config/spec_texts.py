"""Distinctive substrings of vLLM's messages, copied by hand from config-rules.md (not from the code under test)."""

W_A1 = "kv_connector/v1/base.py."  # pre-seed text ends here; W-B1 continues
W_A1_PREFIX = "Turning off hybrid kv cache manager because `--kv-transfer-config` is set."
W_B1 = "and use --no-disable-hybrid-kv-cache-manager to start vLLM."
W_C = "There is a latency regression when using chunked local attention with the hybrid KV cache manager."
W_C1 = "selects a KV connector that does not support it."
W_22 = "does not subclass `SupportsHMA`."
E_B = "Consider omitting the --no-disable-hybrid-kv-cache-manager flag"
E_C = "Consider omitting the --enable-hybrid-kv-cache-manager flag"
E_H = "HiSparse requires the hybrid KV cache manager"
E_F = "does not support HMA but HMA is enabled"
E_HISPARSE_CUDA = "HiSparse currently requires NVIDIA CUDA."
E_NAME_NOT_SET = "Connector name is not set in KVTransferConfig"
E_UNSUPPORTED = "Unsupported connector type"
E_KV_ROLE = "Please specify kv_role when kv_connector is set, supported roles are ('kv_producer', 'kv_both', 'kv_consumer')"
E_MULTI = "HMA should not be enabled unless all sub-connectors support it"
E_DEPRECATED = "uses deprecated 2-argument constructor signature"
E_UNRECOGNIZED = "unrecognized arguments"
# vLLM 0.34.0 (read from its source, checked on the release): not in config-rules.md
E_HISPARSE_PLATFORM = "The current platform does not support HiSparse."
E_HISPARSE_NEEDS_CONNECTOR = "HiSparse requires a KV transfer config with HiSparseConnector and host_pool_gib"
E_HISPARSE_TWO = "Only one HiSparseConnector may be configured"
E_HISPARSE_NO_POOL = "HiSparseConnector requires host_pool_gib"
E_HISPARSE_POOL_POSITIVE = "HiSparseConnector host_pool_gib must be positive"
E_NIXL_MODE = "Invalid NixlConnector transfer_mode: "
E_UNKNOWN_METHOD = "Unknown speculative method "

WARNINGS = {"W-A1": W_A1_PREFIX, "W-B1": W_B1, "W-C": W_C, "W-C1": W_C1, "W-22": W_22}
