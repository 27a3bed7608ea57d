"""Running vLLM's own test files against the reference implementation (the "upstream" CI job)."""
