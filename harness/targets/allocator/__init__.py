"""The allocator target: the protocol the allocator suite drives, its one adapter (the reference or a vLLM release's
`v1/core` modules) and the capability table probed from those modules."""
