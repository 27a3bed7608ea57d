"""The reference engine: vLLM-shaped config resolution, the hybrid KV cache allocator and connectors.

This package imports neither `harness` nor `suites`."""
