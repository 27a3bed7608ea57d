"""The exact texts vLLM logs and raises around the hybrid KV cache manager, one home for each.

The texts are observable behaviour (suites assert on them), so they are kept verbatim per spec
(`config-rules.md` sections 1.3, 2.4, 3.4, 2.5, 3.3 and the addendum).
"""

from __future__ import annotations

# Warnings ----------------------------------------------------------------------------------------

#: W-A1: pre-seed connector warning (0.11.1-0.12.x), logged whenever a kv_transfer_config is present.
W_A1 = (
    "Turning off hybrid kv cache manager because `--kv-transfer-config` is set. This will reduce the "
    "performance of vLLM on LLMs with sliding window attention or Mamba attention. If you are a developer "
    "of kv connector, please consider supporting hybrid kv cache manager for your connector by making sure "
    "your connector is a subclass of `SupportsHMA` defined in kv_connector/v1/base.py."
)

#: W-B1: seed connector warning (0.13-0.21), logged for flag None with a kv_transfer_config.
W_B1 = (
    "Turning off hybrid kv cache manager because `--kv-transfer-config` is set. This will reduce the "
    "performance of vLLM on LLMs with sliding window attention or Mamba attention. If you are a developer "
    "of kv connector, please consider supporting hybrid kv cache manager for your connector by making sure "
    "your connector is a subclass of `SupportsHMA` defined in kv_connector/v1/base.py and use "
    "--no-disable-hybrid-kv-cache-manager to start vLLM."
)

#: W-22: the 0.22 connector-aware warning; `{connector}` is the offending class's name.
W_22 = (
    "Turning off hybrid kv cache manager because connector {connector} does not subclass `SupportsHMA`. "
    "This will reduce performance on models with sliding window or Mamba attention. See "
    "kv_connector/v1/base.py for details."
)

#: W-C1: the 0.23+ connector warning (supports_hma_config is false).
W_C1 = (
    "Turning off hybrid kv cache manager because `--kv-transfer-config` selects a KV connector that does "
    "not support it. Impact: hybrid SSM models (e.g. Jamba, Bamba) require HMA and will fail at startup "
    "without it; models with sliding window attention will run with reduced performance. To add HMA "
    "support to a KV connector, subclass `SupportsHMA` defined in kv_connector/v1/base.py (for "
    "MultiConnector, all child connectors must support HMA)."
)

#: W-C: chunked local attention without an override (same text in every era).
W_C = (
    "There is a latency regression when using chunked local attention with the hybrid KV cache manager. "
    "Disabling it, by default. To enable it, set the environment "
    "VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1."
)

#: W-U: KV cache spec unification with HMA disabled on a hybrid model.
W_U = (
    "Hybrid KV cache manager is disabled for this hybrid model, This means we do not enable any "
    "optimizations for saving KV cache memory (e.g., dropping the KV cache outside the sliding window). "
    "The compute of layers like sliding window is still saved."
)

# Errors ------------------------------------------------------------------------------------------

#: E-B: seed explicit enable that cannot be honoured (0.13-0.32).
E_B = (
    "Hybrid KV cache manager was explicitly enabled but is not supported in this configuration. Consider "
    "omitting the --no-disable-hybrid-kv-cache-manager flag to let vLLM decide automatically."
)

#: E-C: the 0.33 explicit enable error, naming the new spelling.
E_C = (
    "Hybrid KV cache manager was explicitly enabled but is not supported in this configuration. Consider "
    "omitting the --enable-hybrid-kv-cache-manager flag to let vLLM decide automatically."
)

#: E-H: HiSparse needs HMA (0.30+).
E_H = (
    "HiSparse requires the hybrid KV cache manager; remove --disable-hybrid-kv-cache-manager or use "
    "connectors that support HMA."
)

#: HiSparse prerequisite checked before the HMA block (0.30-0.33).
E_HISPARSE_CUDA = "HiSparse currently requires NVIDIA CUDA."
#: The same check from 0.34, asking the platform for a HiSparse backend (only CUDA has one in vLLM).
E_HISPARSE_PLATFORM = "The current platform does not support HiSparse."
#: 0.34, after the offloading shortcut: HiSparse is on but no HiSparseConnector gives a host pool size.
E_HISPARSE_NEEDS_CONNECTOR = (
    "HiSparse requires a KV transfer config with HiSparseConnector and host_pool_gib; to combine it with "
    "another connector, nest both in MultiConnector instead of using --kv-offloading-size."
)
#: 0.34 host pool checks of the HiSparseConnector entry (top level, or direct children of a MultiConnector).
E_HISPARSE_TWO = "Only one HiSparseConnector may be configured"
E_HISPARSE_NO_HOST_POOL = "HiSparseConnector requires host_pool_gib"
E_HISPARSE_HOST_POOL_NOT_POSITIVE = "HiSparseConnector host_pool_gib must be positive"
#: 0.34: the registry's NixlConnector with a `transfer_mode` other than "pull" or "push" (the value's repr).
E_NIXL_TRANSFER_MODE = "Invalid NixlConnector transfer_mode: {mode}"
#: 0.33: pydantic's refusal of a method outside SpeculativeConfig's Literal (as the vllm target renders it on
#: one line); `{choices}` is "'a', 'b' or 'c'".
E_SPECULATIVE_LITERAL = "1 validation error for SpeculativeConfig: method: Input should be {choices}"
#: 0.34: SpeculativeConfig's method check of a name that is neither built in nor registered by a plugin.
E_UNKNOWN_SPECULATIVE_METHOD = (
    "Unknown speculative method {method!r}. Built-in methods: {builtin}; registered custom methods: {custom}."
)

