"""The implementations the suites run against besides the reference: vLLM's (config, allocator, connectors)
and the adapters between them and the suites. How a target is named and loaded: `harness.target_spec`."""
