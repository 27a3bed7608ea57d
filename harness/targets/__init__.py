"""The implementations the suites run against, by kind: `config`, `allocator`, `connector` (each with its reference
form, its vLLM form and its capabilities); `vllm_install` finds the installed vLLM for all three. How a target is named
and loaded: `harness.target_spec`."""