#: E-F: the connector factory's capability check; `{connector}` is the class's __name__.
E_F = (
    "Connector {connector} does not support HMA but HMA is enabled. Please set "
    "`--disable-hybrid-kv-cache-manager`."
)

#: MultiConnector.__init__ assertion, reachable only when the factory check was bypassed.
E_MULTI_ASSERT = "HMA should not be enabled unless all sub-connectors support it"

#: The connector modules that import a package vLLM does not require, looked up without it: LMCache's
#: (top-level `import lmcache`, 0.13+) and Mooncake's (0.13.0 re-raises the missing package as ImportError).
E_NO_LMCACHE = "No module named 'lmcache'"
E_NO_MOONCAKE = (
    "Please install mooncake by following the instructions at "
    "https://github.com/kvcache-ai/Mooncake/blob/main/doc/en/build.md to run VLLM with MooncakeTransferEngine."
)

E_CONNECTOR_NAME_NOT_SET = "Connector name is not set in KVTransferConfig"
E_UNSUPPORTED_CONNECTOR = "Unsupported connector type: {connector}"
E_CLASS_NOT_FOUND = "Class {connector} not found in {module}"
#: MultiConnector.__init__ without a "connectors" key (`assert ktcs is not None` has no message).
E_MULTI_NO_CONNECTORS = ""
#: vLLM 0.23.0 config/vllm.py:764-772, at the start of `_post_init_kv_transfer_config` (before the HMA block):
#: the configured connector is ExampleHiddenStatesConnector and chunked prefill is on (vLLM's default).
E_HIDDEN_STATES_CHUNKED_PREFILL = (
    "ExampleHiddenStatesConnector does not support chunked prefill. Please disable chunked prefill "
    "(--no-enable-chunked-prefill)."
)
#: vLLM 0.11.1 - 0.13.x config/vllm.py `_post_init_kv_transfer_config` (0.13.0: 484-487): the offloading backend
#: is set (it triggers the shortcut in those releases) but kv_offloading_size is not.
E_OFFLOAD_NO_SIZE = "You must set kv_offloading_size when kv_offloading_backend is set."
E_TWO_ARG = (
    "Connector {connector} uses deprecated 2-argument constructor signature. External v1 KV connectors must "
    "accept kv_cache_config as the third constructor argument and pass it to super().__init__()."
)
#: KVTransferConfig's pydantic field check rejects a kv_role outside the Literal before its own
#: `Unsupported kv_role` check can run (observed on vLLM 0.13.0 and 0.33.0); the text is pydantic's
#: error rendered on one line as the vllm target renders it (`harness.targets.config.vllm_outcome`).
E_KV_ROLE_INVALID = (
    "1 validation error for KVTransferConfig: kv_role: Input should be 'kv_producer', 'kv_both' or 'kv_consumer'"
)
#: argparse type `optional_type(json.loads)` (--speculative-config; --hf-overrides when it looks like an
#: object): vLLM formats the function itself, so the address is that of this process's `json.loads`.
E_NOT_CONVERTED = "Value {value} cannot be converted to {function}."
#: VllmConfig's field check of a --speculative-config that parsed as JSON but is not an object.
E_SPECULATIVE_NOT_OBJECT = (
    "1 validation error for VllmConfig: speculative_config: Input should be a dictionary or an instance of "
    "SpeculativeConfig"
)
E_KV_ROLE = (
    "Please specify kv_role when kv_connector is set, supported roles are "
    "('kv_producer', 'kv_both', 'kv_consumer')"
)
#: The V1 factory's refusal under the V0 engine (0.10.0 factory.py:59, 0.11.0 factory.py:46; 0.11.1 dropped the gate).
E_V1_CONNECTOR_UNDER_V0 = "Attempting to initialize a V1 Connector, but found envs.VLLM_USE_V1=False"
#: The same check before 0.11.1 named the field by an older name (0.10.0 config.py:3862, 0.11.0
#: config/kv_transfer.py:92).
E_KV_DISAGG_ROLE = (
    "Please specify kv_disagg_role when kv_connector is set, supported roles are "
    "('kv_producer', 'kv_both', 'kv_consumer')"
)

#: KV cache grouping with HMA disabled on a hybrid model that cannot be unified.
E_UNIFY_SEED = (
    "Hybrid KV cache manager is disabled but failed to convert the KV cache specs to one unified type."
)
E_UNIFY_V033 = "Failed to promote local KV cache specs to one unified type."

#: argparse's rejection of an unknown option (SystemExit(2)).
E_UNRECOGNIZED_ARGUMENTS = "unrecognized arguments: {arguments}"
