"""The step-driven mini engine: a scheduler over `KVCacheManager`, workers over the paged torch KV tensors,
and the KV connector hooks called in vLLM 0.33's order (spec connector.md sections 1.6 and the appendix)."""
